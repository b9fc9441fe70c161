"""The broker's replica manager (Kafka's ``ReplicaManager``, leader side; the shell around
:mod:`hightide.replication`).

Theory of operation. After each metadata change the broker calls :meth:`apply_image`; for
every partition hosted here it decides the role:

* **leader of a partition with followers** (more than one replica): a
  :class:`~hightide.replication.leader_state.LeaderReplicaState` in :attr:`leaders`. The
  log's ``after_append`` hook is set, so an append (produce, coordinator, marker) no
  longer moves the HW to the LEO: the state decides the HW from the ISR, and the shell
  puts it on the log, wakes parked fetches and answers the acks=all writes it satisfies;
* **leader of a one-replica partition** (every partition of the single node): nothing
  here — the log keeps HW = LEO on append, no hook, no purgatory, no per-batch work;
* **follower**: the log's HW is left to the replica fetcher (which takes the leader's),
  and R2's :class:`~.fetcher.ReplicaFetcherManager` is told to ``follow`` the
  leader (or ``stop_following``).

Leader events: a follower's Fetch (:meth:`follower_fetched`, from the Fetch handler),
appends (the hook), a timer every ``replica.lag.time.max.ms`` / 2 that shrinks the ISR of
lagging followers (Kafka's isr-expiration task), and the AlterPartition (56) answers. An
ISR change goes to the active controller over the broker's controller channel, one per
partition at a time, retried (with a backoff) until the controller answers it; the image
update that follows arrives through the metadata log anyway.

acks=all (Kafka's DelayedProduce): :meth:`wait_replicated` returns a future resolved with
an :class:`~hightide.protocol.errors.ErrorCode` once the HW reaches the write's end:
NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank below min.insync.replicas while it
waited), or NOT_LEADER_OR_FOLLOWER (leadership lost, broker stopping). For a partition
without followers it is resolved at once: NONE only if this node leads it in the leader
epoch the controller gave it (a broker-only node: caught up with the controller's log,
the epoch stamped on the log by :meth:`ReplicaManager.apply_image`), else
NOT_LEADER_OR_FOLLOWER — never an acknowledgement from a stale image.

Built from (never the broker): this broker's ``node_id`` and ``config``
(``replica.lag.time.max.ms``), ``logs`` (a callable: the open partition logs),
``waiters`` (woken when a high watermark moves, for parked fetches), ``image`` and
``metadata_ready`` (callables: the metadata image; whether this node acts on it yet),
``broker_epoch`` (a callable: -1 until registered) and ``controller`` (a callable: the
:class:`ControllerRequests` channel to the active controller on a broker-only node,
None on the single node, which leads whatever its image says), and ``clock``
(:mod:`hightide.aio.clock`: lag times, the ISR timer, retry backoffs). The follower side
(:attr:`ReplicaManager.fetchers`) is set by the wiring after construction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..client.errors import KafkaError
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..replication.acks import AckWaits
from ..replication.leader_state import (
    ChangeKind,
    IsrChange,
    LeaderReplicaState,
    NotAReplica,
    PartitionAssignment,
)
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.waiters import AppendWaiters
from ..node.controller_channel import ControllerUnavailable

if TYPE_CHECKING:
    import uuid

    from ..client.connection import BrokerConnection
    from ..cluster.image import MetadataImage, PartitionImage, TopicImage
    from ..config import BrokerConfig
    from ..log.manager import LogManager

log = logging.getLogger("hightide.replica_manager")

TopicPartition = tuple[str, int]
ALTER_PARTITION = 56
ALTER_PARTITION_MAX_VERSION = 3
RETRY_BACKOFF_S = (0.05, 1.0)  # AlterPartition retries: first, cap (doubling)


def _hw_set_by_fetcher() -> None:
    """A follower's ``after_append``: its HW comes from the leader, never from an append."""


