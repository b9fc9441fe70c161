"""The coordinator runtime: runs :class:`GroupCoordinatorShard` s over the partitions of
``__consumer_offsets``.

For a request it picks the group's shard, calls the shard (which returns records and a
response without changing state), appends the records as one batch to the partition's
log, replays them into the shard, and only then returns the response. A failed append
replays nothing, so readers only ever see state that is in the log. At start-up (and
when the topic is created) each partition's log is replayed into a fresh shard.

Parked requests (a JoinGroup waiting for the rebalance, a follower's SyncGroup waiting
for the leader) stay sans-IO: :meth:`GroupRuntime.park` gives a handler an opaque handle
and an asyncio future; the handle goes into the shard call, and whenever a shard result
(of any request or timer) carries a completion for it, after that result's records are
durable, the future is resolved with the response.

KIP-848 consumer groups run through the same path: a ConsumerGroupHeartbeat's records are
appended and replayed, then its live records (member timers, never appended); the timer
loop (:meth:`GroupRuntime.poll`) fences members whose deadlines passed, and after a
partition is loaded every member's timers are armed afresh, as Kafka does.

KIP-932 share groups run through the same path too (timers fenced by :meth:`poll`,
armed afresh on load); the share-group state initialization that a ShareGroupHeartbeat
may need is driven by :mod:`.share_groups`.

The topic is created on first use, like Kafka's, with ``cleanup.policy=compact``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import group_config_default
from ..group.classic import GroupLimits
from ..group.consumer_api import ConsumerGroupConfig, ImageTopics, TimersKey
from ..group.records import OFFSETS_TOPIC, partition_for
from ..group.shard import (
    CoordinatorResult,
    GroupConfig,
    GroupCoordinatorShard,
    LiveGroup,
    decode_record,
    encode_record,
)
from ..group.share_group import ShareGroupConfig, ShareTimersKey

from .coordinator_log import CoordinatorUnavailable, append_records, ensure_internal_topic, read_records

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.group")


class GroupRuntime:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.num_partitions: int = cfg["offsets.topic.num.partitions"]
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
                initialize_retry_ms=cfg["group.share.initialize.retry.interval.ms"]))
        self.shards: dict[int, GroupCoordinatorShard] = {}
        self._parked: dict[int, asyncio.Future] = {}
        self._handles = itertools.count(1)
        # Per connection, its latest parked request: Kafka evaluates one request per
        # connection at a time, so later group requests on it wait for that answer.
        self._tails: dict[str, asyncio.Future] = {}

    # -- loading --------------------------------------------------------------------------
    def start(self) -> None:
        """Load the shards if the topic exists (it is created on first use)."""
        topic = self.broker.image.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            self.num_partitions = len(topic.partitions)
            self._load_all()

    def ensure_topic(self) -> None:
        if self.shards:
            return
        self.num_partitions = ensure_internal_topic(self.broker, OFFSETS_TOPIC, self.num_partitions, {
            "cleanup.policy": "compact", "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"])})
        self._load_all()

    def _load_all(self) -> None:
        for p in range(self.num_partitions):
            self.shards[p] = self._load(p)

    def _load(self, partition: int) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(self.group_config, consumer_timeouts=self.consumer_timeouts)
        count = sum(self._replay(shard, key, value)
                    for _, key, value in read_records(self.broker, OFFSETS_TOPIC, partition))
        if count:
            log.info("loaded %d records into group coordinator %s-%d", count, OFFSETS_TOPIC, partition)
        for k, v in shard.loaded(self._now_ms(), lambda g: self.share_timeouts(g)[0]).live:  # members' timers
            shard.replay(k, v)
        return shard

    @staticmethod
    def _now_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def _replay(shard: GroupCoordinatorShard, key_bytes: bytes, value_bytes: bytes | None) -> int:
        record = decode_record(key_bytes, value_bytes)
        if record is None:
            return 0  # a record type hightide does not interpret (written by another broker)
        shard.replay(*record)
        return 1

    # -- running requests -------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        self.ensure_topic()
        return self.shards[self.partition_for(group_id)]

    def execute(self, group_id: str, fn: Callable[[GroupCoordinatorShard], CoordinatorResult], now_ms: int) -> Any:
        """Run ``fn`` on the group's shard; append and replay its records, install its
        live state, resolve its completions; return the response. Raises
        :class:`CoordinatorUnavailable` if the append fails (nothing is applied then)."""
        shard = self.shard_for(group_id)
        result = fn(shard)
        self._apply(self.partition_for(group_id), result, now_ms)
        return result.response

    def _apply(self, partition: int, result: CoordinatorResult, now_ms: int) -> None:
        shard = self.shards[partition]
        consumer_before = {k.group_id: self._consumer_summary(shard, k.group_id)
                           for k, _ in result.live if isinstance(k, TimersKey)}
        share_before = {k.group_id: self._share_summary(shard, k.group_id)
                        for k, _ in result.live if isinstance(k, ShareTimersKey)}
        if result.records:
            self.append(partition, result.records, now_ms)
        for k, v in result.live:
            if not isinstance(k, LiveGroup):
                shard.replay(k, v)
                continue
            old = shard.groups.get(k.group)
            shard.replay(k, v)
            if v is not None and (old is None or (old.state, old.generation) != (v.state, v.generation)):
                log.info("group %s is %s (generation %d, %d members%s)", k.group, v.state.value, v.generation,
                         len(v.members), f", leader {v.leader}" if v.leader else "")
        for gid, before in consumer_before.items():
            after = self._consumer_summary(shard, gid)
            if after != before and after is not None:
                log.info("consumer group %s is %s (group epoch %d, assignment epoch %d, %d members)", gid, *after)
        for gid, before in share_before.items():
            after = self._share_summary(shard, gid)
            if after != before and after is not None:
                log.info("share group %s is %s (group epoch %d, assignment epoch %d, %d members)", gid, *after)
        for handle, response in result.completions:
            fut = self._parked.pop(handle, None)
            if fut is not None and not fut.done():
                fut.set_result(response)

    # -- parked requests ---------------------------------------------------------------------
    def park(self) -> tuple[int, asyncio.Future]:
        """A handle for a shard call whose answer may come later, and the future it resolves."""
        handle = next(self._handles)
        fut = asyncio.get_running_loop().create_future()
        self._parked[handle] = fut
        return handle, fut

    def tail(self, connection: str) -> asyncio.Future | None:
        """The connection's parked request still unanswered, if any."""
        fut = self._tails.get(connection)
        return fut if fut is not None and not fut.done() else None

    def set_tail(self, connection: str, fut: asyncio.Future) -> None:
        self._tails[connection] = fut
        fut.add_done_callback(lambda f, c=connection: self._tails.pop(c, None) if self._tails.get(c) is f else None)

    def forget(self, handle: int) -> None:
        self._parked.pop(handle, None)

    def close(self) -> None:
        """Shutting down: parked requests fail with CoordinatorUnavailable (answered
        NOT_COORDINATOR, so clients find the coordinator again)."""
        for fut in self._parked.values():
            if not fut.done():
                fut.set_exception(CoordinatorUnavailable("the coordinator is shutting down"))
        self._parked.clear()

    @staticmethod
    def _share_summary(shard: GroupCoordinatorShard, group_id: str) -> tuple | None:
        g = shard.share.get(group_id)
        return None if g is None else (g.state, g.group_epoch, g.assignment_epoch, len(g.members))

    @staticmethod
    def _consumer_summary(shard: GroupCoordinatorShard, group_id: str) -> tuple | None:
        g = shard.consumer.get(group_id)
        return None if g is None else (g.state, g.group_epoch, g.assignment_epoch, len(g.members))

    def share_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a share group: its group configs
        (``share.session.timeout.ms``, ``share.heartbeat.interval.ms``), else the broker's."""
        return self._timeouts("share", group_id)

    def consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """The same for a KIP-848 consumer group (``consumer.*`` group configs)."""
        return self._timeouts("consumer", group_id)

    def _timeouts(self, kind: str, group_id: str) -> tuple[int, int]:
        overrides = self.broker.image.group_configs.get(group_id, {})
        out = []
        for name in (f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"):
            value = overrides.get(name)
            out.append(int(value) if value is not None else group_config_default(self.broker.config, name))
        return out[0], out[1]

    def topics(self) -> ImageTopics:
        """The topics of the current metadata image, as consumer groups see them."""
        return ImageTopics(self.broker.image)

    def append(self, partition: int, records: list[tuple[Any, Any]], now_ms: int) -> None:
        append_records(self.broker, OFFSETS_TOPIC, partition, [encode_record(k, v) for k, v in records], now_ms)
        shard = self.shards[partition]
        for k, v in records:
            shard.replay(k, v)

    def poll(self, now_ms: int) -> None:
        """Classic group timers (sessions, rebalance and initial delays, pending syncs) and
        consumer group timers (sessions, rebalance timeouts) that are due."""
        for p, shard in self.shards.items():
            try:
                if shard.groups:
                    self._apply(p, shard.poll(now_ms), now_ms)
                due = shard.consumer_next_deadline()
                if due is not None and due <= now_ms:
                    self._apply(p, shard.consumer_poll(now_ms, self.topics()), now_ms)
                due = shard.share.next_deadline()
                if due is not None and due <= now_ms:
                    result = shard.share_poll(now_ms, self.topics())
                    if result.records:
                        log.info("share group members fenced (session expired): %s", sorted(
                            {(k.group_id, k.member_id) for k, v in result.live if v is None}))
                    self._apply(p, result, now_ms)
            except CoordinatorUnavailable:
                pass

    def expire_offsets(self, now_ms: int) -> None:
        """Offsets of groups without members past ``offsets.retention.minutes``."""
        for p, shard in self.shards.items():
            result = shard.expire_offsets(now_ms)
            if result.records:
                try:
                    self.append(p, result.records, now_ms)
                except CoordinatorUnavailable:
                    pass
