"""Idempotent producers: every client's idempotent mode, plus exact duplicate and
out-of-order handling checked on the wire."""

from __future__ import annotations

import asyncio

import pytest

from hightide.protocol.records import build_batch

from ..rawkafka import RawClient
from .clients import CONSUME, Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


def _recs(n):
    return [Rec(i % 2, None, f"v{i}".encode(), (), 1_700_000_000_000 + i) for i in range(n)]


def test_confluent_idempotent(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 2)
    recs = _recs(2000)
    pos = confluent_produce(server.bootstrap, topic_name, recs, extra={"enable.idempotence": True, "linger.ms": 5})
    assert len(set(pos)) == len(recs)
    got = CONSUME["confluent"](server.bootstrap, topic_name, 2, len(recs))
    assert sorted(g.value for g in got) == sorted(r.value for r in recs)


def test_kafka_python_and_aiokafka_idempotent(server, topic_name):
    from kafka import KafkaProducer
    confluent_create_topic(server.bootstrap, topic_name, 2)
    p = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True, acks="all")
    futs = [p.send(topic_name, value=f"kp{i}".encode(), partition=i % 2) for i in range(200)]
    p.flush()
    assert all(f.get(10).offset >= 0 for f in futs)
    p.close()

    async def run():
        from aiokafka import AIOKafkaProducer
        ap = AIOKafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True)
        await ap.start()
        try:
            for i in range(200):
                await ap.send_and_wait(topic_name, value=f"ak{i}".encode(), partition=i % 2)
        finally:
            await ap.stop()

    asyncio.run(run())
    got = CONSUME["confluent"](server.bootstrap, topic_name, 2, 400)
    assert len(got) == 400 and len({g.value for g in got}) == 400


def _produce(c, topic, batch):
    r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return r.responses[0].partition_responses[0]


def test_duplicates_and_out_of_order_on_the_wire(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 1)
    with RawClient(server.bootstrap) as c:
        init = c.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                 "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == 0 and init.producer_id >= 0
        pid = init.producer_id

        def batch(seq, n=3, epoch=0):
            return build_batch([(None, f"s{seq + i}".encode(), [], 1_700_000_000_000) for i in range(n)],
                               producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        first = _produce(c, topic_name, batch(0))
        assert (first.error_code, first.base_offset) == (0, 0)
        dup = _produce(c, topic_name, batch(0))  # a retry of the same batch
        assert (dup.error_code, dup.base_offset) == (0, 0)
        assert _produce(c, topic_name, batch(3)).base_offset == 3
        assert _produce(c, topic_name, batch(10)).error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(c, topic_name, batch(6, epoch=1)).error_code == 45  # new epoch must start at 0
        assert _produce(c, topic_name, batch(0, epoch=1)).base_offset == 6
        assert _produce(c, topic_name, batch(9, epoch=0)).error_code == 47  # INVALID_PRODUCER_EPOCH
        end = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
        assert end.topics[0].partitions[0].offset == 9  # the duplicate was not appended
