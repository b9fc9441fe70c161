"""The share coordinator: :class:`ShareCoordinatorShard` s over the partitions of
``__share_group_state``, run by the :class:`~.runtime.CoordinatorRuntime`; it
is the broker's :class:`~hightide.share.types.SharePersister` (``broker.share_state``).

A call picks the share partition's shard (Kafka's ``abs(hash("group:topicId:partition")) %
share.coordinator.state.topic.num.partitions``), asks the shard for records and a response
(no state change) on the partition's working shard, appends the records as one batch,
waits until they are committed (fsynced when the topic's ``flush.messages`` asks for
it), and only then replays them with their offsets into the committed shard and answers
(writes of one partition are pipelined and share fsync rounds; see the runtime's theory
of operation). A failed append answers COORDINATOR_NOT_AVAILABLE, a failed fsync
KAFKA_STORAGE_ERROR; neither reaches the committed shard, so a following read never
returns state that may be lost. Reads (:meth:`ShareStateRuntime.summary`, keys) see
committed state only. While a partition's log is replayed at start-up its calls answer
COORDINATOR_LOAD_IN_PROGRESS.

At start-up each partition's log is replayed from its log start offset. Two things keep
that replay short: a ShareSnapshot every ``share.coordinator.snapshot.update.records.per.snapshot``
updates of a share partition, and pruning — every
``share.coordinator.state.topic.prune.interval.ms`` the records below the shard's redundant
offset (older than the latest snapshot of every live share partition) are deleted, after
quiet share partitions got a fresh "cold" snapshot (written through the same path).

The topic is created on first write with ``cleanup.policy=delete`` and unlimited retention,
as Kafka does: ShareUpdate records hold only changed batches, so compaction (which keeps the
last record per key) would lose state; pruning is explicit instead.

Built from the node's :class:`~.env.CoordinatorEnv` (configs, image, partition logs,
the flusher's durability wait, topic creation, leadership, ``stopping()``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..protocol.errors import ErrorCode
from ..share.coordinator import (
    PartitionState,
    Record,
    ShareCoordinatorConfig,
    ShareCoordinatorShard,
    ShareResult,
)
from ..share.records import (
    STATE_TOPIC,
    ShareRecordError,
    ShareSnapshotKey,
    ShareSnapshotValue,
    coordinator_key,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from ..share.types import ShareState, ShareStateKey, StateBatch
from .internal_topic import CoordinatorUnavailable
from .runtime import LoadState
from .service import AdapterDefaults, CoordinatorService, returning

if TYPE_CHECKING:
    from .env import CoordinatorEnv

log = logging.getLogger("hightide.share")


_PLACEMENT_CACHE = 100_000  # share partitions whose placement is remembered (then forgotten at once)


class ShareStateAdapter(AdapterDefaults[ShareCoordinatorShard]):
    """:class:`~.runtime.ShardAdapter` of ``__share_group_state`` (a failed
    fsync answers KAFKA_STORAGE_ERROR; nothing is parked)."""

    topic = STATE_TOPIC
    storage_error_code = ErrorCode.kafka_storage_error

    def __init__(self, config: ShareCoordinatorConfig) -> None:
        self.config = config

    def new_shard(self, partition: int) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(self.config)

    def load_record(self, shards: Sequence[ShareCoordinatorShard], partition: int, offset: int,
                    key: bytes | None, value: bytes | None) -> bool:
        try:
            k = decode_key(key) if key is not None else None
            if k is None:
                return False
            v = decode_value(k, value)
        except ShareRecordError as exc:
            log.error("skipping malformed record at %s offset %d: %s", STATE_TOPIC, offset, exc)
            return False
        for shard in shards:
            shard.replay(offset, k, v)
        return True

    def loaded(self, shards: Sequence[ShareCoordinatorShard], partition: int, count: int) -> None:
        if count:
            log.info("loaded %d records (%d share partitions) into share coordinator %s-%d", count,
                     len(shards[0].states), STATE_TOPIC, partition)

    def encode(self, records: list[tuple[Any, Any]]) -> list[tuple[bytes | None, bytes | None]]:
        return [(encode_key(k), encode_value(v)) for k, v in records]

    def replay(self, shard: ShareCoordinatorShard, partition: int, result: ShareResult, offsets: list[int]) -> None:
        for offset, (k, v) in zip(offsets, result.records):
            shard.replay(offset, k, v)


class ShareStateRuntime(CoordinatorService[ShareCoordinatorShard, ShareStateKey]):
    """SharePersister over ``__share_group_state``; also the state RPC handlers' backend.
    Start-up, placement, topic creation and close: :class:`~.service.CoordinatorService`."""

    topic = STATE_TOPIC
    place_task = "place share state"

    def __init__(self, env: CoordinatorEnv) -> None:
        cfg = env.config
        self.config = ShareCoordinatorConfig(
            snapshot_update_records_per_snapshot=cfg["share.coordinator.snapshot.update.records.per.snapshot"],
            cold_partition_snapshot_interval_ms=cfg["share.coordinator.cold.partition.snapshot.interval.ms"])
        super().__init__(env, ShareStateAdapter(self.config), cfg["share.coordinator.state.topic.num.partitions"])
        self._placement: dict[ShareStateKey, tuple[int, int]] = {}  # key -> (partition count, partition)

    def topic_configs(self) -> dict[str, str]:
        """``cleanup.policy=delete`` and unlimited retention, as Kafka's (see the module doc)."""
        return {"cleanup.policy": "delete", "retention.ms": "-1",
                "segment.bytes": str(self.env.config["share.coordinator.state.topic.segment.bytes"])}

    # -- loading ----------------------------------------------------------------------------
    async def move_misplaced(self, now_ms: int) -> set[int]:
        """Share partitions whose state is in a partition other than Kafka's
        ``abs(hashCode("group:topicId:partition")) % n`` (hightide before this fix used
        ``hash & 0x7FFFFFFF``) get a ShareSnapshot of their state in the right partition
        (fsynced), then a tombstone at the old place. Returns the partitions involved in a
        move that failed (logged)."""
        moves: dict[int, dict[int, list[tuple[ShareStateKey, PartitionState]]]] = {}  # home -> source -> states
        for p, part in self.runtime.partitions.items():
            if part.state is not LoadState.ACTIVE:
                continue
            for key, st in part.shard.states.items():
                home = self.partition_for(key)
                if home != p:
                    moves.setdefault(home, {}).setdefault(p, []).append((key, st))
        failed: set[int] = set()
        for home, by_source in moves.items():
            snapshots: list[Record] = [(ShareSnapshotKey(k.group_id, k.topic_id, k.partition), ShareSnapshotValue(
                st.snapshot_epoch + 1, st.state_epoch, st.leader_epoch, st.start_offset, st.create_timestamp,
                st.write_timestamp, st.batches, st.delivery_complete_count))
                for states in by_source.values() for k, st in states]
            try:
                await self.write_durable(home, ShareResult(snapshots), now_ms)
            except (CoordinatorUnavailable, OSError) as exc:
                log.error("moving share state into %s-%d failed: %s", STATE_TOPIC, home, exc)
                failed.add(home)
                failed.update(by_source)
                continue
            for p, states in by_source.items():
                tombstones: list[Record] = [(ShareSnapshotKey(k.group_id, k.topic_id, k.partition), None)
                                            for k, _ in states]
                try:
                    await self.runtime.write(p, returning(ShareResult(tombstones)), now_ms, internal=True)
                except CoordinatorUnavailable as exc:  # the snapshot is in place: old records stay behind
                    log.error("tombstoning moved share state in %s-%d failed: %s", STATE_TOPIC, p, exc)
                log.warning("moved the state of %d share partition(s) from %s-%d to %s-%d (Kafka's placement)",
                            len(states), STATE_TOPIC, p, STATE_TOPIC, home)
        return failed

    @property
    def loaded_records(self) -> int:
        """Records replayed by the loads so far (tests, logs)."""
        return self.runtime.loaded_records

    # -- routing ----------------------------------------------------------------------------
    def partition_for(self, key: ShareStateKey) -> int:
        """Kafka's placement of ``key`` (a Java string hash of its coordinator key, ~3 µs),
        remembered per key and partition count: every ShareFetch asks twice."""
        n = self.num_partitions
        cached = self._placement.get(key)
        if cached is not None and cached[0] == n:
            return cached[1]
        if len(self._placement) >= _PLACEMENT_CACHE:
            self._placement.clear()
        p = partition_for(coordinator_key(key.group_id, key.topic_id, key.partition), n)
        self._placement[key] = (n, p)
        return p

    def _exists(self, topic_id: uuid.UUID, partition: int) -> bool:
        t = self.env.image().topic_by_id(topic_id)
        return t is not None and partition in t.partitions

    async def _run(self, key: ShareStateKey, fn: Callable[[ShareCoordinatorShard], ShareResult]) -> Any:
        """The response of ``fn`` once its records are committed and applied. Raises
        CoordinatorUnavailable (with the code to answer)."""
        if self.env.stopping():
            raise CoordinatorUnavailable("the broker is shutting down")
        return await self.execute(key, fn, self.env.clock.now_ms())

    async def _code(self, key: ShareStateKey, fn: Callable[[ShareCoordinatorShard], ShareResult]) -> tuple[int, str | None]:
        try:
            code, message = await self._run(key, fn)
        except CoordinatorUnavailable as exc:
            return int(exc.error_code), str(exc)
        return int(code), message

    # -- SharePersister -----------------------------------------------------------------------
    async def initialize_checked(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> tuple[int, str | None]:
        clock = self.env.clock
        return await self._code(key, lambda s: s.initialize(key, state_epoch, start_offset, clock.now_ms(),
                                                            self._exists))

    async def write_checked(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                            delivery_complete_count: int, state_batches: tuple[StateBatch, ...]) -> tuple[int, str | None]:
        clock = self.env.clock
        return await self._code(key, lambda s: s.write(key, state_epoch, leader_epoch, start_offset,
                                                       delivery_complete_count, tuple(state_batches), clock.now_ms(),
                                                       self._exists))

    async def delete_checked(self, key: ShareStateKey) -> tuple[int, str | None]:
        return await self._code(key, lambda s: s.delete(key, self._exists))

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> int:
        return (await self.initialize_checked(key, state_epoch, start_offset))[0]

    async def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    delivery_complete_count: int, state_batches: tuple[StateBatch, ...]) -> int:
        return (await self.write_checked(key, state_epoch, leader_epoch, start_offset, delivery_complete_count,
                                         state_batches))[0]

    async def delete(self, key: ShareStateKey) -> int:
        return (await self.delete_checked(key))[0]

    async def read(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState:
        """ReadShareGroupState: a write operation, since a newer leader epoch is recorded."""
        try:
            clock = self.env.clock
            return await self._run(key, lambda s: s.read(key, leader_epoch, clock.now_ms(), self._exists))
        except CoordinatorUnavailable as exc:
            return ShareState(error_code=int(exc.error_code), error_message=str(exc))

    async def read_summary(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState:
        try:
            return self.summary(key)
        except CoordinatorUnavailable as exc:
            return ShareState(error_code=int(exc.error_code), error_message=str(exc))

    # -- synchronous reads (no records) -----------------------------------------------------
    def summary(self, key: ShareStateKey) -> ShareState:
        """ReadShareGroupStateSummary for one share partition (never writes; committed
        state). Raises CoordinatorLoadInProgress / CoordinatorUnavailable."""
        return self.shard_for(key).read_summary(key, self._exists)  # no topic yet: an empty shard

    def initialized(self, key: ShareStateKey) -> bool:
        """True when the committed state of ``key`` exists with a start offset (the share
        partition is initialised): a dictionary lookup, no objects built, for the share
        partitions' check on every use. False says nothing more (ask :meth:`summary`).
        Raises CoordinatorLoadInProgress / CoordinatorUnavailable as :meth:`summary`."""
        st = self.shard_for(key).states.get(key)
        return st is not None and st.start_offset >= 0

    def keys_for_group(self, group_id: str) -> list[ShareStateKey]:
        """Every share partition of ``group_id`` that has (committed) state. Raises
        CoordinatorLoadInProgress while a partition is loading."""
        out: list[ShareStateKey] = []
        for shard in self.runtime.active_shards().values():
            out.extend(shard.keys_for_group(group_id))
        return out

    def all_keys(self) -> list[ShareStateKey]:
        return [k for shard in self.runtime.active_shards().values() for k in shard.states]

    # -- housekeeping -------------------------------------------------------------------------
    async def run_pruning(self) -> None:
        """Forever, on the node's clock: :meth:`prune` once right after start-up (a
        broker that keeps being killed before the interval passes would otherwise never
        prune, and each start would replay more), then every
        ``share.coordinator.state.topic.prune.interval.ms``. A failed round is logged;
        the next one runs."""
        clock = self.env.clock
        interval = self.env.config["share.coordinator.state.topic.prune.interval.ms"] / 1000
        while True:
            try:
                freed = await self.prune(clock.now_ms())
                if freed:
                    log.info("pruned %d records of %s", freed, STATE_TOPIC)
            except Exception:
                log.exception("share state pruning failed")
            await clock.sleep(interval)

    async def prune(self, now_ms: int) -> int:
        """Cold snapshots (through the write path), then delete records below each shard's
        redundant offset. Returns how many records became deletable (for logs and tests)."""
        await self.wait_loaded()
        freed = 0
        for p, part in list(self.runtime.partitions.items()):
            try:
                await self.runtime.write(p, lambda s: ShareResult(s.cold_snapshots(now_ms)), now_ms)
                target = part.shard.redundant_offset()
                plog = self.env.partition_log(STATE_TOPIC, p)
                if target is None or plog is None or target <= plog.log_start_offset:
                    continue
                before = plog.log_start_offset
                plog.delete_records_before(min(target, plog.high_watermark))
                freed += plog.log_start_offset - before
            except (CoordinatorUnavailable, OSError) as exc:
                log.warning("pruning %s-%d failed: %s", STATE_TOPIC, p, exc)
        return freed
