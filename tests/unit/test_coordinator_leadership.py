"""Coordinators across brokers (issue 13): a broker-only node serves the partitions of
``__consumer_offsets`` it leads (``follow_leadership``), answers NOT_COORDINATOR for the
others, COORDINATOR_LOAD_IN_PROGRESS while a gained partition loads, and reloads state
written before from the log when leadership comes back; FindCoordinator names the
leader of the key's partition.

The group runtime runs over real partition logs with a broker double whose cluster
settings say ``process.roles=broker`` (node 1); the metadata image is changed with the
records a controller writes (PartitionRecord), as a broker's metadata follower applies them.
"""

from __future__ import annotations

import asyncio
import types
import uuid

import pytest

from hightide import Broker, BrokerConfig
from hightide.client import BrokerConnection
from hightide.cluster.broker_records import RegisterBrokerRecord
from hightide.cluster.image import MetadataImage
from hightide.cluster.records import PartitionRecord, TopicRecord
from hightide.cluster.settings import ClusterSettings
from hightide.group.offsets import CommitRequest
from hightide.group.records import OFFSETS_TOPIC, partition_for
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.errors import ErrorCode
from hightide.coordinator.runtime import CoordinatorLoadInProgress, CoordinatorUnavailable
from hightide.coordinator.groups import GroupRuntime
from hightide.coordinator.share_partitions import SharePartitionManager
from tests.unit.test_coordinator_runtime import env_of

T0 = 1_000_000
OFFSETS_ID = uuid.UUID("0b6c8c63-7d0c-4a5e-9d0e-6a1c2f3e4d50")


def group_in(partition: int, n: int = 3) -> str:
    """A group id whose __consumer_offsets partition is ``partition`` (of ``n``)."""
    return next(g for g in (f"g{i}" for i in range(1000)) if partition_for(g, n) == partition)


class FakeFlusher:
    def durable(self, plog: PartitionLog) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


class BrokerOnlyNode:
    """What the group runtime uses of a broker-only process (node 1): config, cluster
    settings, the image, one log per __consumer_offsets partition."""

    def __init__(self, path) -> None:
        self.config = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 3})
        self.cluster = ClusterSettings(roles=frozenset({"broker"}), node_id=1)
        self.node_id = 1
        self.image = MetadataImage()
        self.flusher = FakeFlusher()
        self.waiters = types.SimpleNamespace(wake=lambda tp: None)
        self.stopping = False
        self.logs = {p: PartitionLog.open(str(path / f"{OFFSETS_TOPIC}-{p}"), LogConfig(), T0, clean_shutdown=False)
                     for p in range(3)}
        self.offset = 0
        self.apply(TopicRecord(OFFSETS_TOPIC, str(OFFSETS_ID)))

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get(partition) if topic == OFFSETS_TOPIC else None

    def apply(self, *records) -> None:
        for r in records:
            self.image.apply(r, self.offset)
            self.offset += 1

    def lead(self, leaders: dict[int, int], epoch: int) -> None:
        self.apply(*(PartitionRecord(str(OFFSETS_ID), p, leader, epoch, (1,)) for p, leader in leaders.items()))


def commit(groups: GroupRuntime, group: str, offset: int):
    c = CommitRequest("t", 0, offset, -1, "", None)
    return groups.execute(group, lambda shard: shard.commit_offsets(group, -1, "", [c], T0, lambda t, p: True), T0)


def committed(groups: GroupRuntime, group: str) -> int:
    return groups.shard_for(group).fetch_offsets(group, [("t", 0)])[0].offset


