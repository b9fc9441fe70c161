"""KRaft's consensus core as a sans-IO state machine: ``step(now, event) -> actions``.

One :class:`RaftCore` is one replica of ``__cluster_metadata``: a voter (one of
``voters``) or an observer (a broker: it fetches but never votes or counts). It follows
Kafka's KafkaRaftClient and QuorumState:

* **Roles** (QuorumState): unattached (no leader known; maybe voted), prospective
  (pre-vote, KIP-996: asks "would you vote for me?" without bumping the epoch),
  candidate (epoch + 1, voted for itself), leader, follower, resigned (a leader that
  stepped down and waits for the next election).
* **Votes**: the quorum-state file (epoch, voted-for, leader) is persisted before any
  vote or epoch change is acted on (:class:`PersistElection` comes before the Send). A
  vote is granted once per epoch, to a candidate whose log is at least as up to date
  (last epoch, then end offset). A pre-vote is refused by a voter that fetches from a
  live leader, so a partitioned voter cannot depose a healthy leader when it returns.
* **Replication**: followers fetch (Fetch with LastFetchedEpoch); the leader answers
  with entries, a DivergingEpoch (from its epoch cache) to make the follower truncate,
  or a SnapshotId when the offset is below its log start; empty fetches are parked up
  to ``fetch_max_wait_ms``. A follower acknowledges only what it has flushed: it sends
  its next Fetch (whose offset is its flushed end) only after :class:`FlushDone`.
* **Commit**: the leader's high watermark is the largest offset a majority of voters
  (its own flushed end included, observers never) has reached, and it moves only once
  an entry of the leader's own epoch is committed: every leader starts its epoch by
  appending a LeaderChange control entry.
* **Check quorum**: a leader that has not heard a Fetch from a majority of voters within
  1.5 × ``fetch_timeout_ms`` resigns, so a paused or partitioned leader steps down.
* **A lone voter** (the voter set is this node alone): it elects itself as soon as it
  starts (no election timeout: pre-vote, vote and leadership in one step) and its flushed
  end is the high watermark once its epoch's LeaderChange is flushed.
* **Unformatted voters** (``can_vote=False``: a voter whose storage was not formatted
  for this voter set, e.g. a new or wiped data dir): it neither stands for election nor
  grants a vote or pre-vote, and finds the leader as an observer does; once it follows
  a leader (which the other voters elected) it votes normally. So an empty voter never
  wins an election against voters that already have a log, and a majority of empty
  voters elects nobody.
* **Dynamic voters** (KIP-853, ``kraft_version`` 1): the voter set is a control entry
  in the log (:mod:`.voters`); a replica uses the latest one in its log, committed or not,
  from the moment it is appended (a truncation takes it back), and the bootstrap set
  given at construction only while the log and snapshot hold none — the first leader
  writes it right after its LeaderChange entry. The leader changes it one voter at a time
  (:class:`AddVoter`, :class:`RemoveVoter`), only once an entry of its epoch is committed
  and the previous change is committed; a voter is added only while it fetches as a
  caught-up observer. The leader counts only the voters of the current set for the high
  watermark and check quorum (itself only while it is one); a leader that removed
  itself resigns once that change commits. A replica that is not a voter grants votes as
  a voter does (its voter set may be behind the candidate's). With ``kraft_version`` 0
  (static ``controller.quorum.voters``) the set never changes and only voters vote.

Time is the ``now`` argument (ms); randomness (election timeouts) comes from the
``rng`` given at construction, so a run is reproducible from its seed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from . import messages as m
from .actions import (
    Action, AddVoter, Append, ClientAppend, Committed, ElectionState, Event, Flush, FlushDone,
    InstallSnapshot, NotLeaderError, PersistElection, Received, RemoveVoter, Resign, RoleChanged, Send,
    SendFailed, SnapshotCreated, Tick, TrimLog, VoterChangeError,
)
from .config import RaftConfig
from .log import RaftLog
from .replication import Replication
from .voters import VoterSet, read_voters, voters_payload

__all__ = ["RaftCore", "leader_change_payload"]

NONE = int(m.ErrorCode.none)
FENCED = int(m.ErrorCode.fenced_leader_epoch)
INCONSISTENT_VOTERS = int(m.ErrorCode.inconsistent_voter_set)
NOT_LEADER = int(m.ErrorCode.not_leader_or_follower)
UNKNOWN_EPOCH = int(m.ErrorCode.unknown_leader_epoch)
TIMED_OUT = int(m.ErrorCode.request_timed_out)
UNSUPPORTED_VERSION = int(m.ErrorCode.unsupported_version)
DUPLICATE_VOTER = int(m.ErrorCode.duplicate_voter)
VOTER_NOT_FOUND = int(m.ErrorCode.voter_not_found)
#: Kafka's LeaderState.isReplicaCaughtUp: an observer that reached the leader's end and
#: fetched within the last hour may be added as a voter.
CAUGHT_UP_WINDOW_MS = 3_600_000


def leader_change_payload(leader_id: int, voters: Sequence[int]) -> bytes:
    """The LeaderChange control entry's payload (the shell encodes Kafka's
    LeaderChangeMessage from it: leader id, voters, granting voters)."""
    return json.dumps({"leader": leader_id, "voters": sorted(voters)}).encode()


class RaftCore(Replication):
    """One replica's Raft state. Not thread-safe; every call returns the actions to run.

    Construct it from what survived on disk (``election`` from the quorum-state file,
    ``log`` from the log and the latest snapshot, ``snapshot_data`` its bytes), then call
    :meth:`step` with a :class:`Tick` to start its timers.
    """

    def __init__(self, node_id: int, voters: Sequence[int] | VoterSet, config: RaftConfig,
                 rng: random.Random, now: int, *, election: ElectionState | None = None,
                 log: RaftLog | None = None, snapshot_data: bytes = b"", can_vote: bool = True,
                 kraft_version: int = 0, directory_id: str = "", discovery: Sequence[int] = ()) -> None:
        self.node_id = node_id
        #: This replica's directory id (KIP-853's replica key; "" for a static voter).
        self.directory_id = directory_id
        #: 1: the voter set is dynamic, kept in the log (KIP-853); 0: static.
        self.kraft_version = kraft_version
        #: Node ids to find the leader from while no other voter is known (an observer
        #: started with ``controller.quorum.bootstrap.servers`` and an empty log).
        self.discovery = tuple(discovery)
        #: False until an unformatted voter follows a leader (see the module doc).
        self.can_vote = can_vote
        self.config = config
        self.rng = rng
        self.election = election or ElectionState(0)
        self.log = log or RaftLog()
        self.snapshot_data = snapshot_data
        self._bootstrap = voters if isinstance(voters, VoterSet) else VoterSet.of(voters)
        self._voter_log: list[tuple[int, VoterSet]] = []   # (base offset, set) of the log's voter entries
        self._base_voters = self._bootstrap                 # the set before the first of them
        self._base_in_log = False                           # ... read from a snapshot (not the bootstrap)
        self._restore_voters()
        self.voters = self.voter_set.ids
        self.is_voter = node_id in self.voters
        self.majority = len(self.voters) // 2 + 1
        self._resign_after_commit = False
        self.flushed_end = self.log.end_offset
        self.high_watermark = self.log.start_offset
        self._out: list[Action] = []
        self._cid = 0          # correlation id of the request being handled
        self._last_cid = 0
        self.role = "unattached"
        self._grants: set[int] = set()
        self._rejects: set[int] = set()
        self._vote_requests: dict[int, int] = {}     # voter -> correlation id
        self._vote_retry_at: dict[int, int] = {}
        self._backing_off = False
        self._retries = 0                            # election rounds lost in a row
        self.election_deadline: int | None = None
        # (epoch, leader) of the last EndQuorumEpoch: that leader resigned for good in
        # that epoch, so a late message still naming it (its parked Fetch's error answer,
        # a voter that has not heard of the resignation yet) must not make us follow it.
        self._ended: tuple[int, int] = (-1, -1)
        self._init_replication(now)
        self._restore_role(now)
        self._startup = self._out    # handed out by the first step (a follower's Fetch)

    # --- public --------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.election.epoch

    @property
    def leader_id(self) -> int:
        """The leader of the current epoch this node knows, -1 if none."""
        if self.role == "leader":
            return self.node_id
        return self.election.leader_id if self.role == "follower" else -1

    def step(self, now: int, event: Event) -> list[Action]:
        """Feed one event at time ``now``; returns the actions to carry out, in order.

        The first call also returns what restoring the role produced (a restarted
        follower's first Fetch). Raises :class:`NotLeaderError` for a
        :class:`ClientAppend` on a non-leader and ValueError for a
        :class:`SnapshotCreated` past the high watermark.
        """
        out: list[Action] = self._startup
        self._startup = []
        self._out = out
        try:
            self._dispatch(now, event)
        except (NotLeaderError, ValueError, VoterChangeError):
            self._startup = out     # nothing else was emitted: the checks come first
            raise
        finally:
            self._out = []
        return out

    def _dispatch(self, now: int, event: Event) -> None:
        self._dispatch_event(now, event)
        if self._resign_after_commit:
            self._resign_after_commit = False
            if self.role == "leader":
                self._resign(now)

    def _dispatch_event(self, now: int, event: Event) -> None:
        if isinstance(event, Received):
            self._cid = event.correlation_id
            self._on_message(now, event.source, event.message)
        elif isinstance(event, Tick):
            self._on_timers(now)
        elif isinstance(event, ClientAppend):
            self._on_client_append(now, event.payloads, event.counts)
        elif isinstance(event, FlushDone):
            self._on_flush_done(now, event.end_offset)
        elif isinstance(event, SnapshotCreated):
            self._on_snapshot_created(now, event)
        elif isinstance(event, SendFailed):
            self._on_send_failed(now, event.dest, event.correlation_id)
        elif isinstance(event, Resign):
            if self.role == "leader":
                self._resign(now)
        elif isinstance(event, AddVoter):
            self._on_add_voter(now, event)
        elif isinstance(event, RemoveVoter):
            self._on_remove_voter(now, event)

    @property
    def next_deadline(self) -> int | None:
        """The earliest time a :class:`Tick` has work to do; None when nothing is timed."""
        deadlines = [d for d in (self.election_deadline, self._replication_deadline(),
                                 *self._vote_retry_at.values()) if d is not None]
        return min(deadlines) if deadlines else None

    # --- roles ---------------------------------------------------------------------------

    def _restore_role(self, now: int) -> None:
        e = self.election
        if e.leader_id == self.node_id:
            # Kafka: a restarted leader resigns and tells the voters (EndQuorumEpoch)
            self._set_role(now, "resigned")
            self.election_deadline = now + self._election_timeout()
            end = m.EndQuorumEpochRequest(self.node_id, self.epoch, ())
            for v in self.voters:
                if v != self.node_id:
                    self._request(v, end)
        elif e.leader_id >= 0:
            self._become_follower(now, e.epoch, e.leader_id)
        else:
            self._become_unattached(now, e.epoch, e.voted_for)

    def _set_role(self, now: int, role: str) -> None:
        self._leave_replication_role(now)
        self.role = role
        self.election_deadline = None
        self._vote_requests, self._vote_retry_at = {}, {}
        self._backing_off = False
        self._out.append(RoleChanged(role, self.epoch, self.leader_id))

    def _persist(self, state: ElectionState, *, durable: bool = True) -> None:
        self.election = state
        if durable:
            self._out.append(PersistElection(state))

    @property
    def lone_voter(self) -> bool:
        """This node is the only voter (``hightide serve``, a lone controller): nobody
        else can vote or lead, so it stands for election at once (Kafka's
        ``QuorumState.isOnlyVoter``) and commits what it has flushed."""
        return self.voters == (self.node_id,)

    def _election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        if self.lone_voter:
            return 0  # no one to wait for: an election round is won as it starts
        return t + self.rng.randrange(t) if t > 0 else 0

    def _become_unattached(self, now: int, epoch: int, voted_for: int = -1) -> None:
        if epoch != self.epoch or self.election.leader_id != -1 or voted_for != self.election.voted_for:
            self._persist(ElectionState(epoch, voted_for, -1))
        self._set_role(now, "unattached")
        if self.is_voter and self.can_vote:
            self.election_deadline = now + self._election_timeout()
        else:
            self._start_discovery(now)

    def _become_follower(self, now: int, epoch: int, leader_id: int) -> None:
        voted = self.election.voted_for if epoch == self.epoch else -1
        if ElectionState(epoch, voted, leader_id) != self.election:
            self._persist(ElectionState(epoch, voted, leader_id))
        self._set_role(now, "follower")
        self._retries = 0
        self.can_vote = True  # a leader the others elected: this voter's storage is part of the quorum now
        self._start_following(now)

    def _become_prospective(self, now: int) -> None:
        if not self.is_voter:
            self._become_unattached(now, self.epoch)  # removed from the voters: an observer now
            return
        if not self.can_vote:
            self._become_unattached(now, self.epoch)  # look for the leader instead
            return
        if not self.config.pre_vote:
            self._become_candidate(now)      # Kafka before 4.0 (no KIP-996)
            return
        self._set_role(now, "prospective")
        self._start_election_round(now)
        if len(self._grants) >= self.majority:
            self._become_candidate(now)
            return
        self._send_vote_requests(now)

    def _become_candidate(self, now: int) -> None:
        self._persist(ElectionState(self.epoch + 1, self.node_id, -1))
        self._set_role(now, "candidate")
        self._start_election_round(now)
        if len(self._grants) >= self.majority:
            self._become_leader(now)
            return
        self._send_vote_requests(now)

    def _start_election_round(self, now: int) -> None:
        self._grants, self._rejects = {self.node_id}, set()
        self._vote_requests, self._vote_retry_at = {}, {}
        self._backing_off = False
        self.election_deadline = now + self._election_timeout()

    def _send_vote_requests(self, now: int, only: int | None = None) -> None:
        """(Re)send this round's Vote (or PreVote) to the voters that have not answered."""
        end = self.log.end_offset_and_epoch()
        request = m.VoteRequest(self.node_id, self.epoch, end.epoch, end.offset,
                                pre_vote=self.role == "prospective")
        for v in self.voters:
            if v != self.node_id and v not in self._grants and v not in self._rejects \
                    and (only is None or v == only):
                self._vote_requests[v] = self._request(v, request)
                self._vote_retry_at.pop(v, None)

    def _back_off(self, now: int) -> None:
        """Kafka's binaryExponentialElectionBackoffMs: the election round is lost; wait a
        random backoff that doubles with each lost round, then start a new one."""
        self._retries += 1
        base = 100 * self.rng.randrange(2 << min(20, self._retries - 1))
        self.election_deadline = now + min(base, self.config.election_backoff_max_ms)
        self._backing_off = True
        self._vote_retry_at = {}

    def _become_leader(self, now: int) -> None:
        self._persist(ElectionState(self.epoch, self.node_id, self.node_id))
        self._set_role(now, "leader")
        self._retries = 0
        build = self.config.leader_change_payload
        payload = (build(self.node_id, self.epoch, self.voters, sorted(self._grants)) if build is not None
                   else leader_change_payload(self.node_id, self.voters))
        self._start_leading(now, payload)
        if self.kraft_version >= 1 and not self._voter_log and not self._base_in_log:
            # The voter set is only the bootstrap's: write it, so every replica (and every
            # observer that joins later) reads it from the log (Kafka's leader does this
            # in its first epoch).
            self._append_entries((self._voters_entry(self.voter_set),))
        begin = m.BeginQuorumEpochRequest(self.node_id, self.epoch)
        for v in self.voters:
            if v != self.node_id:
                self._request(v, begin)

    def _resign(self, now: int) -> None:
        successors = self._preferred_successors()
        self._set_role(now, "resigned")
        self.election_deadline = now + self._election_timeout()
        end = m.EndQuorumEpochRequest(self.node_id, self.epoch, successors)
        for v in self.voters:
            if v != self.node_id:
                self._request(v, end)

    def _observe_leader(self, now: int, epoch: int, leader_id: int) -> bool:
        """Kafka's maybeHandleCommonResponse: follow a newer epoch, or a leader of ours.

        Returns True if the role changed (the message is then stale for the old role).
        """
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._become_follower(now, epoch, leader_id)
            else:
                self._become_unattached(now, epoch)
            return True
        if (epoch == self.epoch and leader_id >= 0 and leader_id != self.node_id
                and self.role in ("unattached", "prospective", "candidate")):
            if (epoch, leader_id) == self._ended:
                return False             # it resigned in this epoch: never follow it again
            if self.role == "prospective" and leader_id == self.election.leader_id:
                # The leader we stopped hearing from: a voter that still names it (its
                # own fetch timer has not run out yet) is no reason to wait on it again.
                return False
            self._become_follower(now, epoch, leader_id)
            return True
        return False

    # --- timers --------------------------------------------------------------------------

    def _on_timers(self, now: int) -> None:
        if self.election_deadline is not None and now >= self.election_deadline:
            if self.role in ("prospective", "candidate") and not self._backing_off:
                self._back_off(now)       # the round timed out: back off, then retry
            else:
                # Unattached, resigned, or a backoff that ended: start with a pre-vote
                # round (Kafka 4: a candidate that lost becomes prospective).
                self.election_deadline = None
                self._become_prospective(now)
        for v, at in list(self._vote_retry_at.items()):
            if now >= at:
                self._send_vote_requests(now, only=v)
        self._replication_timers(now)

    def _on_send_failed(self, now: int, dest: int, correlation_id: int) -> None:
        """The connection to ``dest`` failed: retry a vote after ``retry_backoff_ms``
        (Kafka's RequestManager), and a fetch likewise."""
        if self._vote_requests.get(dest) == correlation_id and not self._backing_off:
            self._vote_retry_at[dest] = now + self.config.retry_backoff_ms
        self._fetch_failed(now, dest, correlation_id)

    # --- messages ------------------------------------------------------------------------

    def _on_message(self, now: int, source: int, msg: m.Message) -> None:
        if isinstance(msg, m.FetchRequest):
            self._on_fetch(now, source, msg)
        elif isinstance(msg, m.FetchResponse):
            self._on_fetch_response(now, source, msg)
        elif isinstance(msg, m.VoteRequest):
            self._on_vote(now, source, msg)
        elif isinstance(msg, m.VoteResponse):
            self._on_vote_response(now, source, msg)
        elif isinstance(msg, m.BeginQuorumEpochRequest):
            self._on_begin_epoch(now, source, msg)
        elif isinstance(msg, m.EndQuorumEpochRequest):
            self._on_end_epoch(now, source, msg)
        elif isinstance(msg, m.FetchSnapshotRequest):
            self._on_fetch_snapshot(now, source, msg)
        elif isinstance(msg, m.FetchSnapshotResponse):
            self._on_fetch_snapshot_response(now, source, msg)
        else:  # Begin/EndQuorumEpoch responses carry only the responder's view
            self._observe_leader(now, msg.leader_epoch, msg.leader_id)

    def _vote_response(self, error: int, granted: bool) -> m.VoteResponse:
        return m.VoteResponse(error, self.leader_id, self.epoch, granted)

    def _on_vote(self, now: int, source: int, req: m.VoteRequest) -> None:
        if req.replica_epoch < self.epoch:
            self._reply(source, self._vote_response(FENCED, False))
            return
        if self.kraft_version == 0 and (not self.is_voter or req.replica_id not in self.voters):
            self._reply(source, self._vote_response(INCONSISTENT_VOTERS, False))
            return
        if not req.pre_vote and req.replica_epoch > self.epoch:
            self._become_unattached(now, req.replica_epoch)
        end = self.log.end_offset_and_epoch()
        up_to_date = (req.last_offset_epoch, req.last_offset) >= (end.epoch, end.offset)
        if req.pre_vote:
            granted = up_to_date and self.can_vote and self._can_grant_pre_vote(req)
        else:
            granted = up_to_date and self.can_vote and self._can_grant_vote(req.replica_id)
            if granted and self.election.voted_for != req.replica_id:
                state = ElectionState(self.epoch, req.replica_id, -1)
                self._persist(state, durable="vote_without_persist" not in self.config.unsafe)
                self.election_deadline = now + self._election_timeout()
        self._reply(source, self._vote_response(NONE, granted))

    def _can_grant_pre_vote(self, req: m.VoteRequest) -> bool:
        if req.replica_epoch > self.epoch:
            return True
        if self.role == "leader" or self.role == "resigned":
            return False
        if self.role == "follower":
            return not self.has_fetched_from_leader
        return True

    def _can_grant_vote(self, candidate: int) -> bool:
        if self.role in ("leader", "follower", "resigned"):
            return False
        if self.role == "candidate":
            return candidate == self.node_id
        return self.election.voted_for in (-1, candidate)

    def _on_vote_response(self, now: int, source: int, resp: m.VoteResponse) -> None:
        if self._observe_leader(now, resp.leader_epoch, resp.leader_id):
            return
        if self._vote_requests.get(source) != self._cid:
            return                        # not an answer to this round's request
        if self.role == "prospective" or (self.role == "candidate"
                                          and resp.leader_epoch == self.epoch):
            (self._grants if resp.vote_granted else self._rejects).add(source)
            self._vote_retry_at.pop(source, None)
            if len(self._grants.intersection(self.voters)) >= self.majority and not self._backing_off:
                if self.role == "prospective":
                    self._become_candidate(now)
                else:
                    self._become_leader(now)
            elif len(self._rejects) >= self.majority and not self._backing_off:
                known = self.election.leader_id
                if self.role == "prospective" and known >= 0:
                    # A majority still follows the leader we lost: fetch from it again
                    # (Kafka's ProspectiveState goes back to following).
                    self._become_follower(now, self.epoch, known)
                else:
                    # Lost (a pre-vote spends no epoch): back off at once rather than
                    # wait for the election timeout.
                    self._back_off(now)

    def _on_begin_epoch(self, now: int, source: int, req: m.BeginQuorumEpochRequest) -> None:
        if req.leader_epoch < self.epoch:
            self._reply(source, m.BeginQuorumEpochResponse(
                FENCED, self.leader_id, self.epoch))
            return
        if (req.leader_epoch, req.leader_id) == self._ended:  # a late copy from before it resigned
            self._reply(source, m.BeginQuorumEpochResponse(NONE, self.leader_id, self.epoch))
            return
        if not (self.role == "follower" and req.leader_epoch == self.epoch):
            if req.leader_epoch == self.epoch and self.role in ("leader", "resigned"):
                raise AssertionError(
                    f"node {self.node_id}: two leaders in epoch {self.epoch}")
            self._become_follower(now, req.leader_epoch, req.leader_id)
        self._reply(source, m.BeginQuorumEpochResponse(
            NONE, self.leader_id, self.epoch))

    def _on_end_epoch(self, now: int, source: int, req: m.EndQuorumEpochRequest) -> None:
        if req.leader_epoch < self.epoch:
            self._reply(source, m.EndQuorumEpochResponse(
                FENCED, self.leader_id, self.epoch))
            return
        if req.leader_epoch > self.epoch:
            self._become_unattached(now, req.leader_epoch)
        self._ended = (req.leader_epoch, req.leader_id)
        if self.role in ("follower", "unattached") and self.leader_id in (-1, req.leader_id):
            # Kafka: the first preferred successor starts at once, the others back off
            # exponentially by their position, so the most caught-up voter wins.
            backoff = self._successor_backoff(req.preferred_successors)
            if self.role == "follower":
                self._set_role(now, "unattached")
                self._persist(ElectionState(self.epoch, self.election.voted_for, -1))
            self.election_deadline = now + backoff
        self._reply(source, m.EndQuorumEpochResponse(NONE, self.leader_id, self.epoch))

    def _successor_backoff(self, successors: tuple[int, ...]) -> int:
        """Kafka's strictExponentialElectionBackoffMs: 0 for the first successor, then
        doubling by position up to ``election_backoff_max_ms`` (the max if absent)."""
        top = self.config.election_backoff_max_ms
        if self.node_id not in successors:
            return top
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        base = top >> (len(successors) - 1)
        return min(top, base << (position - 1))

    # --- application ---------------------------------------------------------------------

    def _on_client_append(self, now: int, payloads: tuple[bytes, ...], counts: tuple[int, ...]) -> None:
        if self.role != "leader":
            raise NotLeaderError(self.leader_id, self.epoch)
        if counts and len(counts) != len(payloads):
            raise ValueError("ClientAppend: one count per payload")
        entries = tuple(m.Entry(self.epoch, p, counts[i] if counts else 1) for i, p in enumerate(payloads))
        self._append_as_leader(now, entries)

    def _on_flush_done(self, now: int, end_offset: int) -> None:
        # Flushes complete in the order they were asked; one asked before a truncation
        # only vouches for the offsets below the truncation point.
        if not self._pending_flushes:
            return
        vouched = self._pending_flushes.pop(0)
        self.flushed_end = max(self.flushed_end, min(vouched, end_offset, self.log.end_offset))
        self._after_flush(now)

    def _on_snapshot_created(self, now: int, event: SnapshotCreated) -> None:
        sid = event.snapshot_id
        if sid.offset > self.high_watermark:
            raise ValueError(f"snapshot at {sid.offset} past the high watermark {self.high_watermark}")
        if sid.offset <= self.log.start_offset:
            return
        if not self.log.is_boundary(sid.offset) or self.log.epoch_at(sid.offset - 1) != sid.epoch:
            raise ValueError(f"snapshot {sid} does not end at an entry of epoch {sid.epoch}")
        self.log.trim_to_snapshot(sid)
        self.snapshot_data = event.data
        below = [vs for off, vs in self._voter_log if off < sid.offset]
        if below:   # the snapshot holds the voter set in effect at its end
            self._base_voters, self._base_in_log = below[-1], True
            self._voter_log = [(off, vs) for off, vs in self._voter_log if off >= sid.offset]
        self._out.append(TrimLog(sid))

    def _emit_committed(self, hw: int) -> None:
        self.high_watermark = hw
        self._out.append(Committed(hw))

    def _emit(self, action: Action) -> None:
        self._out.append(action)

    def _reply(self, dest: int, message: m.Message, correlation_id: int | None = None) -> None:
        """Answer the request being handled (or the one ``correlation_id`` names)."""
        cid = self._cid if correlation_id is None else correlation_id
        self._out.append(Send(dest, message, cid))

    def _request(self, dest: int, message: m.Message) -> int:
        """Send a request under a new correlation id; returns the id."""
        self._last_cid += 1
        self._out.append(Send(dest, message, self._last_cid))
        return self._last_cid

    def _install_snapshot(self, sid: m.OffsetAndEpoch, data: bytes) -> None:
        self.log.reset_to_snapshot(sid)
        self.snapshot_data = data
        held = self._read_voters(data)
        if held is not None:
            self.kraft_version = max(self.kraft_version, 1)
        self._base_voters, self._base_in_log = held or self.voter_set, held is not None or self._base_in_log
        self._voter_log = []
        self._voters_changed()
        self.flushed_end = self.log.end_offset
        self._pending_flushes = []
        self._out.append(InstallSnapshot(sid, data))
        if sid.offset > self.high_watermark:
            self._emit_committed(sid.offset)

    def _append_entries(self, entries: tuple[m.Entry, ...]) -> int:
        base = self.log.end_offset
        changed = False
        for e in entries:
            offset = self.log.append(e)
            if e.control:
                held = self._read_voters(e.payload)
                if held is not None:
                    self._voter_log.append((offset, held))
                    self.kraft_version = max(self.kraft_version, 1)
                    changed = True
        if changed:
            self._voters_changed()
        self._out.append(Append(base, entries))
        self._out.append(Flush(self.log.end_offset))
        self._pending_flushes.append(self.log.end_offset)
        return base

    # --- the voter set (KIP-853) ---------------------------------------------------------

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in effect: the latest in the log (committed or not), else the
        snapshot's, else the bootstrap set."""
        return self._voter_log[-1][1] if self._voter_log else self._base_voters

    @property
    def voter_change_offset(self) -> int:
        """Base offset of the latest voter-set entry in the log; -1 if the log holds none."""
        return self._voter_log[-1][0] if self._voter_log else -1

    def voters_at(self, offset: int) -> VoterSet:
        """The voter set in effect for a snapshot ending at ``offset`` (entries below it)."""
        below = [vs for off, vs in self._voter_log if off < offset]
        return below[-1] if below else self._base_voters

    def _read_voters(self, data: bytes) -> VoterSet | None:
        read = self.config.read_voters
        return read(data) if read is not None else read_voters(data)

    def _voters_entry(self, voters: VoterSet) -> m.Entry:
        build = self.config.voters_payload
        payload, count = build(voters, self.epoch) if build is not None else (voters_payload(voters), 1)
        return m.Entry(self.epoch, payload, count, control=True)

    def _restore_voters(self) -> None:
        held = self._read_voters(self.snapshot_data) if self.snapshot_data else None
        if held is not None:
            # a snapshot at offset 0 is the bootstrap checkpoint (format --initial-controllers):
            # its voter set is not in the log yet, the first leader writes it there
            self._base_voters, self._base_in_log = held, self.log.start_offset > 0
        for offset, entry in self.log.entries():
            if entry.control:
                vs = self._read_voters(entry.payload)
                if vs is not None:
                    self._voter_log.append((offset, vs))
        if self._voter_log or held is not None:
            self.kraft_version = max(self.kraft_version, 1)

    def _voters_changed(self) -> None:
        """The voter set changed (an append, a truncation, a snapshot): recount. A leader
        moves the progress of a new voter from the observers' (and a removed one's back)."""
        ids = self.voter_set.ids
        if ids == self.voters:
            return
        self.voters = ids
        self.is_voter = self.node_id in ids
        self.majority = len(ids) // 2 + 1
        if self.role == "leader":
            for v in ids:
                if v != self.node_id and v not in self.progress:
                    self.progress[v] = self.observer_progress.pop(v, 0)
            for v in list(self.progress):
                if v not in ids:
                    self.observer_progress[v] = self.progress.pop(v)
            self._fetched_since_check &= set(ids)
            if not self.progress:
                self._check_deadline = None   # alone now: no majority to hear from (a lone voter)

    def _voters_truncated(self, offset: int) -> None:
        if self._voter_log and self._voter_log[-1][0] >= offset:
            self._voter_log = [(off, vs) for off, vs in self._voter_log if off < offset]
            self._voters_changed()

    def _check_voter_change(self) -> None:
        """Kafka's AddVoterHandler / RemoveVoterHandler preconditions, in their order."""
        if self.role != "leader":
            raise VoterChangeError(NOT_LEADER, f"node {self.node_id} is not the leader (leader {self.leader_id}, "
                                               f"epoch {self.epoch})")
        if self.high_watermark <= self.epoch_start_offset:
            raise VoterChangeError(TIMED_OUT, "Request timed out waiting for leader to establish HWM and fence "
                                              "previous voter changes")
        if self.kraft_version < 1:
            raise VoterChangeError(UNSUPPORTED_VERSION, "Cluster doesn't support changing voters because the "
                                                        "kraft.version feature is 0 (static controller.quorum.voters)")
        if self.voter_change_offset >= self.high_watermark:
            raise VoterChangeError(TIMED_OUT, f"Request timed out waiting for voters to commit the latest voter "
                                              f"change at {self.voter_change_offset} with HWM {self.high_watermark}")

    def _on_add_voter(self, now: int, event: AddVoter) -> None:
        self._check_voter_change()
        node = event.node
        voters = self.voter_set
        if voters.get(node.node_id) is not None:
            raise VoterChangeError(DUPLICATE_VOTER, f"The voter id for {node.node_id} is already part of the set "
                                                    f"of voters {list(voters.ids)}.")
        fetched = self.last_fetch_ms.get(node.node_id, -1)
        caught_up = self.last_caught_up_ms.get(node.node_id, -1)
        known_dir = self.observer_directory.get(node.node_id, "")
        if (node.node_id not in self.observer_progress or caught_up < 0 or fetched <= now - CAUGHT_UP_WINDOW_MS
                or (node.directory_id and known_dir and node.directory_id != known_dir)):
            raise VoterChangeError(TIMED_OUT, f"Aborted add voter operation for {node.node_id} since it is "
                                              "lagging behind (it must fetch from the leader as a caught-up "
                                              "observer first)")
        self._append_as_leader(now, (self._voters_entry(voters.adding(node)),))
        if self._check_deadline is None:   # a lone voter has another voter to hear from now
            self._check_deadline = now + self.config.check_quorum_timeout_ms

    def _on_remove_voter(self, now: int, event: RemoveVoter) -> None:
        self._check_voter_change()
        voters = self.voter_set
        node = voters.get(event.node_id)
        if node is None or not node.matches(event.node_id, event.directory_id) or len(voters.nodes) == 1:
            raise VoterChangeError(VOTER_NOT_FOUND, f"Cannot remove voter {event.node_id} from the set of voters "
                                                    f"{list(voters.ids)}")
        self._append_as_leader(now, (self._voters_entry(voters.removing(event.node_id)),))
