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


def test_a_producer_id_block_the_controller_cannot_give_is_a_retriable_error(cluster) -> None:
    """With the controller gone, a broker that needs a new producer-id block answers
    InitProducerId with COORDINATOR_LOAD_IN_PROGRESS (Kafka's retriable answer while no
    block is available) instead of closing the connection."""
    c = cluster(1)
    c.controller.kill()

    async def init_pid() -> int:
        conn = await _connect(c.address(0))
        try:
            resp = await conn.request(22, conn.pick_version(22, 4), {"transactional_id": None,
                                                                    "transaction_timeout": 60000})
            return int(resp.error_code)
        finally:
            await conn.close()
    assert c.run(init_pid()) == ErrorCode.coordinator_load_in_progress


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


def test_acls_and_describe_quorum_through_a_broker(cluster) -> None:
    acl = {"resource_type": 2, "resource_name": "fwd-", "resource_pattern_type": 4, "principal": "User:fw",
           "host": "*", "operation": 4, "permission_type": 3}
    c = cluster(2, authorizer_class_name="standard", super_users="User:ANONYMOUS")

    async def main() -> tuple[list[str], int, list[int]]:
        a, b = await _connect(c.address(0)), await _connect(c.address(1))
        try:
            created = await a.request(30, a.pick_version(30, 3, 1), {"creations": [acl]})
            assert created.results[0].error_code == ErrorCode.none, created
            seen = await b.request(29, b.pick_version(29, 3, 1), {  # at once, on the other broker
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": "User:fw", "host_filter": None, "operation": 1, "permission_type": 1})
            quorum = await b.request(55, b.pick_version(55, 2), {"topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
            part = quorum.topics[0].partitions[0]
            return ([r.resource_name for r in seen.resources], int(part.leader_id),
                    sorted(int(o.replica_id) for o in part.observers))
        finally:
            await a.close()
            await b.close()
    names, leader, observers = c.run(main())
    assert names == ["fwd-"]
    assert leader == c.controller.spec.node_id and observers == [0, 1]  # the controller's view, not the broker's


def test_find_coordinator_without_a_controller_answers_at_once(cluster) -> None:
    """The group's internal topic does not exist yet and the controller is gone: the
    broker answers FindCoordinator COORDINATOR_NOT_AVAILABLE within a few seconds (Kafka
    answers at once while its topic creation goes on), not after a 30 s hold of the
    client's connection; the same for Metadata's auto-creation (the topic is unknown)."""
    c = cluster(1, controllers=3)
    leader = c.quorum_leader()
    for node in [n for n in c.controllers if n.spec.node_id != leader][:1] + \
            [n for n in c.controllers if n.spec.node_id == leader]:
        node.kill()  # a majority gone: the survivor can never lead

    async def ask() -> tuple[int, int, float]:
        conn = await _connect(c.address(0))
        try:
            t0 = time.monotonic()
            fc = await conn.request(10, conn.pick_version(10, 3), {"key": "g-no-controller", "key_type": 0})
            md = await conn.request(3, conn.pick_version(3, 12, 4), {
                "topics": [{"name": "made-without-controller", "topic_id": uuid.UUID(int=0)}],
                "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
            return int(fc.error_code), int(md.topics[0].error_code), time.monotonic() - t0
        finally:
            await conn.close()
    fc_code, md_code, took = c.run(ask())
    assert fc_code == ErrorCode.coordinator_not_available
    assert md_code in (ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available)
    assert took < 15, f"held the client for {took:.1f} s"