class ReplicaFetching(Protocol):
    """What the replica manager needs from the follower side (R2's ReplicaFetcherManager)."""

    def follow(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> None:
        """Fetch ``tp`` from ``leader_id`` in ``leader_epoch`` (truncating first as needed)."""
        ...

    def stop_following(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp``."""
        ...


class ControllerRequests(Protocol):
    """What the replica manager needs from the controller channel (AlterPartition)."""

    async def request(self, api_key: int, version: int | Callable[[BrokerConnection], int], body: Any) -> Any:
        """Send one request to the active controller; its decoded answer. Raises
        ControllerUnavailable or KafkaError when it could not be answered."""
        ...


def partition_assignment(p: PartitionImage) -> PartitionAssignment:
    """The image's partition state (an empty ISR, never written by a controller, is the replicas)."""
    return PartitionAssignment(tuple(p.replicas), tuple(p.isr or p.replicas), p.leader_epoch, p.partition_epoch)


@dataclass(eq=False)
class LeaderPartition:
    """A partition led here with followers: its state, log and the writes waiting for its HW."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    state: LeaderReplicaState
    log: PartitionLog
    waits: AckWaits[asyncio.Future[ErrorCode]] = field(default_factory=AckWaits)
    alter_task: asyncio.Task[None] | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


class ReplicaManager:
    """Per-partition replication roles of one broker (see the module doc)."""

    def __init__(self, *, node_id: int, config: BrokerConfig, logs: Callable[[], LogManager | None],
                 waiters: AppendWaiters, image: Callable[[], MetadataImage], metadata_ready: Callable[[], bool],
                 broker_epoch: Callable[[], int], controller: Callable[[], ControllerRequests | None],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.node_id = node_id
        self.clock = clock  # ISR lag times, the isr-expiration timer, AlterPartition backoff
        self._config = config
        self._logs = logs
        self._waiters = waiters
        self._image = image
        self._metadata_ready = metadata_ready
        self._broker_epoch = broker_epoch
        self._controller = controller
        #: Partitions led here that have followers (empty on the single node).
        self.leaders: dict[TopicPartition, LeaderPartition] = {}
        #: Partitions followed here: (leader id, leader epoch) last handed to the fetchers.
        self.following: dict[TopicPartition, tuple[int, int]] = {}
        #: The partitions of each topic in :attr:`leaders` or :attr:`following`: a change of
        #: some topics looks at theirs, not at every partition led or followed here.
        self._roles_of: dict[str, set[int]] = {}
        #: The follower side (set by the broker's wiring when it exists).
        self.fetchers: ReplicaFetching | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._warned_no_channel = False

    @property
    def lag_time_max_ms(self) -> int:
        return int(self._config["replica.lag.time.max.ms"])

    # -- roles from the image -----------------------------------------------------------------
    def apply_image(self, image: MetadataImage, topics: Iterable[str] | None = None) -> None:
        """Put the image's leadership in force for every partition hosted here (its log must
        be open): lead, follow, or neither. Idempotent. ``topics``: only these topics
        changed (see :meth:`MetadataImage.take_changes`; a change of the brokers is never
        such a change): only their partitions are looked at; None: every partition."""
        logs = self._logs()
        if logs is None or self._closed:
            return
        node = self.node_id
        ts = self.clock.now_ms()
        eligible = {bid: reg.epoch for bid, reg in image.brokers.items()
                    if not reg.fenced and not reg.in_controlled_shutdown}
        hosted: set[TopicPartition] = set()
        if topics is None:
            looked_at: Iterable[TopicImage] = image.topics.values()
        else:
            names = set(topics)
            looked_at = [t for name in names if (t := image.topics.get(name)) is not None]
        for t in looked_at:
            for p, pimg in t.partitions.items():
                if pimg.leader != node and node not in pimg.replicas:
                    continue
                tp = (t.name, p)
                plog = logs.get(tp)
                if plog is None:
                    continue  # not open (yet): the next change retries
                hosted.add(tp)
                if pimg.leader == node:
                    self._lead(t, pimg, plog, eligible, ts)
                else:
                    self._follow(tp, pimg, plog)
        if topics is None:
            had: list[TopicPartition] = [*self.leaders, *self.following]
        else:
            had = [(name, p) for name in names for p in self._roles_of.get(name, ())]
        for tp in had:
            if tp not in hosted:
                self._resign(tp)
                self._stop_following(tp)

    def _noted(self, tp: TopicPartition) -> None:
        self._roles_of.setdefault(tp[0], set()).add(tp[1])

    def _unnoted(self, tp: TopicPartition) -> None:
        if tp in self.leaders or tp in self.following:
            return
        parts = self._roles_of.get(tp[0])
        if parts is not None:
            parts.discard(tp[1])
            if not parts:
                del self._roles_of[tp[0]]

    def _lead(self, t: TopicImage, pimg: PartitionImage, plog: PartitionLog, eligible: dict[int, int],
              ts: int) -> None:
        tp = (t.name, pimg.partition)
        if tp in self.following:
            self._stop_following(tp)
        self._stamp_epoch(plog, pimg.leader_epoch, tp)
        assignment = partition_assignment(pimg)
        led = self.leaders.get(tp)
        if len(assignment.replicas) <= 1:
            if led is not None:
                self._resign(tp)
            if plog.after_append is not None:  # was replicated: the only replica's HW is its LEO
                plog.after_append = None
                plog.high_watermark = plog.log_end_offset
            return
        min_isr = plog.config.min_insync_replicas
        if led is not None and led.log is plog:
            led.state.min_insync_replicas = min_isr
            led.state.set_eligible_brokers(eligible)
            led.state.own_broker_epoch = self._own_broker_epoch()
            if led.state.update(assignment, plog.log_end_offset, ts):
                self._hw_moved(led)
            return
        if led is not None:
            self._resign(tp)  # the log was reopened (recreated topic)
        # A log this manager has not handled since it was opened has HW = LEO, which nothing
        # proves committed: start from the log start, as Kafka does without an HW checkpoint
        # (the followers' first fetches bring it up; an ISR of this node alone at once).
        known_hw = plog.high_watermark if plog.after_append is not None else plog.log_start_offset
        state = LeaderReplicaState.become_leader(
            self.node_id, assignment, log_end_offset=plog.log_end_offset, high_watermark=known_hw,
            now_ms=ts, lag_time_max_ms=self.lag_time_max_ms, min_insync_replicas=min_isr,
            eligible_brokers=eligible)
        state.own_broker_epoch = self._own_broker_epoch()
        led = LeaderPartition(t.name, pimg.partition, t.topic_id, state, plog)
        self.leaders[tp] = led
        self._noted(tp)
        plog.after_append = self._append_hook(led)
        log.info("leading %s in leader epoch %d: replicas %s, ISR %s, high watermark %d, log end %d", led.name,
                 state.leader_epoch, list(state.replicas), list(state.isr), state.high_watermark,
                 plog.log_end_offset)
        self._hw_moved(led)  # puts the state's HW on the log (lowering an unproven one)

    @staticmethod
    def _stamp_epoch(plog: PartitionLog, epoch: int, tp: TopicPartition) -> None:
        """Batches appended by this leader carry the image's leader epoch, which starts at
        the log end (the log's epoch cache; Kafka's ``maybeAssignEpochStartOffset``)."""
        if plog.leader_epoch == epoch:
            return
        try:
            plog.become_leader(epoch)
        except ValueError as exc:
            log.warning("%s-%d: %s", *tp, exc)

    def _follow(self, tp: TopicPartition, pimg: PartitionImage, plog: PartitionLog) -> None:
        if tp in self.leaders:
            self._resign(tp)
        plog.after_append = _hw_set_by_fetcher
        target = (pimg.leader, pimg.leader_epoch)
        if self.following.get(tp) == target:
            return
        self.following[tp] = target
        self._noted(tp)
        if self.fetchers is None:
            return
        if pimg.leader < 0:
            self.fetchers.stop_following(tp)
        else:
            self.fetchers.follow(tp, pimg.leader, pimg.leader_epoch)

    def _stop_following(self, tp: TopicPartition) -> None:
        if self.following.pop(tp, None) is None:
            return
        self._unnoted(tp)
        if self.fetchers is not None:
            self.fetchers.stop_following(tp)

    def _resign(self, tp: TopicPartition) -> None:
        """No longer the leader with followers here: answer the waiting writes
        NOT_LEADER_OR_FOLLOWER, let parked fetches re-check, stop AlterPartition retries."""
        led = self.leaders.pop(tp, None)
        if led is None:
            return
        self._unnoted(tp)
        for fut in led.waits.drain():
            if not fut.done():
                fut.set_result(ErrorCode.not_leader_or_follower)
        if led.log.after_append is not None and led.log.after_append is not _hw_set_by_fetcher:
            led.log.after_append = _hw_set_by_fetcher
        if led.alter_task is not None:
            led.alter_task.cancel()
        self._waiters.wake(tp)

    def _own_broker_epoch(self) -> int:
        return self._broker_epoch()

    # -- leader events ------------------------------------------------------------------------
    def _append_hook(self, led: LeaderPartition) -> Callable[[], None]:
        def appended() -> None:
            if led.state.on_append(led.log.log_end_offset, self.clock.now_ms()):
                self._hw_moved(led)
        return appended

    def _hw_moved(self, led: LeaderPartition) -> None:
        """The state's HW moved: put it on the log, wake parked fetches, answer due writes."""
        led.log.high_watermark = led.state.high_watermark
        self._waiters.wake(led.tp)
        self._complete_due(led)

    def _complete_due(self, led: LeaderPartition) -> None:
        due = led.waits.due(led.state.high_watermark)
        if not due:
            return
        code = led.state.acks_outcome(led.state.high_watermark)
        for fut in due:
            if not fut.done():
                fut.set_result(code if code is not None else ErrorCode.none)

    def follower_fetched(self, topic: str, partition: int, replica_id: int, broker_epoch: int, fetch_offset: int,
                         log_start_offset: int, current_leader_epoch: int) -> ErrorCode:
        """Record a follower's Fetch of a partition led here, read without error (Kafka's
        ``updateFollowerFetchState``): may move the HW and propose an ISR expansion.
        Returns NONE, or the error to answer for that partition: NOT_LEADER_OR_FOLLOWER /
        UNKNOWN_LEADER_EPOCH for a broker that is not a follower of it (also every fetch of
        a one-replica partition), NOT_LEADER_OR_FOLLOWER for a stale broker epoch."""
        led = self.leaders.get((topic, partition))
        if led is None:
            return ErrorCode.unknown_leader_epoch if current_leader_epoch >= 0 else ErrorCode.not_leader_or_follower
        try:
            moved, change = led.state.on_follower_fetch(replica_id, fetch_offset, log_start_offset, broker_epoch,
                                                        current_leader_epoch, led.log.log_end_offset,
                                                        self.clock.now_ms())
        except NotAReplica as exc:
            log.debug("%s: fetch from %d refused: %s", led.name, replica_id, exc)
            return exc.error_code
        if moved:
            self._hw_moved(led)
        if change is not None:
            self._submit(led, change)
        return ErrorCode.none

    def check_isrs(self) -> None:
        """Kafka's isr-expiration: propose shrinking the ISR of every partition led here
        whose followers fell behind for more than ``replica.lag.time.max.ms``."""
        ts = self.clock.now_ms()
        for led in list(self.leaders.values()):
            change = led.state.maybe_shrink(led.log.log_end_offset, ts)
            if change is not None:
                self._submit(led, change)

    async def run(self) -> None:
        """The ISR check every ``replica.lag.time.max.ms`` / 2 until cancelled."""
        while not self._closed:
            await self.clock.sleep(self.lag_time_max_ms / 2000)
            try:
                self.check_isrs()
            except Exception:
                log.exception("ISR check failed")

    # -- acks=all -----------------------------------------------------------------------------
    def led_with_followers(self, topic: str, partition: int) -> LeaderPartition | None:
        """The replication state of a partition led here with followers, else None."""
        return self.leaders.get((topic, partition)) if self.leaders else None

    def wait_replicated(self, topic: str, partition: int, end_offset: int) -> asyncio.Future[ErrorCode]:
        """A future resolved once the HW of ``topic``-``partition`` reaches ``end_offset``
        (a write's last offset + 1), with NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, or
        NOT_LEADER_OR_FOLLOWER (see the module doc). Resolved at once without leader state
        here (NONE if this node leads the partition as its only replica in the
        controller's leader epoch, else NOT_LEADER_OR_FOLLOWER). Never times out by
        itself: the caller bounds the wait."""
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        led = self.leaders.get((topic, partition))
        if led is None:
            fut.set_result(ErrorCode.none if self._leads_alone(topic, partition) else ErrorCode.not_leader_or_follower)
            return fut
        outcome = led.state.acks_outcome(end_offset)
        if outcome is not None:
            fut.set_result(outcome)
        else:
            led.waits.add(end_offset, fut)
        return fut

    def _leads_alone(self, topic: str, partition: int) -> bool:
        """True if this node leads ``topic``-``partition`` without followers to wait for:
        on the single node, whatever the image says it leads; on a broker-only node, only
        once caught up with the controller, a one-replica partition whose log carries the
        image's leader epoch (a replicated one led here has leader state)."""
        t = self._image().topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is None or p.leader != self.node_id:
            return False
        if self._controller() is None:  # the single node
            return True
        logs = self._logs()
        if not self._metadata_ready() or len(p.replicas) > 1 or logs is None:
            return False
        plog = logs.get((topic, partition))
        return plog is not None and plog.leader_epoch == p.leader_epoch

    def offsets_available(self, topic: str, partition: int) -> bool:
        """False while a new leader's HW has not reached the start of its leader epoch
        (Kafka answers ListOffsets OFFSET_NOT_AVAILABLE then, so a client never sees the
        end of the log go back across a leader change)."""
        led = self.leaders.get((topic, partition)) if self.leaders else None
        return led is None or led.state.leader_epoch_start_offset <= led.state.high_watermark

    # -- AlterPartition -----------------------------------------------------------------------
    def _submit(self, led: LeaderPartition, change: IsrChange) -> None:
        verb = "Expanding" if change.kind is ChangeKind.EXPAND else "Shrinking"
        extra = ""
        if change.kind is ChangeKind.SHRINK:
            extra = " Out of sync replicas: " + " ".join(
                f"(brokerId: {r}, endOffset: {f.log_end_offset}, lastCaughtUpTimeMs: {f.last_caught_up_ms})"
                for r in change.changed if (f := led.state.followers.get(r)) is not None) + "."
        log.info("%s: %s ISR from %s to %s. Leader: (highWatermark: %d, endOffset: %d).%s", led.name, verb,
                 ",".join(map(str, change.committed_isr)), ",".join(map(str, change.isr)),
                 led.state.high_watermark, led.log.log_end_offset, extra)
        task = asyncio.get_running_loop().create_task(self._alter(led, change), name=f"alter-partition-{led.name}")
        led.alter_task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _alter(self, led: LeaderPartition, change: IsrChange) -> None:
        """Send ``change`` until the controller answers it (or it is no longer pending)."""
        backoff, cap = RETRY_BACKOFF_S
        while not self._closed and led.state.pending is change and self.leaders.get(led.tp) is led:
            error, result = await self._send_alter(led, change)
            outcome = led.state.on_alter_partition_result(change, error, result, led.log.log_end_offset,
                                                          self.clock.now_ms())
            if outcome.committed is not None:
                log.info("%s: ISR updated to %s and partition epoch to %d", led.name,
                         ",".join(map(str, outcome.committed)), led.state.partition_epoch)
            if outcome.hw_advanced:
                self._hw_moved(led)
            if not outcome.retry:
                if error != ErrorCode.none:
                    log.info("%s: AlterPartition to ISR %s answered %s", led.name, list(change.isr),
                             error.name.upper())
                return
            await self.clock.sleep(backoff)
            backoff = min(cap, backoff * 2)

    async def _send_alter(self, led: LeaderPartition,
                          change: IsrChange) -> tuple[ErrorCode, PartitionAssignment | None]:
        """One AlterPartition round trip: (partition error, the state it answered). A
        failure to reach the controller or a top-level error comes back as a retriable
        error code."""
        channel = self._controller()
        if channel is None:
            if not self._warned_no_channel:
                self._warned_no_channel = True
                log.warning("%s: no controller channel on this node; the ISR change waits", led.name)
            return ErrorCode.request_timed_out, None
        body = _alter_body(self.node_id, self._broker_epoch(), led, change)
        try:
            resp = await channel.request(
                ALTER_PARTITION, lambda c: c.pick_version(ALTER_PARTITION, ALTER_PARTITION_MAX_VERSION, 2), body)
        except (ControllerUnavailable, KafkaError) as exc:
            log.debug("%s: AlterPartition not answered: %s", led.name, exc)
            return ErrorCode.request_timed_out, None
        return _alter_result(resp, led)

    # -- stop ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Answer every waiting write NOT_LEADER_OR_FOLLOWER and stop AlterPartition retries."""
        self._closed = True
        for tp in list(self.leaders):
            self._resign(tp)
        for task in list(self._tasks):
            task.cancel()


def _alter_body(node_id: int, broker_epoch: int, led: LeaderPartition, change: IsrChange) -> dict[str, Any]:
    """AlterPartition v2/v3 (``new_isr`` for v2, ``new_isr_with_epochs`` for v3)."""
    return {"broker_id": node_id, "broker_epoch": broker_epoch, "topics": [{
        "topic_id": led.topic_id, "topic_name": led.topic, "partitions": [{
            "partition_index": led.partition, "leader_epoch": change.leader_epoch,
            "new_isr": list(change.isr),
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": e} for b, e in zip(change.isr,
                                                                                        change.broker_epochs)],
            "leader_recovery_state": 0, "partition_epoch": change.partition_epoch}]}]}


def _alter_result(resp: Any, led: LeaderPartition) -> tuple[ErrorCode, PartitionAssignment | None]:
    """The partition's answer in an AlterPartition response; a top-level error, or a
    response without the partition, is retriable (Kafka's AlterPartitionManager re-sends)."""
    top = ErrorCode(int(resp.error_code))
    if top != ErrorCode.none:
        log.debug("%s: AlterPartition answered %s (retrying)", led.name, top.name.upper())
        return ErrorCode.request_timed_out, None
    for t in resp.topics:
        if t.topic_id != led.topic_id and getattr(t, "topic_name", None) != led.topic:
            continue
        for p in t.partitions:
            if p.partition_index != led.partition:
                continue
            error = ErrorCode(int(p.error_code))
            if error != ErrorCode.none:
                return error, None
            return error, PartitionAssignment(led.state.replicas, tuple(p.isr), p.leader_epoch, p.partition_epoch)
    return ErrorCode.request_timed_out, None
