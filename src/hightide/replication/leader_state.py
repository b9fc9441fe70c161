"""The leader's view of one replicated partition (Kafka's ``Partition`` leader half), sans-IO.

Theory of operation. A broker that leads a partition with more than one replica keeps a
:class:`LeaderReplicaState`: the assignment (replicas), the ISR the controller committed,
the leader and partition epochs, and for every follower what its fetches told
(:class:`FollowerState`: log end offset, when it was last caught up, its broker epoch).
Time is always an argument (``now_ms``); nothing here does IO. The shell
(``replica/manager.py``) feeds it events and acts on what it returns:

* a follower's Fetch (:meth:`LeaderReplicaState.on_follower_fetch`): the fetch offset is
  the follower's log end offset; the follower is *caught up* at a time t when its fetch
  offset reached the leader's LEO of t, or reached the LEO of its previous fetch (Kafka's
  ``lastCaughtUpTimeMs``, so a follower of a busy partition whose fetches are always one
  batch behind still counts as caught up);
* an append on the leader (:meth:`on_append`), a tick (:meth:`maybe_shrink`), an
  AlterPartition answer (:meth:`on_alter_partition_result`) and a metadata image change
  (:meth:`update`).

The high watermark (HW) is the lowest LEO over the *maximal ISR* (the committed ISR, plus
the replica being added while an expansion is in flight: KIP-497; a shrink in flight does
not count until committed, so a failed shrink cannot have advanced it) and over followers
that are caught up and eligible to join the ISR (Kafka waits for them so they can ever
join); the leader's own LEO included. It never moves back, never passes the LEO, and does
not advance at all while the committed ISR is smaller than the effective
``min.insync.replicas`` (min of it and the replica count: Kafka 3.7+, KIP-966).

ISR changes are proposals (:class:`IsrChange`) the shell sends as AlterPartition (56) to
the controller; at most one is in flight per partition (``pending``): no other change is
proposed until it is answered or the image overrides it. Expansion: a follower not in the
ISR, eligible (registered, unfenced, not shutting down, fetching with its current broker
epoch), whose LEO reached the HW and the start of the current leader epoch. Shrink: ISR
followers not caught up within ``replica.lag.time.max.ms``.

acks=all: :meth:`acks_outcome` says whether a write ending at ``required`` offset is done
(the HW passed it) and with which error: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the maximal
ISR shrank below the effective minimum meanwhile (Kafka's
``checkEnoughReplicasReachOffset``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from ..protocol.errors import ErrorCode

UNKNOWN_OFFSET = -1
NO_EPOCH = -1


class NotAReplica(Exception):
    """A Fetch came from a broker that is not a replica of the partition; carries the
    error to answer (UNKNOWN_LEADER_EPOCH when the fetch named a leader epoch, else
    NOT_LEADER_OR_FOLLOWER, as Kafka's ``followerReplicaOrThrow``)."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET  # its last fetch offset
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_leo: int = UNKNOWN_OFFSET  # the leader's LEO at its last fetch
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    broker_epoch: int | None = None  # from its last fetch (-1: the fetch carried none)

    def caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's ``isCaughtUp``: at the leader's LEO now, or caught up within the lag."""
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= max_lag_ms

    def record_fetch(self, fetch_offset: int, log_start_offset: int, broker_epoch: int, leader_leo: int,
                     now_ms: int) -> None:
        """Kafka's ``updateFetchStateOrThrow`` (the epoch check is the caller's)."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_leo = max(leader_leo, self.last_fetch_leader_leo)
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch


class ChangeKind(Enum):
    EXPAND = "expand"
    SHRINK = "shrink"


