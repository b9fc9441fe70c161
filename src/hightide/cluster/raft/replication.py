"""Fetch-based replication of the Raft core: the leader's side and the follower's side.

A mixin of :class:`~hightide.cluster.raft.core.RaftCore` (it uses the core's log, role
and transitions). The leader learns each replica's progress only from the offsets it
fetches from: a valid Fetch at ``fetch_offset`` proves the replica holds (flushed) the
log up to it. Followers truncate on DivergingEpoch, load a snapshot on SnapshotId and
otherwise append, flush, and fetch again.
"""

from __future__ import annotations

import random

from . import messages as m
from .actions import Action, ElectionState, Send, Truncate
from .config import RaftConfig
from .log import RaftLog

__all__ = ["Replication"]

NONE = int(m.ErrorCode.none)
FENCED = int(m.ErrorCode.fenced_leader_epoch)
NOT_LEADER = int(m.ErrorCode.not_leader_or_follower)
UNKNOWN_EPOCH = int(m.ErrorCode.unknown_leader_epoch)
SNAPSHOT_NOT_FOUND = int(m.ErrorCode.snapshot_not_found)
POSITION_OUT_OF_RANGE = int(m.ErrorCode.position_out_of_range)


class Replication:
    """Leader and follower replication state and handlers (see the module docstring)."""

    # Provided by RaftCore.
    node_id: int
    voters: tuple[int, ...]
    discovery: tuple[int, ...]
    directory_id: str
    _resign_after_commit: bool
    _check_deadline: int | None
    is_voter: bool
    can_vote: bool
    majority: int
    config: RaftConfig
    rng: random.Random
    election: ElectionState
    log: RaftLog
    snapshot_data: bytes
    flushed_end: int
    high_watermark: int
    role: str
    _cid: int

    @property
    def epoch(self) -> int:
        raise NotImplementedError

    @property
    def leader_id(self) -> int:
        raise NotImplementedError

    def _emit(self, action: Action) -> None:
        raise NotImplementedError

    def _reply(self, dest: int, message: m.Message, correlation_id: int | None = None) -> None:
        raise NotImplementedError

    def _request(self, dest: int, message: m.Message) -> int:
        raise NotImplementedError

    def _emit_committed(self, hw: int) -> None:
        raise NotImplementedError

    def _append_entries(self, entries: tuple[m.Entry, ...]) -> int:
        raise NotImplementedError

    def _install_snapshot(self, sid: m.OffsetAndEpoch, data: bytes) -> None:
        raise NotImplementedError

    def _become_prospective(self, now: int) -> None:
        raise NotImplementedError

    def _become_unattached(self, now: int, epoch: int, voted_for: int = -1) -> None:
        raise NotImplementedError

    def _resign(self, now: int) -> None:
        raise NotImplementedError

    def _observe_leader(self, now: int, epoch: int, leader_id: int) -> bool:
        raise NotImplementedError

    def _voters_truncated(self, offset: int) -> None:
        raise NotImplementedError

    @property
    def voter_change_offset(self) -> int:
        raise NotImplementedError

    # --- state ---------------------------------------------------------------------------

    def _init_replication(self, now: int) -> None:
        self._pending_flushes: list[int] = []
        # follower / observer
        self.has_fetched_from_leader = False
        self.fetch_deadline: int | None = None
        self._in_flight_until: int | None = None
        self._in_flight_dest = -1
        self._in_flight_offset = -1
        self._in_flight_kind = ""
        self._in_flight_cid = -1
        self._next_fetch_at: int | None = None
        self._snapshot_fetch: tuple[m.OffsetAndEpoch, bytearray] | None = None
        # leader
        self.progress: dict[int, int] = {}
        self.observer_progress: dict[int, int] = {}
        self.observer_directory: dict[int, str] = {}  # observer -> directory id of its fetch
        self.last_fetch_ms: dict[int, int] = {}       # replica -> time of its last Fetch
        self.last_caught_up_ms: dict[int, int] = {}   # ... of its last Fetch at our end
        self.epoch_start_offset = -1
        self._fetched_since_check: set[int] = set()
        self._check_deadline: int | None = None
        self._parked: dict[int, tuple[m.FetchRequest, int, int]] = {}

    def _leave_replication_role(self, now: int) -> None:
        for source, (_, _, cid) in self._parked.items():
            self._reply(source, self._error_response(NOT_LEADER), cid)
        self._parked = {}
        self.progress, self.observer_progress, self.observer_directory = {}, {}, {}
        self.last_fetch_ms, self.last_caught_up_ms = {}, {}
        self._fetched_since_check = set()
        self._check_deadline = None
        self.has_fetched_from_leader = False
        self.fetch_deadline = self._in_flight_until = self._next_fetch_at = None
        self._snapshot_fetch = None

    def _replication_deadline(self) -> int | None:
        candidates = [self._check_deadline, self.fetch_deadline, self._in_flight_until,
                      self._next_fetch_at]
        candidates.extend(deadline for _, deadline, _ in self._parked.values())
        present = [d for d in candidates if d is not None]
        return min(present) if present else None

    def _replication_timers(self, now: int) -> None:
        if self.role == "leader":
            for source, (req, deadline, cid) in list(self._parked.items()):
                if now >= deadline:
                    del self._parked[source]
                    self._reply(source, self._answer_fetch(req), cid)
            if self._check_deadline is not None and now >= self._check_deadline:
                self._resign(now)     # check quorum: no majority fetched in time
            return
        if self.fetch_deadline is not None and now >= self.fetch_deadline:
            if self.is_voter and self.can_vote:
                self._become_prospective(now)
            else:
                self._become_unattached(now, self.epoch)
            return
        if self._in_flight_until is not None and now >= self._in_flight_until:
            self._in_flight_until = None          # request timed out: send again
            self._next_fetch_at = now
        if self._next_fetch_at is not None and now >= self._next_fetch_at:
            self._maybe_fetch(now)

    # --- leader --------------------------------------------------------------------------

    def _start_leading(self, now: int, leader_change: bytes) -> None:
        others = [v for v in self.voters if v != self.node_id]
        self.progress = {v: 0 for v in others}
        if others:
            self._check_deadline = now + self.config.check_quorum_timeout_ms
        self.epoch_start_offset = self._append_entries(
            (m.Entry(self.epoch, leader_change, control=True),))

    def _append_as_leader(self, now: int, entries: tuple[m.Entry, ...]) -> None:
        self._append_entries(entries)
        if "ack_unflushed" in self.config.unsafe:
            self._maybe_advance_hw()
        self._complete_parked()

    def _after_flush(self, now: int) -> None:
        if self.role == "leader":
            if self._maybe_advance_hw():
                self._complete_parked()
        elif self._next_fetch_at is None and self._in_flight_until is None:
            self._maybe_fetch(now)

    def _maybe_advance_hw(self) -> bool:
        """Move the HW to the offset a majority of voters reached, once it covers an
        entry of this epoch. Returns True if it moved."""
        unsafe = self.config.unsafe
        own = self.log.end_offset if "ack_unflushed" in unsafe else self.flushed_end
        # the leader counts itself only while it is a voter (KIP-853: it may have removed itself)
        offsets = sorted([own, *self.progress.values()] if self.is_voter else list(self.progress.values()),
                         reverse=True)
        candidate = offsets[0] if "hw_any_voter" in unsafe else offsets[self.majority - 1]
        if candidate <= self.high_watermark:
            return False
        if candidate <= self.epoch_start_offset and "hw_any_epoch" not in unsafe:
            return False
        self._emit_committed(candidate)
        if not self.is_voter and self.voter_change_offset < candidate:
            self._resign_after_commit = True   # its removal committed: step down (Kafka)
        return True

    def _preferred_successors(self) -> tuple[int, ...]:
        return tuple(sorted(self.progress, key=lambda v: (-self.progress[v], v)))

    def _error_response(self, error: int) -> m.FetchResponse:
        return m.FetchResponse(error, self.leader_id, self.epoch, self.high_watermark,
                               self.log.start_offset)

    def _check_leader_request(self, epoch: int) -> int:
        """Kafka's validateLeaderOnlyRequest: the error for a request in ``epoch``."""
        if epoch < self.epoch:
            return FENCED
        if epoch > self.epoch:
            return UNKNOWN_EPOCH
        return NONE if self.role == "leader" else NOT_LEADER

    def _validate_fetch(self, req: m.FetchRequest) -> m.FetchResponse | None:
        """A snapshot or diverging answer if the fetch position is not in our log."""
        log = self.log
        snapshot = m.FetchResponse(NONE, self.node_id, self.epoch, self.high_watermark,
                                   log.start_offset, snapshot_id=log.snapshot)
        if req.fetch_offset < log.start_offset:
            return snapshot
        if req.fetch_offset == 0:
            return None
        end = log.end_offset_for_epoch(req.last_fetched_epoch)
        if end.epoch == -1:
            return snapshot
        if end.epoch != req.last_fetched_epoch or end.offset < req.fetch_offset:
            return m.FetchResponse(NONE, self.node_id, self.epoch, self.high_watermark,
                                   log.start_offset, diverging_epoch=end)
        return None

    def _answer_fetch(self, req: m.FetchRequest) -> m.FetchResponse:
        invalid = self._validate_fetch(req)
        if invalid is not None:
            return invalid
        records = self.log.read(req.fetch_offset, self.config.fetch_max_entries)
        return m.FetchResponse(NONE, self.node_id, self.epoch, self.high_watermark,
                               self.log.start_offset, records=records)

    def _on_fetch(self, now: int, source: int, req: m.FetchRequest) -> None:
        error = self._check_leader_request(req.current_leader_epoch)
        if error != NONE:
            self._reply(source, self._error_response(error))
            return
        invalid = self._validate_fetch(req)
        if invalid is not None:
            self._reply(source, invalid)
            return
        moved = False
        self.last_fetch_ms[source] = now
        if req.fetch_offset >= self.log.end_offset:
            self.last_caught_up_ms[source] = now
        if source in self.progress:
            self.progress[source] = req.fetch_offset
            self._fetched_since_check.add(source)
            if len(self._fetched_since_check) + int(self.is_voter) >= self.majority:
                self._fetched_since_check = set()
                self._check_deadline = now + self.config.check_quorum_timeout_ms
            moved = self._maybe_advance_hw()
        else:
            self.observer_progress[source] = req.fetch_offset
            if req.replica_directory_id:
                self.observer_directory[source] = req.replica_directory_id
        if moved:
            self._complete_parked()
        if req.fetch_offset >= self.log.end_offset and not moved and req.max_wait_ms > 0:
            deadline = now + min(req.max_wait_ms, self.config.fetch_max_wait_ms)
            self._parked[source] = (req, deadline, self._cid)
            return
        self._reply(source, self._answer_fetch(req))

    def _complete_parked(self) -> None:
        parked, self._parked = self._parked, {}
        for source, (req, _, cid) in parked.items():
            self._reply(source, self._answer_fetch(req), cid)

    def _on_fetch_snapshot(self, now: int, source: int, req: m.FetchSnapshotRequest) -> None:
        error = self._check_leader_request(req.current_leader_epoch)
        sid = req.snapshot_id
        if error == NONE and self.log.snapshot != sid:
            error = SNAPSHOT_NOT_FOUND
        data = self.snapshot_data
        if error == NONE and not 0 <= req.position <= len(data):
            error = POSITION_OUT_OF_RANGE
        if error != NONE:
            self._reply(source, m.FetchSnapshotResponse(
                error, self.leader_id, self.epoch, sid, -1, -1, b""))
            return
        chunk = data[req.position:req.position + min(req.max_bytes, self.config.snapshot_chunk_bytes)]
        self._reply(source, m.FetchSnapshotResponse(
            NONE, self.node_id, self.epoch, sid, len(data), req.position, chunk))

    # --- follower and observer -----------------------------------------------------------

    def _start_following(self, now: int) -> None:
        self.fetch_deadline = now + self.config.fetch_timeout_ms
        self._maybe_fetch(now)

    def _start_discovery(self, now: int) -> None:
        """An observer without a leader asks a random voter (which answers with a hint)."""
        self._next_fetch_at = now
        self._maybe_fetch(now)

    def _maybe_fetch(self, now: int) -> None:
        """Send the next Fetch (or FetchSnapshot) unless one is in flight or an fsync of
        the appended entries is outstanding (a voter acknowledges only what it flushed)."""
        if self._in_flight_until is not None or self.role == "leader":
            return
        if self.role == "follower":
            dest = self.election.leader_id
        elif (not self.is_voter or not self.can_vote) and self.role == "unattached":
            others = [v for v in self.voters if v != self.node_id] or [d for d in self.discovery if d != self.node_id]
            if not others:
                return
            dest = self.rng.choice(others)
        else:
            return
        unflushed = self.flushed_end < self.log.end_offset
        if unflushed and "ack_unflushed" not in self.config.unsafe:
            self._next_fetch_at = None        # _after_flush sends it
            return
        self._next_fetch_at = None
        self._in_flight_until = now + self.config.request_timeout_ms
        self._in_flight_dest = dest
        self._in_flight_offset = self.log.end_offset
        self._in_flight_kind = "fetch" if self._snapshot_fetch is None else "snapshot"
        if self._snapshot_fetch is not None:
            sid, buf = self._snapshot_fetch
            self._in_flight_cid = self._request(dest, m.FetchSnapshotRequest(
                self.node_id, self.epoch, sid, len(buf), self.config.snapshot_chunk_bytes))
            return
        self._in_flight_cid = self._request(dest, m.FetchRequest(
            self.node_id, self.epoch, self.log.end_offset, self.log.last_epoch,
            self.log.start_offset, self.config.fetch_max_wait_ms, self.directory_id))

    def _fetch_failed(self, now: int, dest: int, correlation_id: int) -> None:
        if self._in_flight_until is not None and correlation_id == self._in_flight_cid:
            self._in_flight_until = None
            self._next_fetch_at = now + self.config.retry_backoff_ms

    def _fetch_answered(self, now: int, source: int, epoch: int, leader_id: int,
                        kind: str) -> bool:
        """Common part of (snapshot) fetch responses; True if the caller should go on."""
        if self._observe_leader(now, epoch, leader_id):
            return False
        if (source != self._in_flight_dest or self._in_flight_until is None
                or self._cid != self._in_flight_cid or kind != self._in_flight_kind
                or self._in_flight_offset != self.log.end_offset):
            return False                       # stale: not the request we wait for
        self._in_flight_until = None
        if self.role != "follower" or source != self.election.leader_id or epoch != self.epoch:
            self._next_fetch_at = now + self.config.retry_backoff_ms * 5
            return False
        return True

    def _on_fetch_response(self, now: int, source: int, resp: m.FetchResponse) -> None:
        if not self._fetch_answered(now, source, resp.leader_epoch, resp.leader_id, "fetch"):
            return
        if resp.error_code != NONE:
            self._next_fetch_at = now + self.config.retry_backoff_ms
            return
        self.has_fetched_from_leader = True
        self.fetch_deadline = now + self.config.fetch_timeout_ms
        if resp.diverging_epoch is not None:
            self._truncate_diverging(resp.diverging_epoch)
        elif resp.snapshot_id is not None:
            self._snapshot_fetch = (resp.snapshot_id, bytearray())
        else:
            if resp.records:
                self._append_entries(resp.records)
            hw = min(resp.high_watermark, self.log.end_offset)
            if hw > self.high_watermark:
                self._emit_committed(hw)
        self._maybe_fetch(now)

    def _truncate_diverging(self, diverging: m.OffsetAndEpoch) -> None:
        """Kafka's truncateToEndOffset: keep the longest prefix both logs agree on."""
        local = self.log.end_offset_for_epoch(diverging.epoch)
        if local.epoch == diverging.epoch:
            offset = min(local.offset, diverging.offset)
        else:
            offset = local.offset
        offset = max(offset, self.log.start_offset)
        if offset < self.log.end_offset:
            self.log.truncate_to(offset)
            self.flushed_end = min(self.flushed_end, offset)
            self._pending_flushes = [min(p, offset) for p in self._pending_flushes]
            self._voters_truncated(offset)
            self._emit(Truncate(offset))

    def _on_fetch_snapshot_response(self, now: int, source: int,
                                    resp: m.FetchSnapshotResponse) -> None:
        if not self._fetch_answered(now, source, resp.leader_epoch, resp.leader_id, "snapshot"):
            return
        fetch = self._snapshot_fetch
        if resp.error_code != NONE or fetch is None or fetch[0] != resp.snapshot_id:
            self._snapshot_fetch = None          # start over with a Fetch
            self._next_fetch_at = now + self.config.retry_backoff_ms
            return
        sid, buf = fetch
        if resp.position != len(buf):
            self._maybe_fetch(now)
            return
        self.has_fetched_from_leader = True
        self.fetch_deadline = now + self.config.fetch_timeout_ms
        buf += resp.unaligned_records
        if len(buf) >= resp.size:
            self._snapshot_fetch = None
            self._install_snapshot(sid, bytes(buf))
        self._maybe_fetch(now)
