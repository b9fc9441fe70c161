"""The coordinator runtime with the group coordinator on it, over a real partition log and a
fake flusher whose fsyncs the test completes (or fails) by hand: an OffsetCommit is
answered only once its records are committed, reads never see uncommitted records, a
failed fsync answers an error and applies nothing readable, writes of one partition are
pipelined (each sees the earlier ones, all share one fsync round), loading answers
COORDINATOR_LOAD_IN_PROGRESS, timers take the same path. Simulation tests in
test_coordinator_runtime_sim.py.
"""

from __future__ import annotations

import asyncio
import types

import pytest

from hightide.cluster.image import MetadataImage
from hightide.config import BrokerConfig
from hightide.group.offsets import CommitRequest
from hightide.group import records as R
from hightide.group.records import OFFSETS_TOPIC
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, validate_batches
from hightide.coordinator import runtime as coordinator_runtime
from hightide.coordinator.env import CoordinatorEnv
from hightide.coordinator.runtime import CoordinatorLoadInProgress, CoordinatorUnavailable
from hightide.coordinator.groups import GroupRuntime
from tests.waiting import async_wait_until

GROUP = "g"
T0 = 1_000_000


class FakeFlusher:
    """``durable(plog)`` hands out futures the test resolves, one flusher round at a time:
    ``complete()`` fsyncs each log asked for once and resolves every future; ``fail()``
    fails them, taking the log offline as ``PartitionLog.end_flush`` does after a real
    fsync failure (``offline=False``: the fsync could not even start, e.g. EMFILE)."""

    def __init__(self) -> None:
        self.pending: list[tuple[PartitionLog, asyncio.Future]] = []
        self.rounds = 0  # rounds that fsynced something
        self.fsyncs = 0  # logs fsynced, over all rounds

    def durable(self, plog: PartitionLog) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((plog, fut))
        return fut

    def complete(self) -> None:
        pending, self.pending = self.pending, []
        logs = {id(plog): plog for plog, _ in pending}
        for plog in logs.values():
            plog.flush()
        self.fsyncs += len(logs)
        self.rounds += bool(logs)
        for _, fut in pending:
            if not fut.done():
                fut.set_result(None)

    def fail(self, *, offline: bool = True) -> None:
        pending, self.pending = self.pending, []
        for plog, fut in pending:
            if offline:
                plog.go_offline("an fsync failed")
            if not fut.done():
                fut.set_exception(OSError(5, "Input/output error"))


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


def env_of(node) -> CoordinatorEnv:
    """The :class:`CoordinatorEnv` of a fake node: its config, image, logs, flusher and
    waiters; cluster mode if its ``cluster`` settings are not the single node's; its
    ``replica_manager`` (set by a test after the coordinator is built) looked up at each
    write, resolved at once without one."""
    cluster = getattr(node, "cluster", None)

    def replicated(topic: str, partition: int, end: int) -> asyncio.Future:
        manager = getattr(node, "replica_manager", None)
        if manager is not None:
            return manager.wait_replicated(topic, partition, end)
        done = asyncio.get_running_loop().create_future()
        done.set_result(ErrorCode.none)
        return done

    async def no_creations(topics):
        raise CoordinatorUnavailable("this test node creates no topics")

    return CoordinatorEnv(
        config=node.config, node_id=getattr(node, "node_id", 0), image=lambda: node.image,
        partition_log=node.partition_log, durable=node.flusher.durable, wake=node.waiters.wake,
        create_topics=getattr(node, "create_topics", no_creations),
        cluster=cluster is not None and not cluster.single_node,
        acting=lambda: getattr(node, "metadata_ready", True), stopping=lambda: getattr(node, "stopping", False),
        replicated=replicated)


