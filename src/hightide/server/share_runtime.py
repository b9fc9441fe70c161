"""The share coordinator runtime: runs :class:`ShareCoordinatorShard` s over the partitions
of ``__share_group_state`` and is the broker's :class:`~hightide.share.types.SharePersister`
(``broker.share_state``).

A call picks the share partition's shard (Kafka's ``abs(hash("group:topicId:partition")) %
share.coordinator.state.topic.num.partitions``), asks the shard for records and a response
(no state change), appends the records as one batch, replays them with their offsets, and
only then answers. A failed append replays nothing. When the log's flush policy requires it
(``flush.messages``), the answer also waits for the fsync: "written" means durable.

At start-up each partition's log is replayed from its log start offset. Two things keep
that replay short: a ShareSnapshot every ``share.coordinator.snapshot.update.records.per.snapshot``
updates of a share partition, and pruning — every
``share.coordinator.state.topic.prune.interval.ms`` the records below the shard's redundant
offset (older than the latest snapshot of every live share partition) are deleted, after
quiet share partitions got a fresh "cold" snapshot.

The topic is created on first write with ``cleanup.policy=delete`` and unlimited retention,
as Kafka does: ShareUpdate records hold only changed batches, so compaction (which keeps the
last record per key) would lose state; pruning is explicit instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.errors import ErrorCode
from ..share.coordinator import (
    ShareCoordinatorConfig,
    ShareCoordinatorShard,
    ShareResult,
)
from ..share.records import (
    STATE_TOPIC,
    ShareRecordError,
    coordinator_key,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from ..share.types import ShareState, ShareStateKey, StateBatch
from .coordinator_log import (
    CoordinatorUnavailable,
    append_records,
    ensure_internal_topic,
    needs_fsync,
    read_records,
)

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.share")


def _now_ms() -> int:
    return int(time.time() * 1000)


class ShareStateRuntime:
    """SharePersister over ``__share_group_state``; also the state RPC handlers' backend."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.num_partitions: int = cfg["share.coordinator.state.topic.num.partitions"]
        self.config = ShareCoordinatorConfig(
            snapshot_update_records_per_snapshot=cfg["share.coordinator.snapshot.update.records.per.snapshot"],
            cold_partition_snapshot_interval_ms=cfg["share.coordinator.cold.partition.snapshot.interval.ms"])
        self.shards: dict[int, ShareCoordinatorShard] = {}
        self.loaded_records = 0  # records replayed at the last load (tests, logs)

    # -- loading ----------------------------------------------------------------------------
    def start(self) -> None:
        """Load the shards if the topic exists (it is created on first write)."""
        topic = self.broker.image.topics.get(STATE_TOPIC)
        if topic is not None:
            self.num_partitions = len(topic.partitions)
            self._load_all()

    def ensure_topic(self) -> None:
        if self.shards:
            return
        cfg = self.broker.config
        self.num_partitions = ensure_internal_topic(self.broker, STATE_TOPIC, self.num_partitions, {
            "cleanup.policy": "delete", "retention.ms": "-1",
            "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"])})
        self._load_all()

    def _load_all(self) -> None:
        self.loaded_records = 0
        for p in range(self.num_partitions):
            self.shards[p] = self._load(p)

    def _load(self, partition: int) -> ShareCoordinatorShard:
        shard = ShareCoordinatorShard(self.config)
        count = 0
        for offset, key_bytes, value_bytes in read_records(self.broker, STATE_TOPIC, partition):
            try:
                key = decode_key(key_bytes)
                if key is None:
                    continue
                shard.replay(offset, key, decode_value(key, value_bytes))
                count += 1
            except ShareRecordError as exc:
                log.error("skipping malformed record at %s-%d offset %d: %s", STATE_TOPIC, partition, offset, exc)
        if count:
            log.info("loaded %d records (%d share partitions) into share coordinator %s-%d", count,
                     len(shard.states), STATE_TOPIC, partition)
        self.loaded_records += count
        return shard

    # -- routing ----------------------------------------------------------------------------
    def partition_for(self, key: ShareStateKey) -> int:
        return partition_for(coordinator_key(key.group_id, key.topic_id, key.partition), self.num_partitions)

    def _exists(self, topic_id, partition: int) -> bool:
        t = self.broker.image.topic_by_id(topic_id)
        return t is not None and partition in t.partitions

    def _run(self, key: ShareStateKey, fn: Callable[[ShareCoordinatorShard], ShareResult], now_ms: int) -> tuple:
        """(response, log to fsync or None). Raises CoordinatorUnavailable."""
        self.ensure_topic()
        p = self.partition_for(key)
        shard = self.shards[p]
        result = fn(shard)
        if not result.records:
            return result.response, None
        offsets = append_records(self.broker, STATE_TOPIC, p, [(encode_key(k), encode_value(v))
                                                               for k, v in result.records], now_ms)
        for offset, (k, v) in zip(offsets, result.records):
            shard.replay(offset, k, v)
        return result.response, needs_fsync(self.broker, STATE_TOPIC, p)

    async def _durable(self, plog) -> bool:
        if plog is None:
            return True
        try:
            await self.broker.flusher.durable(plog)
            return True
        except OSError:
            return False

    async def _code(self, key: ShareStateKey, fn: Callable[[ShareCoordinatorShard], ShareResult]) -> tuple[int, str | None]:
        if self.broker.stopping:
            return int(ErrorCode.coordinator_not_available), "the broker is shutting down"
        try:
            (code, message), plog = self._run(key, fn, _now_ms())
        except CoordinatorUnavailable as exc:
            return int(ErrorCode.coordinator_not_available), str(exc)
        if not await self._durable(plog):
            return int(ErrorCode.kafka_storage_error), "fsync of the share state failed"
        return int(code), message

    # -- SharePersister -----------------------------------------------------------------------
    async def initialize_checked(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> tuple[int, str | None]:
        return await self._code(key, lambda s: s.initialize(key, state_epoch, start_offset, _now_ms(), self._exists))

    async def write_checked(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                            delivery_complete_count: int, state_batches: tuple[StateBatch, ...]) -> tuple[int, str | None]:
        return await self._code(key, lambda s: s.write(key, state_epoch, leader_epoch, start_offset,
                                                       delivery_complete_count, tuple(state_batches), _now_ms(),
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
        if self.broker.stopping:
            return ShareState(error_code=int(ErrorCode.coordinator_not_available))
        try:
            state, plog = self._run(key, lambda s: s.read(key, leader_epoch, _now_ms(), self._exists), _now_ms())
        except CoordinatorUnavailable as exc:
            return ShareState(error_code=int(ErrorCode.coordinator_not_available), error_message=str(exc))
        if not await self._durable(plog):
            return ShareState(error_code=int(ErrorCode.kafka_storage_error), error_message="fsync failed")
        return state

    async def read_summary(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState:
        return self.summary(key)

    # -- synchronous reads (no records) -----------------------------------------------------
    def summary(self, key: ShareStateKey) -> ShareState:
        """ReadShareGroupStateSummary for one share partition (never writes)."""
        shard = self.shards.get(self.partition_for(key)) if self.shards else None
        if shard is None:  # no state topic yet: nothing was ever written
            return ShareCoordinatorShard(self.config).read_summary(key, self._exists)
        return shard.read_summary(key, self._exists)

    def keys_for_group(self, group_id: str) -> list[ShareStateKey]:
        """Every share partition of ``group_id`` that has state."""
        out: list[ShareStateKey] = []
        for shard in self.shards.values():
            out.extend(shard.keys_for_group(group_id))
        return out

    def all_keys(self) -> list[ShareStateKey]:
        return [k for shard in self.shards.values() for k in shard.states]

    # -- housekeeping -------------------------------------------------------------------------
    def prune(self, now_ms: int) -> int:
        """Cold snapshots, then delete records below each shard's redundant offset.
        Returns how many records became deletable (for logs and tests)."""
        freed = 0
        for p, shard in self.shards.items():
            try:
                cold = shard.cold_snapshots(now_ms)
                if cold:
                    offsets = append_records(self.broker, STATE_TOPIC, p,
                                             [(encode_key(k), encode_value(v)) for k, v in cold], now_ms)
                    for offset, (k, v) in zip(offsets, cold):
                        shard.replay(offset, k, v)
                target = shard.redundant_offset()
                plog = self.broker.partition_log(STATE_TOPIC, p)
                if target is None or plog is None or target <= plog.log_start_offset:
                    continue
                before = plog.log_start_offset
                plog.delete_records_before(min(target, plog.high_watermark))
                freed += plog.log_start_offset - before
            except (CoordinatorUnavailable, OSError) as exc:
                log.warning("pruning %s-%d failed: %s", STATE_TOPIC, p, exc)
        return freed