@dataclass(frozen=True, slots=True, eq=False)
class IsrChange:
    """One AlterPartition proposal. Compared by identity: an answer applies only to the
    proposal still pending (the image may have replaced it meanwhile)."""

    kind: ChangeKind
    isr: tuple[int, ...]  # the proposed ISR, in replica order
    broker_epochs: tuple[int, ...]  # per ISR member: the epoch it fetched with, -1 unknown
    leader_epoch: int
    partition_epoch: int  # the epoch the proposal is based on
    changed: tuple[int, ...]  # the replica added, or the replicas removed
    committed_isr: tuple[int, ...]  # the ISR before it


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """A partition's state as the metadata image (or an AlterPartition answer) has it."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class AlterOutcome:
    """What an AlterPartition answer did: ``hw_advanced``; ``retry``: send the same
    proposal again (after a backoff); ``committed``: the ISR now in force, if it changed."""

    hw_advanced: bool = False
    retry: bool = False
    committed: tuple[int, ...] | None = None


#: Partition-level AlterPartition errors after which the proposal is dropped and the
#: committed ISR is in force again: the controller says it did not apply it.
_REVERT = frozenset({ErrorCode.operation_not_attempted, ErrorCode.ineligible_replica})
#: Errors after which the partition stays pending until the metadata image overrides it.
_WAIT_FOR_METADATA = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
                                ErrorCode.fenced_leader_epoch, ErrorCode.invalid_update_version,
                                ErrorCode.invalid_request, ErrorCode.new_leader_elected})


@dataclass(slots=True)
class LeaderReplicaState:
    """One partition led here with followers (see the module doc).

    Construct with :meth:`become_leader`. Invariants: ``high_watermark`` never decreases
    and never exceeds the LEO last passed in; ``pending`` is None or the one proposal in
    flight; the leader (``node_id``) is never in ``followers``.
    """

    node_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]  # committed by the controller
    leader_epoch: int
    partition_epoch: int
    high_watermark: int
    leader_epoch_start_offset: int  # the LEO when this leader epoch began
    lag_time_max_ms: int
    min_insync_replicas: int
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending: IsrChange | None = None
    #: Brokers that may join an ISR: registered, unfenced, not shutting down → broker epoch.
    eligible_brokers: Mapping[int, int] = field(default_factory=dict)
    own_broker_epoch: int = -1

    @classmethod
    def become_leader(cls, node_id: int, assignment: PartitionAssignment, *, log_end_offset: int,
                      high_watermark: int, now_ms: int, lag_time_max_ms: int, min_insync_replicas: int,
                      eligible_brokers: Mapping[int, int] | None = None) -> LeaderReplicaState:
        """A new leader (Kafka's ``makeLeader`` for a replica that was not leader): follower
        states start unknown; ISR members count as caught up now (they get the lag time to
        fetch), the others as never. ``high_watermark`` is the log's (its HW as a follower)."""
        state = cls(node_id, assignment.replicas, assignment.isr, assignment.leader_epoch,
                    assignment.partition_epoch, min(high_watermark, log_end_offset), log_end_offset,
                    lag_time_max_ms, min_insync_replicas, eligible_brokers=dict(eligible_brokers or {}))
        state._sync_followers()
        for f in state.followers.values():
            f.last_caught_up_ms = now_ms if f.broker_id in assignment.isr else 0
        state.advance_hw(log_end_offset, now_ms)
        return state

    # -- views ----------------------------------------------------------------------------
    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus the replica being added by an expansion in flight."""
        p = self.pending
        if p is not None and p.kind is ChangeKind.EXPAND:
            return p.isr
        return self.isr

    @property
    def effective_min_isr(self) -> int:
        """min(min.insync.replicas, replica count) (Kafka's ``effectiveMinIsr``)."""
        return min(self.min_insync_replicas, len(self.replicas))

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.effective_min_isr

    def not_enough_replicas(self, topic_partition: str) -> str | None:
        """Kafka's refusal of an acks=all append when the committed ISR is smaller than the
        effective minimum (NOT_ENOUGH_REPLICAS), as its message; None when it may append."""
        if not self.under_min_isr:
            return None
        return (f"The size of the current ISR Set({', '.join(map(str, self.isr))}) is insufficient to satisfy "
                f"the min.isr requirement of {self.effective_min_isr} for partition {topic_partition}")

    def acks_outcome(self, required_offset: int) -> ErrorCode | None:
        """None while the HW is below ``required_offset`` (an acks=all write ending there
        waits); else NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the maximal ISR is now
        smaller than the effective minimum (Kafka's ``checkEnoughReplicasReachOffset``)."""
        if self.high_watermark < required_offset:
            return None
        if self.effective_min_isr <= len(self.maximal_isr):
            return ErrorCode.none
        return ErrorCode.not_enough_replicas_after_append

    # -- events ---------------------------------------------------------------------------
    def advance_hw(self, log_end_offset: int, now_ms: int) -> bool:
        """Kafka's ``maybeIncrementLeaderHW``: move the HW up to the lowest LEO of the
        maximal ISR and of the caught-up eligible followers. Returns True if it moved."""
        if self.under_min_isr:
            return False
        new = log_end_offset
        maximal = self.maximal_isr
        lag = self.lag_time_max_ms
        for f in self.followers.values():
            if f.log_end_offset < new and (
                    f.broker_id in maximal or (f.caught_up(log_end_offset, now_ms, lag) and self._eligible(f))):
                new = f.log_end_offset
        if new > self.high_watermark:
            self.high_watermark = new
            return True
        return False

    def on_append(self, log_end_offset: int, now_ms: int) -> bool:
        """After an append on the leader: the HW may move (an ISR of the leader alone).
        Returns True if it moved."""
        return self.advance_hw(log_end_offset, now_ms)

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int, broker_epoch: int,
                          current_leader_epoch: int, log_end_offset: int,
                          now_ms: int) -> tuple[bool, IsrChange | None]:
        """Record a follower's Fetch that was answered (Kafka's ``updateFollowerFetchState``).
        Returns (HW moved, an ISR expansion to send or None). Raises :class:`NotAReplica`
        for a broker that is not a replica, or NOT_LEADER_OR_FOLLOWER (as NotAReplica) for
        a fetch with a broker epoch older than the registration the image has."""
        f = self.followers.get(replica_id)
        if f is None:
            code = ErrorCode.unknown_leader_epoch if current_leader_epoch >= 0 else ErrorCode.not_leader_or_follower
            raise NotAReplica(code, f"Replica {replica_id} is not recognized as a valid replica in leader epoch "
                                    f"{self.leader_epoch} with partition epoch {self.partition_epoch}")
        known = self.eligible_brokers.get(replica_id)
        if broker_epoch != -1 and known is not None and known > broker_epoch:
            raise NotAReplica(ErrorCode.not_leader_or_follower,
                              f"Received stale fetch state update. broker epoch={broker_epoch} vs expected={known}")
        before = f.log_end_offset
        f.record_fetch(fetch_offset, log_start_offset, broker_epoch, log_end_offset, now_ms)
        change = self._maybe_expand(f)
        moved = before != f.log_end_offset and self.advance_hw(log_end_offset, now_ms)
        return moved, change

    def maybe_shrink(self, log_end_offset: int, now_ms: int) -> IsrChange | None:
        """Kafka's ``maybeShrinkIsr`` (run on a timer): propose the ISR without the followers
        not caught up within the lag time; None when all are, or a change is in flight."""
        if self.pending is not None:
            return None
        lag = self.lag_time_max_ms
        out = []
        for r in self.isr:
            if r == self.node_id:
                continue
            f = self.followers.get(r)
            if f is None or not f.caught_up(log_end_offset, now_ms, lag):
                out.append(r)
        if not out:
            return None
        removed = set(out)
        return self._propose(ChangeKind.SHRINK, [r for r in self.isr if r not in removed], tuple(out))

    def on_alter_partition_result(self, change: IsrChange, error: ErrorCode, result: PartitionAssignment | None,
                                  log_end_offset: int, now_ms: int) -> AlterOutcome:
        """Apply the controller's answer to ``change`` (Kafka's ``submitAlterPartition``
        completion): ignored unless ``change`` is still pending; success commits the
        answer's ISR and partition epoch (unless it is for another leader epoch or an older
        partition epoch: then the state stays pending until the image says more);
        OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA drop the proposal; errors meaning our
        metadata is stale wait for the image; any other error asks for a retry."""
        if self.pending is not change:
            return AlterOutcome()
        if error == ErrorCode.none and result is not None:
            if result.leader_epoch != self.leader_epoch or result.partition_epoch < self.partition_epoch:
                return AlterOutcome()
            self.pending = None
            self.isr = result.isr
            self.partition_epoch = result.partition_epoch
            return AlterOutcome(hw_advanced=self.advance_hw(log_end_offset, now_ms), committed=result.isr)
        if error in _REVERT:
            self.pending = None
            return AlterOutcome(hw_advanced=self.advance_hw(log_end_offset, now_ms))
        if error in _WAIT_FOR_METADATA:
            return AlterOutcome()
        return AlterOutcome(retry=True)

    def update(self, assignment: PartitionAssignment, log_end_offset: int, now_ms: int) -> bool:
        """The image changed while this node stays leader (Kafka's ``makeLeader`` for the
        current leader). An older partition epoch is ignored; otherwise the assignment and
        committed ISR replace ours and any pending proposal is dropped (its answer will be
        ignored). The same partition and leader epochs mean nothing changed (every change
        bumps the partition epoch): a proposal in flight stays. A new leader epoch starts at
        the current LEO and resets the followers' timers (ISR members caught up now, others
        never). Returns True if the HW moved."""
        if assignment.partition_epoch < self.partition_epoch or (
                assignment.partition_epoch == self.partition_epoch and assignment.leader_epoch == self.leader_epoch):
            return self.advance_hw(log_end_offset, now_ms)
        self.replicas = assignment.replicas
        self.isr = assignment.isr
        self.partition_epoch = assignment.partition_epoch
        self.pending = None
        self._sync_followers()
        if assignment.leader_epoch > self.leader_epoch:
            self.leader_epoch = assignment.leader_epoch
            self.leader_epoch_start_offset = log_end_offset
            for f in self.followers.values():
                in_sync = f.broker_id in assignment.isr
                f.last_fetch_leader_leo = log_end_offset
                f.last_fetch_ms = now_ms if in_sync else 0
                f.last_caught_up_ms = now_ms if in_sync else 0
        return self.advance_hw(log_end_offset, now_ms)

    def set_eligible_brokers(self, brokers: Mapping[int, int]) -> None:
        """The brokers that may join an ISR now (registered, unfenced, not in controlled
        shutdown) with their broker epochs, from the image."""
        self.eligible_brokers = brokers

    # -- helpers --------------------------------------------------------------------------
    def _sync_followers(self) -> None:
        for r in self.replicas:
            if r != self.node_id and r not in self.followers:
                self.followers[r] = FollowerState(r)
        for r in [r for r in self.followers if r not in self.replicas]:
            del self.followers[r]

    def _eligible(self, f: FollowerState) -> bool:
        """Kafka's ``isReplicaIsrEligible`` (KRaft): alive, not shutting down, and it fetched
        with the broker epoch the image has (or with none, -1)."""
        known = self.eligible_brokers.get(f.broker_id)
        return known is not None and f.broker_epoch is not None and f.broker_epoch in (-1, known)

    def _maybe_expand(self, f: FollowerState) -> IsrChange | None:
        """Kafka's ``maybeExpandIsr``: propose adding ``f`` once it reached the HW and the
        start of this leader epoch, when eligible and nothing is in flight."""
        if self.pending is not None or f.broker_id in self.isr or not self._eligible(f):
            return None
        if f.log_end_offset < self.high_watermark or f.log_end_offset < self.leader_epoch_start_offset:
            return None
        return self._propose(ChangeKind.EXPAND, [*self.isr, f.broker_id], (f.broker_id,))

    def _propose(self, kind: ChangeKind, members: Iterable[int], changed: tuple[int, ...]) -> IsrChange:
        wanted = set(members)
        isr = tuple(r for r in self.replicas if r in wanted) + tuple(sorted(wanted - set(self.replicas)))
        epochs = tuple(self._epoch_of(r) for r in isr)
        self.pending = IsrChange(kind, isr, epochs, self.leader_epoch, self.partition_epoch, changed, self.isr)
        return self.pending

    def _epoch_of(self, broker_id: int) -> int:
        if broker_id == self.node_id:
            return self.own_broker_epoch
        f = self.followers.get(broker_id)
        return f.broker_epoch if f is not None and f.broker_epoch is not None else -1
