"""Data across brokers (issue 13, RF=1) with real processes and real clients: a topic's
partitions are led by different brokers, confluent-kafka, kafka-python and aiokafka
produce, consume in a group and commit through a bootstrap of one broker (so they must
follow the leaders and the coordinator the cluster names); a broker answers data
requests for a partition it does not lead NOT_LEADER_OR_FOLLOWER naming the leader; a
killed broker's partitions become leaderless in Metadata until it returns.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from hightide.client import BrokerConnection
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch
from tests.integration.clients import CONSUME, CREATE, PRODUCE, Rec
from tests.waiting import wait_until

PARTITIONS = 3
RECORDS = 30


def metadata(address: str, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (error code, leader id)} of ``topic`` as the broker at ``address`` says."""
    async def ask() -> dict[int, tuple[int, int]]:
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            resp = await conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
        finally:
            await conn.close()
        t = resp.topics[0]
        return {p.partition_index: (p.error_code, p.leader_id) for p in t.partitions}
    return asyncio.run(ask())


def group_consume(lib: str, bootstrap: str, topic: str, group: str, expected: int) -> list[bytes]:
    """Subscribe in ``group``, read ``expected`` records, commit synchronously, leave."""
    deadline = time.monotonic() + 60
    values: list[bytes] = []
    if lib == "confluent":
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        try:
            while len(values) < expected and time.monotonic() < deadline:
                for m in c.consume(100, 0.5):
                    assert not m.error(), m.error()
                    values.append(m.value())
            c.commit(asynchronous=False)
        finally:
            c.close()
    elif lib == "kafka-python":
        from kafka import KafkaConsumer
        kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                           auto_offset_reset="earliest")
        try:
            while len(values) < expected and time.monotonic() < deadline:
                for msgs in kc.poll(500).values():
                    values.extend(m.value for m in msgs)
            kc.commit()
        finally:
            kc.close()
    else:
        async def run() -> None:
            from aiokafka import AIOKafkaConsumer
            ac = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                  auto_offset_reset="earliest")
            await ac.start()
            try:
                while len(values) < expected and time.monotonic() < deadline:
                    for msgs in (await ac.getmany(timeout_ms=500)).values():
                        values.extend(m.value for m in msgs)
                await ac.commit()
            finally:
                await ac.stop()
        asyncio.run(run())
    return values


def coordinators(address: str, groups: list[str]) -> dict[str, int]:
    """{group: coordinator node id} by FindCoordinator v4 at ``address`` (-1 on error)."""
    async def ask() -> dict[str, int]:
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            resp = await conn.request(10, 4, {"key_type": 0, "coordinator_keys": groups})
        finally:
            await conn.close()
        return {x.key: x.node_id if x.error_code == 0 else -1 for x in resp.coordinators}
    return asyncio.run(ask())


def committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                               timeout=20)}
    finally:
        c.close()


@pytest.mark.parametrize("lib", ["confluent", "kafka-python", "aiokafka"])
def test_clients_produce_consume_and_commit_across_brokers(cluster, lib):
    c = cluster(3)
    bootstrap = c.address(c.broker_ids[0])  # one broker: the clients must find the others
    topic = f"across-{lib}"
    # a group coordinated by another broker than the bootstrap one (FindCoordinator also
    # creates __consumer_offsets, placed over the brokers)
    found = coordinators(bootstrap, [f"group-{lib}-{i}" for i in range(20)])
    group = next(g for g, node in found.items() if node not in (-1, c.broker_ids[0]))
    CREATE[lib](bootstrap, topic, PARTITIONS)
    wait_until(lambda: all(err == 0 for err, _ in metadata(bootstrap, topic).values())
               and len(metadata(bootstrap, topic)) == PARTITIONS, 20, what="leaders for every partition")
    leaders = {leader for _, leader in metadata(bootstrap, topic).values()}
    assert leaders == set(c.broker_ids)  # placement spread the partitions over the brokers
    now = int(time.time() * 1000)
    records = [Rec(i % PARTITIONS, f"k{i}".encode(), f"v{i}".encode(), (), now) for i in range(RECORDS)]
    placed = PRODUCE[lib](bootstrap, topic, records)
    assert sorted(placed) == sorted((p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS))
    values = group_consume(lib, bootstrap, topic, group, RECORDS)
    assert sorted(values) == sorted(r.value for r in records)
    assert committed(c.address(c.broker_ids[-1]), topic, group) == {p: RECORDS // PARTITIONS
                                                                    for p in range(PARTITIONS)}


