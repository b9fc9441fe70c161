"""The coordinator runtime with the group coordinator on it, over a real partition log and a
fake flusher whose fsyncs the test completes (or fails) by hand: an OffsetCommit is
answered only once its records are committed, reads never see uncommitted records, a
failed fsync answers an error and applies nothing, operations of one partition run one
after the other, loading answers COORDINATOR_LOAD_IN_PROGRESS, timers take the same path.
"""

from __future__ import annotations

import asyncio
import types

import pytest

from hightide.cluster.image import MetadataImage
from hightide.config import BrokerConfig
from hightide.group.offsets import CommitRequest
from hightide.group.records import OFFSETS_TOPIC
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.errors import ErrorCode
from hightide.server import coordinator_runtime
from hightide.server.coordinator_runtime import CoordinatorLoadInProgress, CoordinatorUnavailable
from hightide.server.group_runtime import GroupRuntime

GROUP = "g"
T0 = 1_000_000


class FakeFlusher:
    """``durable(plog)`` hands out futures the test resolves: ``complete()`` / ``fail()``."""

    def __init__(self) -> None:
        self.pending: list[tuple[PartitionLog, asyncio.Future]] = []

    def durable(self, plog: PartitionLog) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((plog, fut))
        return fut

    def complete(self) -> None:
        for plog, fut in self.pending:
            plog.flush()
            fut.set_result(None)
        self.pending.clear()

    def fail(self) -> None:
        for _, fut in self.pending:
            fut.set_exception(OSError(5, "Input/output error"))
        self.pending.clear()


class FakeBroker:
    """What GroupRuntime uses of the broker: config, image, one open log per partition."""

    def __init__(self, path, **overrides) -> None:
        self.config = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1, **overrides})
        self.image = MetadataImage()
        self.flusher = FakeFlusher()
        self.waiters = types.SimpleNamespace(wake=lambda tp: None)
        n = overrides.get("log.flush.interval.messages")
        self.log = PartitionLog.open(str(path / f"{OFFSETS_TOPIC}-0"),
                                     LogConfig(flush_interval_messages=n), T0, clean_shutdown=False)

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.log if (topic, partition) == (OFFSETS_TOPIC, 0) else None


def _runtime(path, **overrides) -> tuple[GroupRuntime, FakeBroker]:
    broker = FakeBroker(path, **overrides)
    groups = GroupRuntime(broker)  # type: ignore[arg-type]
    groups.runtime.load([0], now=True)
    return groups, broker


def _commit(groups: GroupRuntime, offset: int, expected: int | None = None):
    commit = CommitRequest("t", 0, offset, -1, "", expected)
    return groups.execute(GROUP, lambda shard: shard.commit_offsets(
        GROUP, -1, "", [commit], T0, lambda t, p: True), T0)


def _fetched(groups: GroupRuntime) -> int:
    return groups.shard_for(GROUP).fetch_offsets(GROUP, [("t", 0)])[0].offset


async def _until_fsync_requested(broker: FakeBroker) -> None:
    for _ in range(100):
        if broker.flusher.pending:
            return
        await asyncio.sleep(0)
    raise AssertionError("no fsync was requested")


def test_offset_commit_waits_for_the_fsync_and_reads_see_committed_state_only(tmp_path):
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        commit = asyncio.ensure_future(_commit(groups, 42))
        await _until_fsync_requested(broker)
        assert not commit.done()  # appended, not durable: not answered
        assert broker.log.log_end_offset == 1
        assert _fetched(groups) == -1  # OffsetFetch does not see it yet
        broker.flusher.complete()
        group_error, errors = await commit
        assert (group_error, errors) == (ErrorCode.none, {("t", 0): ErrorCode.none})
        assert _fetched(groups) == 42
        assert groups.runtime.committed_offset(0) == 1
    asyncio.run(scenario())


