"""A broker-only node's own metadata writes go to the controller (no closure crosses a
process): topics auto-created by Metadata (visible on another broker at once), producer-id
blocks (AllocateProducerIds: disjoint blocks per broker), and the coordinators' internal
topics created on first use (a consumer group commits through a real client)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from hightide.protocol.errors import ErrorCode

from .test_read_after_write import _connect, topic_known


def test_metadata_auto_creates_through_the_controller_and_other_brokers_see_it(cluster) -> None:
    c = cluster(2)

    async def main() -> tuple[int, bool]:
        a, b = await _connect(c.address(0)), await _connect(c.address(1))
        try:
            resp = await a.request(3, a.pick_version(3, 12, 4), {
                "topics": [{"name": "auto-made", "topic_id": uuid.UUID(int=0)}], "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False})
            return int(resp.topics[0].error_code), await topic_known(b, "auto-made")
        finally:
            await a.close()
            await b.close()
    assert c.run(main()) == (ErrorCode.none, True)


def test_producer_ids_come_in_disjoint_blocks_from_the_controller(cluster) -> None:
    c = cluster(2)

    async def init_pid(address: str) -> list[int]:
        conn = await _connect(address)
        try:
            out = []
            for _ in range(3):
                resp = await conn.request(22, conn.pick_version(22, 4), {"transactional_id": None,
                                                                        "transaction_timeout": 60000})
                assert resp.error_code == ErrorCode.none, resp
                out.append(int(resp.producer_id))
            return out
        finally:
            await conn.close()
    first, second = c.run(init_pid(c.address(0))), c.run(init_pid(c.address(1)))
    assert first == sorted(first) and len(set(first)) == 3 and min(first) >= 0
    assert not set(first) & set(second) and len(set(second)) == 3


def test_a_consumer_group_commits_through_the_brokers(cluster) -> None:
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(30)
    producer = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True})
    for i in range(30):
        producer.produce("orders", key=str(i).encode(), value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g1",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["orders"])
        got = 0
        deadline = time.monotonic() + 60
        while got < 30 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 30
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=30)
        assert sum(tp.offset for tp in committed) == 30
    finally:
        consumer.close()
