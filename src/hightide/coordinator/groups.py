"""The group coordinator: :class:`GroupCoordinatorShard` s over the partitions of
``__consumer_offsets``, run by the :class:`~.runtime.CoordinatorRuntime`.

For a request the handler gives :meth:`GroupRuntime.execute` a shard call; the runtime
runs it on the partition's working shard (which returns records and a response without
changing state), appends the records as one batch and replays them there at once (so the
next request of the partition sees them), waits until they are committed (durable when
the topic's ``flush.messages`` asks for it, see the runtime's theory of operation), and
only then applies them to the committed shard and answers. A failed append or fsync
reaches no reader. Reads (OffsetFetch, describe, list) use the committed shard and so
see committed state only. At start-up each partition's log is replayed in the background; meanwhile its
groups answer COORDINATOR_LOAD_IN_PROGRESS.

Parked requests (a JoinGroup waiting for the rebalance, a follower's SyncGroup waiting
for the leader) stay sans-IO: :meth:`GroupRuntime.park` gives a handler an opaque handle
and an asyncio future; the handle goes into the shard call, and whenever a shard result
(of any request or timer) carries a completion for it, after that result's records are
committed, the future is resolved with the response.

KIP-848 consumer groups run through the same path: a ConsumerGroupHeartbeat's records are
appended and replayed, then its live records (member timers, never appended); the timer
loop (:meth:`GroupRuntime.poll`) fences members whose deadlines passed, and after a
partition is loaded every member's timers are armed afresh, as Kafka does.

KIP-932 share groups run through the same path too (timers fenced by :meth:`poll`,
armed afresh on load); the share-group state initialization that a ShareGroupHeartbeat
may need is driven by :mod:`.share_groups`.

The topic is created on first use, like Kafka's, with ``cleanup.policy=compact``.

Built from the node's :class:`~.env.CoordinatorEnv` (configs, image, partition logs,
the flusher's durability wait, topic creation, leadership): never the broker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..config import group_config_default
from ..group.classic import GroupLimits
from ..group.consumer_api import ConsumerGroupConfig, ImageTopics, TimersKey
from ..group.records import OFFSETS_TOPIC, GroupKey, OffsetKey, partition_for
from ..group.shard import (
    CoordinatorResult,
    GroupConfig,
    GroupCoordinatorShard,
    LiveGroup,
    decode_record,
    encode_records,
)
from ..group.share_group import ShareGroupConfig, ShareTimersKey
from ..protocol.errors import ErrorCode
from ..txn.batch import TxnBatch
from .internal_topic import CoordinatorUnavailable
from .runtime import LoadState
from .service import AdapterDefaults, CoordinatorService, returning

if TYPE_CHECKING:
    from .env import CoordinatorEnv

log = logging.getLogger("hightide.group")

#: How often :meth:`GroupRuntime.run_timers` runs the group timers that are due.
GROUP_TIMER_INTERVAL_S = 0.1


class GroupAdapter(AdapterDefaults[GroupCoordinatorShard]):
    """:class:`~.runtime.ShardAdapter` of ``__consumer_offsets``. A failed
    fsync answers NOT_COORDINATOR, as Kafka's group coordinator answers a storage error
    (the client looks the coordinator up again)."""

    topic = OFFSETS_TOPIC
    storage_error_code = ErrorCode.not_coordinator

    def __init__(self, groups: GroupRuntime) -> None:
        self.groups = groups

    def new_shard(self, partition: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(self.groups.group_config, consumer_timeouts=self.groups.consumer_timeouts)

    def load_record(self, shards: Sequence[GroupCoordinatorShard], partition: int, offset: int,
                    key: bytes | None, value: bytes | None) -> bool:
        record = decode_record(key, value) if key is not None else None
        if record is None:
            return False  # a record type hightide does not interpret (written by another broker)
        for shard in shards:
            shard.replay(*record)
        self.groups.note_placement(partition, *record)
        return True

    def load_txn(self, shards: Sequence[GroupCoordinatorShard], partition: int, offset: int, txn: TxnBatch,
                 key: bytes | None, value: bytes | None) -> bool:
        """A record of a transactional batch (TxnOffsetCommit: pending offsets) or a
        transaction marker (key None): replayed as such into each shard."""
        record = decode_record(key, value) if key is not None else (None, None)
        if record is None:
            return False
        for shard in shards:
            shard.replay_txn(txn, *record)
        return True

    def loaded(self, shards: Sequence[GroupCoordinatorShard], partition: int, count: int) -> None:
        if count:
            log.info("loaded %d records into group coordinator %s-%d", count, OFFSETS_TOPIC, partition)
        now = self.groups.env.clock.now_ms()
        live = shards[0].loaded(now, lambda g: self.groups.share_timeouts(g)[0]).live  # members' timers
        for shard in shards:
            for k, v in live:
                shard.replay(k, v)

    def encode(self, records: list[tuple[Any, Any]]) -> list[tuple[bytes | None, bytes | None]]:
        return encode_records(records)

    def replay(self, shard: GroupCoordinatorShard, partition: int, result: CoordinatorResult,
               offsets: list[int]) -> None:
        if result.txn_batch is not None:  # pending transactional offsets, or a marker
            for k, v in result.records or [(None, None)]:
                shard.replay_txn(result.txn_batch, k, v)
            return
        shard.replay_all(result.records)
        for k, v in result.live:
            shard.replay(k, v)

    def apply(self, shard: GroupCoordinatorShard, partition: int, result: CoordinatorResult,
              offsets: list[int]) -> None:
        """Replay the committed records, then the live records (logging group state
        changes), then resolve the parked requests the result completes."""
        if not result.live:  # records only (offset commits): no group state change to log
            self.replay(shard, partition, result, offsets)
            for handle, response in result.completions:
                self.groups.complete(handle, response)
            return
        consumer_before = {k.group_id: _consumer_summary(shard, k.group_id)
                           for k, _ in result.live if isinstance(k, TimersKey)}
        share_before = {k.group_id: _share_summary(shard, k.group_id)
                        for k, _ in result.live if isinstance(k, ShareTimersKey)}
        classic_before = {k.group: shard.groups.get(k.group) for k, _ in result.live if isinstance(k, LiveGroup)}
        self.replay(shard, partition, result, offsets)
        for gid, old in classic_before.items():
            v = shard.groups.get(gid)
            if v is not None and (old is None or (old.state, old.generation) != (v.state, v.generation)):
                log.info("group %s is %s (generation %d, %d members%s)", gid, v.state.value, v.generation,
                         len(v.members), f", leader {v.leader}" if v.leader else "")
        _log_changes("consumer", consumer_before, lambda g: _consumer_summary(shard, g))
        _log_changes("share", share_before, lambda g: _share_summary(shard, g))
        for handle, response in result.completions:
            self.groups.complete(handle, response)

    def abandon(self, partition: int, shards: Sequence[GroupCoordinatorShard],
                results: Sequence[CoordinatorResult | None]) -> None:
        """Parked JoinGroup/SyncGroup requests of the partition's classic groups, and
        those the failed results would have answered, fail with NOT_COORDINATOR."""
        handles = [h for r in results if r is not None for h, _ in r.completions]
        for shard in shards:
            for g in shard.groups.values():
                for m in g.members.values():
                    handles += [m.join_handle, m.sync_handle]
        err = CoordinatorUnavailable(f"{OFFSETS_TOPIC}-{partition} was unloaded after a failed write",
                                     ErrorCode.not_coordinator)
        for h in handles:
            if h is not None:
                self.groups.fail(h, err)


def _log_changes(kind: str, before: dict[str, tuple | None], summary: Callable[[str], tuple | None]) -> None:
    for gid, was in before.items():
        now = summary(gid)
        if now != was and now is not None:
            log.info("%s group %s is %s (group epoch %d, assignment epoch %d, %d members)", kind, gid, *now)


def _share_summary(shard: GroupCoordinatorShard, group_id: str) -> tuple | None:
    g = shard.share.get(group_id)
    return None if g is None else (g.state, g.group_epoch, g.assignment_epoch, len(g.members))


def _consumer_summary(shard: GroupCoordinatorShard, group_id: str) -> tuple | None:
    g = shard.consumer.get(group_id)
    return None if g is None else (g.state, g.group_epoch, g.assignment_epoch, len(g.members))


class GroupRuntime(CoordinatorService[GroupCoordinatorShard, str]):
    """The group coordinator (``broker.groups``). Start-up, placement, topic creation and
    close: :class:`~.service.CoordinatorService`; here the groups' placement
    rule, the write path of group requests, parked requests and timers."""

    topic = OFFSETS_TOPIC
    place_task = "place groups"

    def __init__(self, env: CoordinatorEnv) -> None:
        cfg = env.config
        self.group_config = GroupConfig(
            offset_metadata_max_bytes=cfg["offset.metadata.max.bytes"],
            offsets_retention_ms=cfg["offsets.retention.minutes"] * 60_000,
            classic=GroupLimits(
                initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
                min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
                max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
                max_size=cfg["group.max.size"]),
            consumer=ConsumerGroupConfig(
                session_timeout_ms=cfg["group.consumer.session.timeout.ms"],
                heartbeat_interval_ms=cfg["group.consumer.heartbeat.interval.ms"]),
            share=ShareGroupConfig(
                session_timeout_ms=cfg["group.share.session.timeout.ms"],
                heartbeat_interval_ms=cfg["group.share.heartbeat.interval.ms"],
                max_size=cfg["group.share.max.size"],
                initialize_retry_ms=cfg["group.share.initialize.retry.interval.ms"],
                backlog_interval_ms=cfg["group.share.backlog.assignor.interval.ms"]))
        super().__init__(env, GroupAdapter(self), cfg["offsets.topic.num.partitions"])
        self._parked: dict[int, asyncio.Future] = {}
        self._handles = itertools.count(1)
        # Per connection, its latest parked request: Kafka evaluates one request per
        # connection at a time, so later group requests on it wait for that answer.
        self._tails: dict[str, asyncio.Future] = {}
        self._homes: dict[str, int] = {}  # group id -> partition, while loading
        self._misplaced: dict[int, dict[Any, Any]] = {}  # partition -> {key: latest value} to move

    def topic_configs(self) -> dict[str, str]:
        """``cleanup.policy=compact``, as Kafka's."""
        return {"cleanup.policy": "compact", "segment.bytes": str(self.env.config["offsets.topic.segment.bytes"])}

    # -- groups stored in the wrong partition (written before the placement fix) ------------
    def note_placement(self, partition: int, key: Any, value: Any) -> None:
        """While loading: remember the latest record of every key whose group belongs in
        another partition (its last write wins, as compaction would keep it)."""
        if self._placing is None or self._placing.done():
            return  # only the start-up load looks for misplaced groups
        gid = _group_of(key)
        home = self._homes.get(gid)
        if home is None:
            home = self._homes[gid] = self.partition_for(gid)
        if home == partition:
            return
        moved = self._misplaced.setdefault(partition, {})
        moved.pop(key, None)
        if value is not None:
            moved[key] = value  # reinserted: the dict keeps log order of the latest records

    async def move_misplaced(self, now_ms: int) -> set[int]:
        """Once every partition is loaded: move the groups found (by :meth:`note_placement`)
        in a partition other than Kafka's ``abs(hashCode) % n`` (hightide before this fix
        placed groups with a negative hash by ``hash & 0x7FFFFFFF``); see :meth:`move_records`."""
        self._homes.clear()
        moves, self._misplaced = self._misplaced, {}
        return await self.move_records(moves, now_ms)

    async def move_records(self, moves: dict[int, dict[Any, Any]], now_ms: int) -> set[int]:
        """Move ``{partition: {key: latest value}}`` to the partitions their groups belong
        in, through the write path: first the copies (and each destination's log fsynced,
        whatever the flush policy), then tombstones at the old place, so a crash in
        between leaves both copies and the next start moves the same records again.
        Returns the partitions involved in a move that failed (logged)."""
        by_home: dict[int, list[tuple[Any, Any]]] = {}
        sources = {p: recs for p, recs in moves.items()
                   if recs and self.runtime.partitions[p].state is LoadState.ACTIVE}
        for recs in sources.values():
            for k, v in recs.items():
                by_home.setdefault(self.partition_for(_group_of(k)), []).append((k, v))
        failed: set[int] = set()
        for q, copies in by_home.items():
            try:
                await self.write_durable(q, CoordinatorResult(copies), now_ms)
                await self.runtime.write(q, lambda s: CoordinatorResult(live=s.loaded(
                    now_ms, lambda g: self.share_timeouts(g)[0]).live), now_ms, internal=True)  # arm moved timers
            except (CoordinatorUnavailable, OSError) as exc:
                log.error("moving %d group records into %s-%d failed: %s", len(copies), OFFSETS_TOPIC, q, exc)
                failed.add(q)
                failed.update(p for p, src in sources.items()
                              if any(self.partition_for(_group_of(k)) == q for k in src))
        for p, recs in sources.items():
            if p in failed:
                continue
            tombstones = [(k, None) for k in reversed(list(recs))]
            try:
                await self.runtime.write(p, returning(CoordinatorResult(tombstones)), now_ms, internal=True)
            except CoordinatorUnavailable as exc:  # the copies are in place: only old records stay behind
                log.error("tombstoning moved group records in %s-%d failed: %s", OFFSETS_TOPIC, p, exc)
            groups = sorted({_group_of(k) for k in recs})
            log.warning("moved %d records of %d group(s) from %s-%d to their partition (Kafka's placement): %s",
                        len(recs), len(groups), OFFSETS_TOPIC, p, ", ".join(groups[:10]) +
                        (f" and {len(groups) - 10} more" if len(groups) > 10 else ""))
        return failed

    @property
    def shards(self) -> dict[int, GroupCoordinatorShard]:
        """Shards of the loaded partitions (committed state). Raises
        CoordinatorLoadInProgress while some partition is loading."""
        return self.runtime.active_shards()

    # -- running requests -------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    # -- parked requests ---------------------------------------------------------------------
    def park(self) -> tuple[int, asyncio.Future]:
        """A handle for a shard call whose answer may come later, and the future it resolves."""
        handle = next(self._handles)
        fut = asyncio.get_running_loop().create_future()
        self._parked[handle] = fut
        return handle, fut

    def complete(self, handle: int, response: Any) -> None:
        fut = self._parked.pop(handle, None)
        if fut is not None and not fut.done():
            fut.set_result(response)

    def tail(self, connection: str) -> asyncio.Future | None:
        """The connection's parked request still unanswered, if any."""
        fut = self._tails.get(connection)
        return fut if fut is not None and not fut.done() else None

    def set_tail(self, connection: str, fut: asyncio.Future) -> None:
        self._tails[connection] = fut

        def done(f: asyncio.Future) -> None:
            if self._tails.get(connection) is f:
                del self._tails[connection]
        fut.add_done_callback(done)

    def fail(self, handle: int, exc: Exception) -> None:
        """Answer a parked request with ``exc`` (its handler turns it into an error code)."""
        fut = self._parked.pop(handle, None)
        if fut is not None and not fut.done():
            fut.set_exception(exc)

    def forget(self, handle: int) -> None:
        self._parked.pop(handle, None)

    def close(self) -> None:
        """Shutting down: parked requests fail with CoordinatorUnavailable (answered
        NOT_COORDINATOR, so clients find the coordinator again); loads stop."""
        for fut in self._parked.values():
            if not fut.done():
                fut.set_exception(CoordinatorUnavailable("the coordinator is shutting down", ErrorCode.not_coordinator))
        self._parked.clear()
        super().close()

    def share_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a share group: its group configs
        (``share.session.timeout.ms``, ``share.heartbeat.interval.ms``), else the broker's."""
        return self._timeouts("share", group_id)

    def consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """The same for a KIP-848 consumer group (``consumer.*`` group configs)."""
        return self._timeouts("consumer", group_id)

    def _timeouts(self, kind: str, group_id: str) -> tuple[int, int]:
        overrides = self.env.image().group_configs.get(group_id, {})
        out = []
        for name in (f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"):
            value = overrides.get(name)
            out.append(int(value) if value is not None else group_config_default(self.env.config, name))
        return out[0], out[1]

    def topics(self) -> ImageTopics:
        """The topics of the current metadata image, as consumer groups see them."""
        return ImageTopics(self.env.image())

    # -- timers (operations like any other) ----------------------------------------------------
    async def poll(self, now_ms: int) -> None:
        """Classic group timers (sessions, rebalance and initial delays, pending syncs),
        consumer and share group timers (sessions, rebalance timeouts) that are due; the
        partitions run concurrently, each through the write path."""
        ops: list[tuple[int, Callable[[GroupCoordinatorShard], CoordinatorResult]]] = []
        for p in list(self.runtime.partitions):
            shard = self.runtime.working_shard(p)  # the state the timers' writes will see
            if shard is None:
                continue  # loading, reloading or offline
            if shard.groups:
                ops.append((p, lambda s: s.poll(now_ms)))
            due = shard.consumer_next_deadline()
            if due is not None and due <= now_ms:
                ops.append((p, lambda s: s.consumer_poll(now_ms, self.topics())))
            due = shard.share.next_deadline()
            if due is not None and due <= now_ms:
                ops.append((p, lambda s: _share_poll(s, now_ms, self.topics())))
        await self._run_all(ops, now_ms)

    async def run_timers(self) -> None:
        """Forever, on the node's clock: the group timers that are due (:meth:`poll`)
        every ``GROUP_TIMER_INTERVAL_S``, offsets expiry (:meth:`expire_offsets`) every
        ``offsets.retention.check.interval.ms``. A failed round is logged; the next one
        runs."""
        clock = self.env.clock
        expiry_interval = self.env.config["offsets.retention.check.interval.ms"]
        next_expiry = clock.now_ms() + expiry_interval
        while True:
            await clock.sleep(GROUP_TIMER_INTERVAL_S)
            ts = clock.now_ms()
            try:
                await self.poll(ts)
                if ts >= next_expiry:
                    next_expiry = ts + expiry_interval
                    await self.expire_offsets(ts)
            except Exception:
                log.exception("group timers failed")

    async def expire_offsets(self, now_ms: int) -> None:
        """Offsets of groups without members past ``offsets.retention.minutes``."""
        await self._run_all([(p, lambda s: s.expire_offsets(now_ms)) for p in self.runtime.partitions], now_ms)

    async def _run_all(self, ops: list[tuple[int, Callable[[GroupCoordinatorShard], CoordinatorResult]]],
                       now_ms: int) -> None:
        async def one(p: int, op: Callable[[GroupCoordinatorShard], CoordinatorResult]) -> None:
            try:
                await self.runtime.write(p, op, now_ms)
            except CoordinatorUnavailable:
                pass
        if ops:
            await asyncio.gather(*(one(p, op) for p, op in ops))


def _group_of(key: Any) -> str:
    """The group id of a ``__consumer_offsets`` record key (any version)."""
    return key.group if isinstance(key, (OffsetKey, GroupKey)) else key.group_id


def _share_poll(shard: GroupCoordinatorShard, now_ms: int, topics: ImageTopics) -> CoordinatorResult:
    result = shard.share_poll(now_ms, topics)
    if result.records:
        log.info("share group members fenced (session expired): %s", sorted(
            {(k.group_id, k.member_id) for k, v in result.live if v is None}))
    return result
