"""hightide.client.AdminClient against a real `hightide serve`, with confluent-kafka
(librdkafka) as the oracle wherever it can answer the same question."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from hightide.client import (
    AdminClient,
    KafkaError,
    NewTopic,
    TopicAlreadyExistsError,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from hightide.client.errors import ErrorCode

from .clients import Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration

STAMPS = [1000, 9000, 3000, 9000, 2000, 500, 8000]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def confluent_admin(server):
    from confluent_kafka.admin import AdminClient as CAdmin
    return CAdmin({"bootstrap.servers": server.bootstrap})


@pytest.fixture(scope="module")
def produced(server):
    """Topic with 2 partitions: partition 0 holds STAMPS (two batches), partition 1 is empty."""
    topic = f"admin-client-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(server.bootstrap, topic, 2)
    confluent_produce(server.bootstrap, topic, [Rec(0, b"k", b"v", (), ts) for ts in STAMPS[:5]])
    confluent_produce(server.bootstrap, topic, [Rec(0, b"k", b"v", (), ts) for ts in STAMPS[5:]])
    return topic


def test_metadata_matches_confluent(server, produced):
    cmd = confluent_admin(server).list_topics(timeout=10)

    async def main():
        async with AdminClient(server.bootstrap) as admin:
            return await admin.metadata(), await admin.list_topics(), await admin.describe_topics([produced])
    md, names, described = run(main())
    assert md.cluster_id == cmd.cluster_id
    assert md.controller_id == cmd.controller_id
    assert {b.node_id: (b.host, b.port) for b in md.brokers.values()} == \
        {b.id: (b.host, b.port) for b in cmd.brokers.values()}
    assert produced in names and set(names) <= set(cmd.topics)
    t = described[produced]
    assert sorted(t.partitions) == sorted(cmd.topics[produced].partitions) == [0, 1]
    assert all(p.leader == cmd.topics[produced].partitions[i].leader for i, p in t.partitions.items())
    assert t.topic_id is not None and not t.is_internal


def test_create_describe_grow_and_delete_topics(server, topic_name):
    async def main():
        async with AdminClient(server.bootstrap) as admin:
            assert await admin.create_topics([NewTopic(topic_name, 2, 1, {"retention.ms": "60000"})]) == \
                {topic_name: None}
            with pytest.raises(TopicAlreadyExistsError):
                await admin.create_topics([topic_name])
            assert len((await admin.describe_topics([topic_name]))[topic_name].partitions) == 2
            assert await admin.create_partitions({topic_name: 3}) == {topic_name: None}
            assert len((await admin.describe_topics([topic_name]))[topic_name].partitions) == 3
            bad = await admin.create_partitions({topic_name: 1}, raise_on_error=False)
            assert bad[topic_name].code == ErrorCode.invalid_partitions
            assert await admin.delete_topics([topic_name]) == {topic_name: None}
            assert topic_name not in await admin.list_topics()
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.describe_topics([topic_name])
            gone = await admin.delete_topics([topic_name], raise_on_error=False)
            assert gone[topic_name].code == ErrorCode.unknown_topic_or_partition
    run(main())
    cmd = confluent_admin(server).list_topics(timeout=10)
    assert topic_name not in cmd.topics


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_list_offsets_every_spec_matches_confluent(server, produced, isolation):
    from confluent_kafka import IsolationLevel
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import OffsetSpec
    cadmin = confluent_admin(server)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "max_timestamp": OffsetSpec.max_timestamp()}
    specs.update({t: OffsetSpec.for_timestamp(t) for t in (0, 600, 1000, 1001, 8500, 9000, 9001)})
    level = IsolationLevel.READ_COMMITTED if isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    expected = {}
    for part in (0, 1):
        for name, spec in specs.items():
            ctp = CTP(produced, part)
            r = cadmin.list_offsets({ctp: spec}, isolation_level=level)[ctp].result(10)
            expected[(part, name)] = (r.offset, r.timestamp)

    async def main():
        got = {}
        async with AdminClient(server.bootstrap) as admin:
            for name in specs:  # one request per spec: a partition may appear once per request
                res = await admin.list_offsets({TopicPartition(produced, p): name for p in (0, 1)},
                                               isolation_level=isolation)
                got.update({(tp.partition, name): tuple(r) for tp, r in res.items()})
        return got
    got = run(main())
    assert got == expected
    assert got[(0, "max_timestamp")] == (1, 9000)
    assert got[(0, "latest")] == (len(STAMPS), -1) and got[(1, "max_timestamp")] == (-1, -1)


def test_list_offsets_unknown_topic(server):
    async def main():
        async with AdminClient(server.bootstrap) as admin:
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.list_offsets({TopicPartition("no-such-topic-xyz", 0): "latest"})
            res = await admin.list_offsets({TopicPartition("no-such-topic-xyz", 0): "latest"},
                                           raise_on_error=False)
            assert res[TopicPartition("no-such-topic-xyz", 0)].code == ErrorCode.unknown_topic_or_partition
    run(main())


def _supports(server, api_key: int) -> bool:
    async def main():
        async with AdminClient(server.bootstrap) as admin:
            return (await admin._any_conn()).supports(api_key)
    return run(main())


def test_find_coordinator(server):
    assert _supports(server, 10), "the broker must advertise FindCoordinator"

    async def main():
        async with AdminClient(server.bootstrap) as admin:
            md = await admin.metadata(topics=[])
            coord = await admin.find_coordinator(f"g-{uuid.uuid4().hex[:6]}")
            assert coord.node_id in md.brokers
            assert (coord.host, coord.port) == (md.brokers[coord.node_id].host, md.brokers[coord.node_id].port)
            both = await admin.find_coordinators(["a1", "a2"])
            assert set(both) == {"a1", "a2"}
    run(main())


def test_group_offsets_round_trip_and_match_confluent(server, produced):
    assert all(_supports(server, k) for k in (8, 9, 10)), "the broker must advertise the offset APIs"
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTP
    group = f"grp-{uuid.uuid4().hex[:6]}"
    tp0, tp1 = TopicPartition(produced, 0), TopicPartition(produced, 1)

    async def commit():
        async with AdminClient(server.bootstrap) as admin:
            assert await admin.alter_consumer_group_offsets(group, {tp0: (3, "meta-0"), tp1: 0}) == \
                {tp0: None, tp1: None}
            return await admin.list_consumer_group_offsets(group), \
                await admin.list_consumer_group_offsets(group, [tp0, TopicPartition(produced, 7)])
    everything, some = run(commit())
    assert (everything[tp0].offset, everything[tp0].metadata) == (3, "meta-0")
    assert everything[tp1].offset == 0
    assert some[tp0].offset == 3 and some[TopicPartition(produced, 7)].offset == -1

    cadmin = confluent_admin(server)
    req = ConsumerGroupTopicPartitions(group, [CTP(produced, 0), CTP(produced, 1)])
    res = cadmin.list_consumer_group_offsets([req])[group].result(10)
    assert {(p.partition, p.offset, p.metadata or "") for p in res.topic_partitions} == \
        {(0, 3, "meta-0"), (1, 0, "")}

    async def delete():
        async with AdminClient(server.bootstrap) as admin:
            assert await admin.delete_consumer_group_offsets(group, [tp1]) == {tp1: None}
            return await admin.list_consumer_group_offsets(group)
    after = run(delete())
    assert set(after) == {tp0}


def test_lag_one_call_and_two_call_paths_agree(server, produced):
    assert all(_supports(server, k) for k in (8, 9, 10)), "the broker must advertise the offset APIs"
    group = f"lag-{uuid.uuid4().hex[:6]}"
    tp0, tp1 = TopicPartition(produced, 0), TopicPartition(produced, 1)

    async def main():
        async with AdminClient(server.bootstrap) as admin:
            await admin.alter_consumer_group_offsets(group, {tp0: 2, tp1: 0})
            fast = await admin.lag(group)
            admin.use_extensions = False
            slow = await admin.lag(group)
            return fast, slow
    fast, slow = run(main())
    for tp in (tp0, tp1):
        assert slow[tp].source == "list_offsets"
        assert (fast[tp].committed, fast[tp].high_watermark, fast[tp].log_start_offset, fast[tp].lag) == \
            (slow[tp].committed, slow[tp].high_watermark, slow[tp].log_start_offset, slow[tp].lag)
    assert fast[tp0].lag == len(STAMPS) - 2 and fast[tp1].lag == 0
    # hightide sends the OffsetFetch extension on flexible versions: one round trip
    assert fast[tp0].source == "extension"


def test_classic_group_apis(server):
    missing = [k for k in (15, 16, 42) if not _supports(server, k)]
    assert not missing, f"the broker must advertise ListGroups/DescribeGroups/DeleteGroups ({missing})"
    group = f"cg-{uuid.uuid4().hex[:6]}"

    async def main():
        async with AdminClient(server.bootstrap) as admin:
            await admin.create_topics([NewTopic(group, 1)])
            await admin.alter_consumer_group_offsets(group, {TopicPartition(group, 0): 0})
            listed = [g.group_id for g in await admin.list_groups()]
            described = await admin.describe_groups([group])
            deleted = await admin.delete_groups([group], raise_on_error=False)
            return listed, described, deleted
    listed, described, deleted = run(main())
    assert group in listed
    assert described[group].members == ()
    assert deleted[group] is None or isinstance(deleted[group], KafkaError)