def test_failed_fsync_answers_not_coordinator_and_applies_nothing(tmp_path):
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        commit = asyncio.ensure_future(_commit(groups, 42))
        await _until_fsync_requested(broker)
        broker.flusher.fail()
        with pytest.raises(CoordinatorUnavailable) as info:
            await commit
        assert info.value.error_code == ErrorCode.not_coordinator
        assert _fetched(groups) == -1
        assert groups.runtime.committed_offset(0) == 0
    asyncio.run(scenario())


def test_interval_flushing_commits_at_append(tmp_path):
    groups, broker = _runtime(tmp_path)

    async def scenario():
        assert await _commit(groups, 7) == (ErrorCode.none, {("t", 0): ErrorCode.none})
        assert broker.flusher.pending == []  # nothing waited for an fsync
        assert _fetched(groups) == 7
    asyncio.run(scenario())


def test_failed_append_answers_coordinator_not_available(tmp_path, monkeypatch):
    groups, broker = _runtime(tmp_path)

    def full(*a, **kw):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(broker.log, "append", full)

    async def scenario():
        with pytest.raises(CoordinatorUnavailable) as info:
            await _commit(groups, 7)
        assert info.value.error_code == ErrorCode.coordinator_not_available
        assert _fetched(groups) == -1
    asyncio.run(scenario())


def test_writes_of_a_partition_see_every_earlier_write(tmp_path):
    """The second commit is decided only after the first is committed and applied, so
    its ExpectedOffset (optimistic locking) sees the first one."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        first = asyncio.ensure_future(_commit(groups, 10))
        second = asyncio.ensure_future(_commit(groups, 20, expected=10))
        await _until_fsync_requested(broker)
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(broker.flusher.pending) == 1 and not second.done()  # queued behind the first
        broker.flusher.complete()
        assert (await first)[0] == ErrorCode.none
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        assert (await second)[1] == {("t", 0): ErrorCode.none}
        assert _fetched(groups) == 20
    asyncio.run(scenario())


def test_loading_answers_load_in_progress_then_serves_the_log(tmp_path, monkeypatch):
    groups, broker = _runtime(tmp_path)
    monkeypatch.setattr(coordinator_runtime, "LOAD_CHUNK_BYTES", 128)

    async def scenario():
        for i in range(30):
            await _commit(groups, i)
        reloaded = GroupRuntime(broker)  # type: ignore[arg-type]
        yields = 0
        reloaded.runtime.load([0])
        with pytest.raises(CoordinatorLoadInProgress) as info:
            reloaded.shard_for(GROUP)
        assert info.value.error_code == ErrorCode.coordinator_load_in_progress
        with pytest.raises(CoordinatorLoadInProgress):
            await reloaded.execute(GROUP, lambda shard: shard.expire_offsets(T0), T0)
        while reloaded.runtime.partitions[0].state is coordinator_runtime.LoadState.LOADING:
            await asyncio.sleep(0)
            yields += 1
        assert yields > 1  # replayed in chunks, yielding to the loop in between
        assert _fetched(reloaded) == 29
        assert reloaded.runtime.committed_offset(0) == 30
    asyncio.run(scenario())


def test_timers_take_the_write_path(tmp_path):
    """Offset expiry (a timer) appends tombstones and applies them only once durable."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1, "offsets.retention.minutes": 1})

    async def scenario():
        commit = asyncio.ensure_future(_commit(groups, 5))
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        await commit
        expiry = asyncio.ensure_future(groups.expire_offsets(T0 + 61_000))
        await _until_fsync_requested(broker)
        assert _fetched(groups) == 5  # the tombstone is not committed yet
        broker.flusher.complete()
        await expiry
        assert _fetched(groups) == -1
    asyncio.run(scenario())


def test_a_caller_that_goes_away_does_not_cut_the_write_off(tmp_path):
    """The connection closes while its commit waits for the fsync: the commit still
    completes and is applied, so memory matches the log."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        commit = asyncio.ensure_future(_commit(groups, 42))
        await _until_fsync_requested(broker)
        commit.cancel()
        broker.flusher.complete()
        for _ in range(10):
            await asyncio.sleep(0)
        assert _fetched(groups) == 42  # in the log, so in the shard
        assert groups.runtime.committed_offset(0) == 1
    asyncio.run(scenario())
