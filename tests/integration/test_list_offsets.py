"""ListOffsets through each client's admin API, against an oracle computed from what
the test produced (out-of-order timestamps, max inside a compressed batch, ties)."""

from __future__ import annotations

import asyncio

import pytest

from ..rawkafka import RawClient
from .clients import Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration

# Three flushes -> three batches on partition 0. The max (9000) first appears at offset 1,
# inside a gzip batch of 5 records; a later batch ties it (the earliest must win).
BATCHES = [
    [1000, 9000, 3000, 9000, 2000],
    [500, 8000],
    [9000, 4000],
]


@pytest.fixture(scope="module")
def produced(server, tmp_path_factory):
    topic = "list-offsets-oracle"
    confluent_create_topic(server.bootstrap, topic, 2)
    stamps = []
    for batch in BATCHES:
        recs = [Rec(0, b"k", f"v{len(stamps) + i}".encode(), (), ts) for i, ts in enumerate(batch)]
        confluent_produce(server.bootstrap, topic, recs, "gzip", {"linger.ms": 200})
        stamps.extend(batch)
    return topic, stamps


def oracle_for_timestamp(stamps, t):
    for off, ts in enumerate(stamps):
        if ts >= t:
            return off, ts
    return -1, -1


def oracle_max(stamps):
    m = max(stamps)
    return stamps.index(m), m


QUERIES = [0, 600, 1000, 1001, 2500, 8500, 9000, 9001]


def test_confluent_admin(server, produced):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    topic, stamps = produced
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    tp = TopicPartition(topic, 0)

    def ask(spec):
        r = admin.list_offsets({tp: spec})[tp].result(10)
        return r.offset, r.timestamp

    assert ask(OffsetSpec.earliest())[0] == 0
    assert ask(OffsetSpec.latest())[0] == len(stamps)
    assert ask(OffsetSpec.max_timestamp()) == oracle_max(stamps) == (1, 9000)
    for t in QUERIES:
        assert ask(OffsetSpec.for_timestamp(t)) == oracle_for_timestamp(stamps, t), t
    # empty partition 1: max timestamp is -1/-1
    tp1 = TopicPartition(topic, 1)
    r = admin.list_offsets({tp1: OffsetSpec.max_timestamp()})[tp1].result(10)
    assert (r.offset, r.timestamp) == (-1, -1)


def test_kafka_python_admin(server, produced):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.consumer.offsets import OffsetSpec
    topic, stamps = produced
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        def ask(spec):
            r = admin.list_partition_offsets({tp: spec})[tp]
            return r.offset, r.timestamp

        assert ask(OffsetSpec.EARLIEST)[0] == 0
        assert ask(OffsetSpec.LATEST)[0] == len(stamps)
        assert ask(OffsetSpec.MAX_TIMESTAMP) == oracle_max(stamps)
        for t in QUERIES:
            exp = oracle_for_timestamp(stamps, t)
            assert ask(t) == exp, t
    finally:
        admin.close()


def test_aiokafka_consumer_offsets(server, produced):
    topic, stamps = produced

    async def run():
        from aiokafka import AIOKafkaConsumer, TopicPartition
        c = AIOKafkaConsumer(bootstrap_servers=server.bootstrap)
        await c.start()
        tp = TopicPartition(topic, 0)
        try:
            assert (await c.beginning_offsets([tp]))[tp] == 0
            assert (await c.end_offsets([tp]))[tp] == len(stamps)
            for t in QUERIES:
                r = (await c.offsets_for_times({tp: t}))[tp]
                exp = oracle_for_timestamp(stamps, t)
                got = (r.offset, r.timestamp) if r else (-1, -1)
                assert got == exp, t
        finally:
            await c.stop()

    asyncio.run(run())


@pytest.mark.parametrize("version", range(1, 10))
def test_raw_versions(server, produced, version):
    """-3 below v7 is UNSUPPORTED_VERSION for that partition; v7+ is exact."""
    topic, stamps = produced
    with RawClient(server.bootstrap) as c:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": -3, "current_leader_epoch": -1},
            {"partition_index": 1, "timestamp": -1, "current_leader_epoch": -1}]}]}
        resp = c.request(2, version, body)
        p0, p1 = resp.topics[0].partitions
        if version < 7:
            assert p0.error_code == 35  # UNSUPPORTED_VERSION
        else:
            assert (p0.error_code, p0.offset, p0.timestamp) == (0, 1, 9000)
        assert (p1.error_code, p1.offset) == (0, 0)
        # unknown topic / partition
        body["topics"] = [{"name": topic, "partitions": [{"partition_index": 7, "timestamp": -1,
                                                          "current_leader_epoch": -1}]}]
        assert c.request(2, version, body).topics[0].partitions[0].error_code == 3