def _runtime(path, **overrides) -> tuple[GroupRuntime, FakeBroker]:
    broker = FakeBroker(path, **overrides)
    groups = GroupRuntime(env_of(broker))
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
    """The second commit runs while the first waits for its fsync, against the working
    shard, so its ExpectedOffset (optimistic locking) sees the first one; both share one
    fsync and are answered in log order; reads see neither until then."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        first = asyncio.ensure_future(_commit(groups, 10))
        second = asyncio.ensure_future(_commit(groups, 20, expected=10))
        await _until_fsync_requested(broker)
        await async_wait_until(lambda: broker.log.log_end_offset == 2, 5, what="both commits appended")
        assert not first.done() and not second.done()
        assert _fetched(groups) == -1
        broker.flusher.complete()
        assert (await first)[0] == ErrorCode.none
        assert (await second)[1] == {("t", 0): ErrorCode.none}  # the expected offset matched
        assert _fetched(groups) == 20
        assert broker.flusher.rounds == 1
    asyncio.run(scenario())


def test_loading_answers_load_in_progress_then_serves_the_log(tmp_path, monkeypatch):
    groups, broker = _runtime(tmp_path)
    monkeypatch.setattr(coordinator_runtime, "LOAD_CHUNK_BYTES", 128)

    async def scenario():
        for i in range(30):
            await _commit(groups, i)
        reloaded = GroupRuntime(env_of(broker))
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


def _append_raw(broker: FakeBroker, key: bytes, value: bytes | None) -> None:
    """One record of other bytes than hightide writes, appended to __consumer_offsets-0."""
    batch = build_batch([(key, value, [], T0)])
    broker.log.append(batch, validate_batches(batch, client_origin=False), T0)


def _reload(broker: FakeBroker) -> GroupRuntime:
    groups = GroupRuntime(env_of(broker))
    groups.runtime.load([0])
    return groups


def test_bytes_after_a_records_known_fields_load_as_the_record(tmp_path):
    """A newer writer's additions after the fields a version knows are ignored on load,
    as Kafka's readers do."""
    groups, broker = _runtime(tmp_path)
    value = R.encode_value(R.OffsetValue(42, -1, "", T0))
    assert value is not None
    _append_raw(broker, R.encode_key(R.OffsetKey(GROUP, "t", 0)) + b"\x00\x01", value + b"\x00\x00\x00\x07")

    async def scenario():
        reloaded = _reload(broker)
        async with asyncio.timeout(30):
            await reloaded.runtime.wait_loaded()
        assert reloaded.runtime.partitions[0].state is coordinator_runtime.LoadState.ACTIVE
        assert _fetched(reloaded) == 42
    asyncio.run(scenario())


def test_a_record_that_does_not_decode_fails_the_load_as_kafka_does(tmp_path, caplog):
    """Kafka's coordinator loader fails the load on a record it cannot deserialize (an
    unknown record type aside, which it skips); the partition is then not served (FAILED:
    COORDINATOR_NOT_AVAILABLE, clients retry) and the reason is logged, with the offset."""
    groups, broker = _runtime(tmp_path)

    async def scenario():
        await _commit(groups, 5)
        _append_raw(broker, R.encode_key(R.OffsetKey(GROUP, "t", 0)), b"\x00\x03\x00")  # truncated value
        _append_raw(broker, b"\x00\x63\x00\x01g", b"\x00\x00")  # record type 99: skipped, as Kafka does
        reloaded = _reload(broker)
        async with asyncio.timeout(30):
            await reloaded.runtime.wait_loaded()
        task = reloaded.runtime.partitions[0].task
        assert task is not None and task.exception() is None
        assert reloaded.runtime.partitions[0].state is coordinator_runtime.LoadState.FAILED
        with pytest.raises(CoordinatorUnavailable) as info:
            reloaded.shard_for(GROUP)
        assert info.value.error_code == ErrorCode.coordinator_not_available
        with pytest.raises(CoordinatorUnavailable):
            await _commit(reloaded, 6)
    with caplog.at_level("ERROR"):
        asyncio.run(scenario())
    assert any("__consumer_offsets-0" in r.getMessage() and "offset 1" in r.getMessage() for r in caplog.records)


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