def test_a_non_leader_names_the_leader_and_a_killed_broker_leaves_its_partitions_leaderless(cluster):
    c = cluster(3)
    first = c.broker_ids[0]
    bootstrap = c.address(first)
    CREATE["confluent"](bootstrap, "moves", PARTITIONS)
    wait_until(lambda: len(metadata(bootstrap, "moves")) == PARTITIONS, 20, what="the topic on every broker")
    leaders = {p: leader for p, (_, leader) in metadata(bootstrap, "moves").items()}
    p_other = next(p for p, leader in leaders.items() if leader != first)
    other = leaders[p_other]

    async def produce_here() -> tuple[int, int, list[tuple[int, int]]]:
        host, port = bootstrap.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            batch = build_batch([(None, b"x", [], int(time.time() * 1000))])
            resp = await conn.request(0, 10, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": "moves", "partition_data": [{"index": p_other, "records": batch}]}]})
        finally:
            await conn.close()
        part = resp.responses[0].partition_responses[0]
        return part.error_code, part.current_leader.leader_id, [(n.node_id, n.port) for n in resp.node_endpoints]

    code, leader, endpoints = asyncio.run(produce_here())
    assert (code, leader) == (ErrorCode.not_leader_or_follower, other)
    assert endpoints == [(other, int(c.address(other).rsplit(":", 1)[1]))]

    kept = [Rec(p_other, None, f"kept-{i}".encode(), (), int(time.time() * 1000)) for i in range(5)]
    PRODUCE["confluent"](bootstrap, "moves", kept)
    c.kill(other)
    c.wait_fenced(other)
    wait_until(lambda: metadata(bootstrap, "moves")[p_other] == (ErrorCode.leader_not_available, -1), 20,
               what="the killed broker's partition leaderless in Metadata")
    assert all(err == 0 for p, (err, _) in metadata(bootstrap, "moves").items() if leaders[p] != other)
    c.node(other).restart()
    c.wait_unfenced([other])
    wait_until(lambda: metadata(bootstrap, "moves")[p_other] == (0, other), 20,
               what="the returned broker leading its partition again")
    got = [g.value for g in CONSUME["confluent"](bootstrap, "moves", PARTITIONS, 5) if g.partition == p_other]
    assert got == [r.value for r in kept]  # RF=1: the returned broker's log is the only copy, and it is intact


def test_a_group_coordinator_moves_away_with_its_broker_and_comes_back_with_its_offsets(cluster):
    """The broker leading a group's __consumer_offsets partition is killed: FindCoordinator
    answers COORDINATOR_NOT_AVAILABLE (its only replica is fenced); once it is back it
    loads the partition again and the committed offsets are there. (One replica of
    __consumer_offsets: with the default three the coordinator moves to another replica.)"""
    c = cluster(3, offsets_topic_replication_factor=1)
    first = c.broker_ids[0]
    bootstrap = c.address(first)
    CREATE["confluent"](bootstrap, "coord", PARTITIONS)
    found = coordinators(bootstrap, [f"moving-{i}" for i in range(20)])
    group, node = next((g, n) for g, n in found.items() if n not in (-1, first))
    now = int(time.time() * 1000)
    PRODUCE["confluent"](bootstrap, "coord", [Rec(i % PARTITIONS, None, b"v%d" % i, (), now) for i in range(9)])
    assert len(group_consume("confluent", bootstrap, "coord", group, 9)) == 9
    assert committed(bootstrap, "coord", group) == {p: 3 for p in range(PARTITIONS)}

    c.kill(node)
    c.wait_fenced(node)
    wait_until(lambda: coordinators(bootstrap, [group])[group] == -1, 20,
               what="COORDINATOR_NOT_AVAILABLE while the coordinator's broker is down")
    c.node(node).restart()
    c.wait_unfenced([node])
    wait_until(lambda: coordinators(bootstrap, [group])[group] == node, 20, what="the coordinator back on its broker")
    assert committed(bootstrap, "coord", group) == {p: 3 for p in range(PARTITIONS)}


def test_share_consumers_read_every_record_once_with_state_on_other_brokers(cluster):
    """A share group over a topic whose partitions are led by every broker: each share
    partition's leader keeps its state with the share coordinator of its
    ``__share_group_state`` partition, mostly on another broker (the inter-broker
    share-state RPCs); every record is delivered once and stays acknowledged."""
    from confluent_kafka import Producer, ShareConsumer

    c = cluster(3)
    bootstrap = c.address(c.broker_ids[0])
    CREATE["confluent"](bootstrap, "shared", PARTITIONS)
    group = "share-across"

    async def configure() -> None:
        host, port = bootstrap.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            r = await conn.request(44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
                {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
                "validate_only": False})
            assert r.responses[0].error_code == 0, r.responses[0].error_message
        finally:
            await conn.close()
    asyncio.run(configure())
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(90):
        p.produce("shared", f"s{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0

    def consume(expected: int, seconds: float) -> list[tuple[int, int]]:
        sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        sc.subscribe(["shared"])
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + seconds
        try:
            while len(seen) < expected and time.monotonic() < deadline:
                for m in sc.poll(0.5):
                    assert m.error() is None, m.error()
                    seen.append((m.partition(), m.offset()))
            sc.commit_sync()
        finally:
            sc.close()
        return seen

    seen = consume(90, 60)
    assert sorted(seen) == sorted((p, o) for p in range(PARTITIONS) for o in range(30))  # every record, once
    assert consume(1, 5) == []  # acknowledged: a new member of the group gets nothing again