def test_a_broker_serves_the_coordinator_partitions_it_leads_and_follows_moves(tmp_path):
    async def scenario() -> None:
        node = BrokerOnlyNode(tmp_path)
        node.lead({0: 1, 1: 1, 2: 2}, epoch=0)
        groups = GroupRuntime(env_of(node))
        groups.start()  # cluster mode: loads what the image says is led here
        assert sorted(groups.runtime.partitions) == [0, 1]
        await groups.wait_loaded()
        g0, g1, g2 = group_in(0), group_in(1), group_in(2)
        assert (await commit(groups, g1, 41))[1] == {("t", 0): ErrorCode.none}
        assert committed(groups, g1) == 41

        with pytest.raises(CoordinatorUnavailable) as led_elsewhere:
            await commit(groups, g2, 1)
        assert led_elsewhere.value.error_code == ErrorCode.not_coordinator
        with pytest.raises(CoordinatorUnavailable) as read_elsewhere:
            committed(groups, g2)
        assert read_elsewhere.value.error_code == ErrorCode.not_coordinator

        node.lead({1: -1}, epoch=1)  # its broker was fenced: no leader (RF=1)
        groups.follow_leadership(node.image)
        assert sorted(groups.runtime.partitions) == [0]
        with pytest.raises(CoordinatorUnavailable) as lost:
            committed(groups, g1)
        assert lost.value.error_code == ErrorCode.not_coordinator
        assert committed(groups, g0) == -1  # partition 0 still served

        node.lead({1: 1, 2: 1}, epoch=2)  # unfenced again, and partition 2 moved here
        groups.follow_leadership(node.image)
        with pytest.raises(CoordinatorLoadInProgress):
            committed(groups, g1)
        await groups.wait_loaded()
        assert committed(groups, g1) == 41  # reloaded from the log it wrote before
        assert (await commit(groups, g2, 7))[1] == {("t", 0): ErrorCode.none} and committed(groups, g2) == 7
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_led_elsewhere_tells_which_groups_another_broker_coordinates(tmp_path):
    async def scenario() -> None:
        node = BrokerOnlyNode(tmp_path)
        node.lead({0: 1, 1: 2, 2: -1}, epoch=0)
        groups = GroupRuntime(env_of(node))
        groups.start()
        assert [groups.led_elsewhere(group_in(p)) for p in range(3)] == [False, True, True]
        node.cluster = ClusterSettings(roles=frozenset({"broker", "controller"}), node_id=1)
        assert not GroupRuntime(env_of(node)).led_elsewhere(group_in(1))  # single node
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_unloading_fails_a_parked_join_with_not_coordinator(tmp_path):
    from hightide.group.classic import JoinRequest

    async def scenario() -> None:
        node = BrokerOnlyNode(tmp_path)
        node.lead({0: 1, 1: 1, 2: 1}, epoch=0)
        groups = GroupRuntime(env_of(node))
        groups.start()
        await groups.wait_loaded()
        g = group_in(0)
        handle, fut = groups.park()
        jr = JoinRequest(g, "", None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),),
                         require_known_member_id=False)
        await groups.execute(g, lambda shard: shard.join_group(jr, handle, T0), T0)
        assert not fut.done()  # waiting for the initial rebalance delay
        node.lead({0: 2}, epoch=1)
        groups.follow_leadership(node.image)
        with pytest.raises(CoordinatorUnavailable) as exc:
            await asyncio.wait_for(fut, 5)
        assert exc.value.error_code == ErrorCode.not_coordinator
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_single_node_ignores_follow_leadership(tmp_path):
    async def scenario() -> None:
        node = BrokerOnlyNode(tmp_path)
        node.cluster = ClusterSettings(roles=frozenset({"broker", "controller"}), node_id=1)
        node.lead({0: 1, 1: 1, 2: 1}, epoch=0)
        groups = GroupRuntime(env_of(node))
        groups.start()
        await groups.wait_loaded()
        node.lead({0: 2}, epoch=1)
        groups.follow_leadership(node.image)
        assert sorted(groups.runtime.partitions) == [0, 1, 2]
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_share_partition_manager_forgets_share_partitions_led_elsewhere():
    from hightide.share.types import ShareStateKey

    tid = uuid.uuid4()
    image = MetadataImage()
    image.apply(TopicRecord("s", str(tid)), 0)
    image.apply(PartitionRecord(str(tid), 0, 1, 0, (1,)), 1)
    image.apply(PartitionRecord(str(tid), 1, 2, 0, (2,)), 2)
    woken = []
    manager = SharePartitionManager(max_sessions=10, node_id=1, partition_log=lambda t, p: None, wake=woken.append,
                                    groups=None, persister=None)  # type: ignore[arg-type]  # neither is used here
    here, elsewhere, gone = ShareStateKey("grp", tid, 0), ShareStateKey("grp", tid, 1), ShareStateKey("grp", tid, 9)
    for key in (here, elsewhere, gone):
        manager._parts[key] = types.SimpleNamespace(core=object())  # type: ignore[assignment]
    manager.follow_leadership(image)
    assert list(manager._parts) == [here]
    assert manager.wait_key(elsewhere) in woken and manager.wait_key(gone) in woken


# -- FindCoordinator ------------------------------------------------------------------------------
def test_find_coordinator_names_the_leader_of_the_key_partition(tmp_path):
    async def scenario() -> None:
        cfg = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 3})
        async with Broker(cfg, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await b.metadata_writer.commit_metadata([
                RegisterBrokerRecord(1, str(uuid.uuid4()), 101, end_points=(("PLAINTEXT", "127.0.0.1", b.port, 0),),
                                     fenced=False),
                RegisterBrokerRecord(2, str(uuid.uuid4()), 102, end_points=(("PLAINTEXT", "127.0.0.2", 9092, 0),),
                                     fenced=False),
                TopicRecord(OFFSETS_TOPIC, str(OFFSETS_ID)),
                PartitionRecord(str(OFFSETS_ID), 0, 1, 0, (1,)),
                PartitionRecord(str(OFFSETS_ID), 1, 2, 0, (2,)),
                PartitionRecord(str(OFFSETS_ID), 2, -1, 1, (3,)),
            ])
            conn = BrokerConnection("127.0.0.1", b.port, "test")
            await conn.connect()
            try:
                keys = [group_in(0), group_in(1), group_in(2)]
                resp = await conn.request(10, 4, {"key_type": 0, "coordinator_keys": keys})
                got = [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators]
                assert got == [(keys[0], ErrorCode.none, 1, "127.0.0.1", b.port),
                               (keys[1], ErrorCode.none, 2, "127.0.0.2", 9092),
                               (keys[2], ErrorCode.coordinator_not_available, -1, "", -1)]
                v3 = await conn.request(10, 3, {"key": keys[1], "key_type": 0})
                assert (v3.error_code, v3.node_id, v3.port) == (ErrorCode.none, 2, 9092)
            finally:
                await conn.close()
    asyncio.run(asyncio.wait_for(scenario(), 60))