# -- pipelined writes, reads of committed state, failures ------------------------------------
def _commit_tp(groups: GroupRuntime, partition: int, offset: int):
    commit = CommitRequest("t", partition, offset, -1, "", None)
    return groups.execute(GROUP, lambda shard: shard.commit_offsets(
        GROUP, -1, "", [commit], T0, lambda t, p: True), T0)


def _offsets(shard) -> dict:
    return {g: dict(tps) for g, tps in shard.offsets.offsets.items()}


def _log_state(groups: GroupRuntime, broker: FakeBroker, upto: int | None = None) -> dict:
    """The offsets a fresh load of the log (its records below ``upto``) would hold."""
    shard = groups.runtime.adapter.new_shard(0)
    for chunk in coordinator_runtime.iter_record_chunks(broker.log):
        for offset, key, value in chunk:
            if upto is None or offset < upto:
                groups.runtime.adapter.load_record([shard], 0, offset, key, value)
    return _offsets(shard)


def test_concurrent_commits_of_one_partition_share_one_fsync_round(tmp_path):
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        commits = [asyncio.ensure_future(_commit_tp(groups, p, 100 + p)) for p in range(50)]
        await async_wait_until(lambda: broker.log.log_end_offset == 50, 5, what="all 50 commits appended")
        assert not any(c.done() for c in commits)  # none answered before the fsync
        assert _fetched(groups) == -1
        broker.flusher.complete()
        answers = await asyncio.gather(*commits)
        assert all(a[0] == ErrorCode.none for a in answers)
        assert (broker.flusher.rounds, broker.flusher.fsyncs) == (1, 1)  # was one round per commit
        assert groups.runtime.committed_offset(0) == 50
        assert _offsets(groups.shard_for(GROUP)) == _log_state(groups, broker)
    asyncio.run(scenario())


def test_a_read_during_an_uncommitted_write_sees_committed_state_then_the_write(tmp_path):
    """OffsetFetch answers at once from the committed shard while a commit waits for its
    fsync (the old value), and sees the new value as soon as the commit is answered; an
    operation without records waits behind the uncommitted write."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        first = asyncio.ensure_future(_commit(groups, 5))
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        await first
        second = asyncio.ensure_future(_commit(groups, 6))
        await _until_fsync_requested(broker)
        assert _fetched(groups) == 5  # committed state, not the pending 6
        no_records = asyncio.ensure_future(groups.execute(GROUP, lambda s: s.expire_offsets(T0), T0))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not no_records.done()  # its answer may depend on the uncommitted commit
        broker.flusher.complete()
        await second
        assert _fetched(groups) == 6
        await no_records
    asyncio.run(scenario())


def test_failed_fsync_fails_every_write_in_flight_and_reads_stay_committed(tmp_path):
    """A real fsync failure (the log goes offline): every write in flight fails with
    NOT_COORDINATOR, none of them is readable, the committed shard equals a load of the
    log's committed prefix, later writes are refused."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        ok = asyncio.ensure_future(_commit_tp(groups, 0, 1))
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        await ok
        writes = [asyncio.ensure_future(_commit_tp(groups, p, 50 + p)) for p in range(5)]
        await async_wait_until(lambda: broker.log.log_end_offset == 6, 5, what="5 commits appended")
        broker.flusher.fail()
        for w in writes:
            with pytest.raises(CoordinatorUnavailable) as info:
                await w
            assert info.value.error_code == ErrorCode.not_coordinator
        assert groups.runtime.committed_offset(0) == 1
        assert _offsets(groups.shard_for(GROUP)) == _log_state(groups, broker, upto=1)
        assert [f.offset for f in groups.shard_for(GROUP).fetch_offsets(GROUP, [("t", p) for p in range(5)])] \
            == [1, -1, -1, -1, -1]
        with pytest.raises(CoordinatorUnavailable) as info:
            await _commit_tp(groups, 0, 2)
        assert info.value.error_code == ErrorCode.not_coordinator
        assert groups.runtime.working_shard(0) is None  # no timers run on a fenced partition
    asyncio.run(scenario())


