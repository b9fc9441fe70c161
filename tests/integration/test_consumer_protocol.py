"""The KIP-848 consumer group protocol (``group.protocol=consumer``) against a real
``hightide serve`` with librdkafka (confluent-kafka): server-side assignment, exactly-once
consumption with manual commits, a member leaving, the admin group APIs, and a broker
restart that keeps the group's members, assignment and offsets."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ..waiting import wait_until
from .clients import Rec, confluent_create_topic, confluent_produce

SERVE_ARGS = ("--set", "group.consumer.heartbeat.interval.ms=200",
              "--set", "group.consumer.session.timeout.ms=10000")
PARTITIONS = 6


class Member:
    """One ``group.protocol=consumer`` consumer that commits what it read, synchronously."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.topic = topic
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "topic.metadata.refresh.interval.ms": 1000})
        self.c.subscribe([topic])

    def poll(self, timeout: float) -> list[bytes]:
        msgs = [m for m in self.c.consume(200, timeout) if not m.error()]
        positions: dict[int, int] = {}
        for m in msgs:
            positions[m.partition()] = m.offset() + 1
        if positions:
            self.c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()],
                          asynchronous=False)
        return [m.value() for m in msgs]

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()


def _records(prefix: str, n: int) -> list[Rec]:
    return [Rec(i % PARTITIONS, None, f"{prefix}-{i}".encode(), (), 0) for i in range(n)]


def _settle(members: list[Member], sizes: list[int], timeout: float = 20.0) -> None:
    """Poll every member until the assignment sizes are ``sizes``, covering every partition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            assert m.poll(0.05) == [], "records arrived before they were produced"
        got = sorted(len(m.assigned()) for m in members)
        union = set().union(*(m.assigned() for m in members))
        if got == sorted(sizes) and len(union) == PARTITIONS:
            return
    raise AssertionError(f"group did not settle to {sizes}: {[sorted(m.assigned()) for m in members]}")


def _consume(members: list[Member], expected: int, timeout: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for m in members:
            got += m.poll(0.05)
    for m in members:  # nothing more arrives
        got += m.poll(0.2)
    return got


def _describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result()


def _assignment(desc) -> dict[str, set[int]]:
    return {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}


def _committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    res = admin.list_consumer_group_offsets([req], request_timeout=10)[group].result()
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def _listed(admin: AdminClient, **filters) -> set[str]:
    return {g.group_id for g in admin.list_consumer_groups(request_timeout=10, **filters).result().valid}


def test_consumer_protocol_lifecycle(fresh_server):
    srv = fresh_server(*SERVE_ARGS)
    topic, group = f"kip848-{uuid.uuid4().hex[:6]}", f"g848-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(srv.bootstrap, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    members = [Member(srv.bootstrap, topic, group) for _ in range(3)]
    try:
        # three members share six partitions, assigned by the broker
        _settle(members, [2, 2, 2])
        first = _records("a", 60)
        confluent_produce(srv.bootstrap, topic, first)
        got = _consume(members, len(first))
        assert sorted(got) == sorted(r.value for r in first)  # every record exactly once
        assert _committed(admin, group, topic) == {p: 10 for p in range(PARTITIONS)}

        desc = _describe(admin, group)
        assert desc.type == ConsumerGroupType.CONSUMER
        assert desc.state == ConsumerGroupState.STABLE
        assert len(desc.members) == 3
        assert sorted(len(a) for a in _assignment(desc).values()) == [2, 2, 2]
        assert group in _listed(admin, types={ConsumerGroupType.CONSUMER})
        assert group not in _listed(admin, types={ConsumerGroupType.CLASSIC})
        assert group in _listed(admin, states={ConsumerGroupState.STABLE})
        with pytest.raises(KafkaException) as exc:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert exc.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        # one member leaves: the others take its partitions and carry on from its commits
        members.pop(0).close()
        _settle(members, [3, 3])
        second = _records("b", 30)
        confluent_produce(srv.bootstrap, topic, second)
        got = _consume(members, len(second))
        assert sorted(got) == sorted(r.value for r in second)
        assert _committed(admin, group, topic) == {p: 15 for p in range(PARTITIONS)}
        before = _assignment(_describe(admin, group))
        assert len(before) == 2

        # a restart keeps the members, their assignment and the offsets
        srv.stop()
        srv = fresh_server(*SERVE_ARGS, data_dir=srv.data_dir, port=srv.port)
        # a new admin client: the old one's reconnect backoff (librdkafka's grows to
        # reconnect.backoff.max.ms = 10 s while the broker was down) can outlast a request
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        after = _describe(admin, group)
        assert after.type == ConsumerGroupType.CONSUMER
        assert _assignment(after) == before
        assert _committed(admin, group, topic) == {p: 15 for p in range(PARTITIONS)}
        third = _records("c", 30)
        confluent_produce(srv.bootstrap, topic, third)
        got = _consume(members, len(third), timeout=45.0)  # clients reconnect at their own pace
        assert sorted(got) == sorted(r.value for r in third)
        assert _assignment(_describe(admin, group)) == before  # no member was fenced
    finally:
        for m in members:
            m.close()

    # once empty, the group can be deleted, offsets and all
    wait_until(lambda: _describe(admin, group).state == ConsumerGroupState.EMPTY, what="group to become Empty")
    assert group in _listed(admin, states={ConsumerGroupState.EMPTY})
    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    assert group not in _listed(admin)
    assert set(_committed(admin, group, topic).values()) == {-1001}


def test_one_group_id_one_protocol(fresh_server):
    """A classic member cannot join a consumer group with members (and vice versa)."""
    srv = fresh_server(*SERVE_ARGS)
    topic, group = f"kip848-{uuid.uuid4().hex[:6]}", f"g848-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(srv.bootstrap, topic, PARTITIONS)
    member = Member(srv.bootstrap, topic, group)
    classic = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group, "group.protocol": "classic",
                        "auto.offset.reset": "earliest"})
    try:
        _settle([member], [PARTITIONS])
        classic.subscribe([topic])
        errors: list[KafkaError] = []
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            msg = classic.poll(0.2)
            if msg is not None and msg.error():
                errors.append(msg.error())
            member.poll(0.01)
        assert errors and errors[0].code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL
        assert not classic.assignment()
    finally:
        classic.close()
        member.close()