def test_fsync_that_could_not_start_reloads_the_shard_from_the_log(tmp_path):
    """The fsync fails but the log stays writable (e.g. out of descriptors): the writes in
    flight fail, the partition reloads (an fsync first, then a replay), and afterwards
    memory equals the whole log and writes work again."""
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        writes = [asyncio.ensure_future(_commit_tp(groups, p, 70 + p)) for p in range(4)]
        await async_wait_until(lambda: broker.log.log_end_offset == 4, 5, what="4 commits appended")
        broker.flusher.fail(offline=False)
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert all(isinstance(r, CoordinatorUnavailable) for r in results)
        assert _offsets(groups.shard_for(GROUP)) == {}  # reads: still the committed state
        with pytest.raises(CoordinatorLoadInProgress):
            await _commit_tp(groups, 0, 1)  # reloading
        await _until_fsync_requested(broker)  # the reload makes the log durable first
        broker.flusher.complete()
        await async_wait_until(lambda: groups.runtime.working_shard(0) is not None, 5, what="the reload")
        assert groups.runtime.committed_offset(0) == 4
        assert _offsets(groups.shard_for(GROUP)) == _log_state(groups, broker) != {}
        assert _offsets(groups.runtime.working_shard(0)) == _log_state(groups, broker)
        nxt = asyncio.ensure_future(_commit_tp(groups, 0, 99))
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        assert (await nxt)[0] == ErrorCode.none
        assert _fetched(groups) == 99
    asyncio.run(scenario())


def test_unloading_answers_parked_joins_not_coordinator(tmp_path):
    """A JoinGroup parked in the initial rebalance delay, then a failed fsync of its
    partition: the unloaded working shard's parked request answers NOT_COORDINATOR (the
    client finds the coordinator again) instead of hanging."""
    from hightide.group.classic import JoinRequest
    groups, broker = _runtime(tmp_path, **{"log.flush.interval.messages": 1,
                                           "group.initial.rebalance.delay.ms": 60_000})

    async def scenario():
        handle, parked = groups.park()
        req = JoinRequest("jg", "", None, "c", "h", 30_000, 30_000, "consumer", (("range", b""),), False)
        await groups.execute("jg", lambda s: s.join_group(req, handle, T0), T0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not parked.done()  # waiting for the rebalance delay
        commit = asyncio.ensure_future(_commit(groups, 1))
        await _until_fsync_requested(broker)
        broker.flusher.fail()
        with pytest.raises(CoordinatorUnavailable):
            await commit
        with pytest.raises(CoordinatorUnavailable) as info:
            await asyncio.wait_for(parked, 5)
        assert info.value.error_code == ErrorCode.not_coordinator
    asyncio.run(scenario())


class FakeReplicas:
    """The replica manager's ``wait_replicated`` for a partition with followers: every
    call is a future the test resolves with ``replicate(code)``; the log's HW stays where
    the test puts it (the log's ``after_append`` hook keeps it from following the LEO)."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        plog.after_append = lambda: None
        self.waits: list[tuple[int, asyncio.Future]] = []

    def wait_replicated(self, topic: str, partition: int, end: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.waits.append((end, fut))
        return fut

    def replicate(self, code: ErrorCode = ErrorCode.none) -> None:
        """The HW reaches the log end: resolve every wait with ``code``."""
        self.plog.high_watermark = self.plog.log_end_offset
        waits, self.waits = self.waits, []
        for _, fut in waits:
            fut.set_result(code)


def _replicated_runtime(path, **overrides) -> tuple[GroupRuntime, FakeBroker, FakeReplicas]:
    groups, broker = _runtime(path, **overrides)
    broker.replica_manager = FakeReplicas(broker.log)
    return groups, broker, broker.replica_manager


async def _until_waiting(replicas: FakeReplicas) -> None:
    for _ in range(100):
        if replicas.waits:
            return
        await asyncio.sleep(0)
    raise AssertionError("nothing waits for replication")


@pytest.mark.parametrize("code", [ErrorCode.none, ErrorCode.not_enough_replicas_after_append])
def test_a_replicated_partition_answers_once_the_high_watermark_passes_the_write(tmp_path, code):
    """Cluster mode: an OffsetCommit appended (and, with flush.messages=1, fsynced) is
    not answered nor visible to OffsetFetch until the HW passes it; an HW that passed it
    counts even if the ISR shrank below min.insync.replicas since (the records are in
    the committed log)."""
    groups, broker, replicas = _replicated_runtime(tmp_path, **{"log.flush.interval.messages": 1})

    async def scenario():
        commit = asyncio.ensure_future(_commit(groups, 42))
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        await _until_waiting(replicas)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not commit.done() and _fetched(groups) == -1  # durable here, not replicated: not committed
        assert replicas.waits[0][0] == 1  # waits for the HW to reach the write's end
        second = asyncio.ensure_future(_commit(groups, 43))  # pipelined behind it
        await _until_fsync_requested(broker)
        broker.flusher.complete()
        replicas.replicate(code)
        assert (await commit)[0] == ErrorCode.none and (await second)[0] == ErrorCode.none
        assert _fetched(groups) == 43 and groups.runtime.committed_offset(0) == 2
    asyncio.run(scenario())


def test_a_write_that_loses_its_leadership_answers_not_coordinator_and_unloads(tmp_path):
    groups, broker, replicas = _replicated_runtime(tmp_path)

    async def scenario():
        commit = asyncio.ensure_future(_commit(groups, 7))
        await _until_waiting(replicas)
        replicas.replicate(ErrorCode.not_leader_or_follower)
        with pytest.raises(CoordinatorUnavailable) as info:
            await commit
        assert info.value.error_code == ErrorCode.not_coordinator
        assert 0 not in groups.runtime.partitions  # unloaded: the new leader's coordinator takes over
    asyncio.run(scenario())


def test_no_followers_no_wait(tmp_path):
    """A partition without followers (wait_replicated resolved at once, as the replica
    manager answers for RF=1 and the single node): committed at the append, as before."""
    groups, broker, replicas = _replicated_runtime(tmp_path)

    def at_once(topic: str, partition: int, end: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(ErrorCode.none)
        return fut
    replicas.wait_replicated = at_once  # type: ignore[method-assign]

    async def scenario():
        result = await _commit(groups, 9)
        assert result[0] == ErrorCode.none and _fetched(groups) == 9
    asyncio.run(scenario())


def test_a_new_leader_loads_only_once_its_high_watermark_reaches_the_log_end(tmp_path):
    """A coordinator partition gained by a broker whose HW is still below its log end
    (a new leader before its followers fetch) stays LOADING until the HW reaches the log
    end it found, then replays all of it: the committed offsets answered never go back
    to what a replay up to the old HW would give."""
    groups, broker, replicas = _replicated_runtime(tmp_path)

    async def scenario():
        for i in range(5):
            commit = asyncio.ensure_future(_commit(groups, i))
            await _until_waiting(replicas)
            replicas.replicate()
            await commit
        broker.log.high_watermark = 2  # what a new leader may know at first
        reloaded = GroupRuntime(env_of(broker))
        reloaded.runtime.load([0])
        await _until_waiting(replicas)
        assert replicas.waits[0][0] == 5
        for _ in range(5):
            await asyncio.sleep(0)
        with pytest.raises(CoordinatorLoadInProgress):
            reloaded.shard_for(GROUP)
        replicas.replicate()
        await reloaded.runtime.wait_loaded()
        assert _fetched(reloaded) == 4
    asyncio.run(scenario())
