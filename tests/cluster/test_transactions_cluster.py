"""Transactions across brokers (issue 16) with real processes and confluent-kafka: a
topic whose partitions are led by all three brokers; the transaction coordinator sends
markers to other leaders with WriteTxnMarkers, and a broker verifies a transactional
produce with a coordinator on another broker (KIP-890, AddPartitionsToTxn verify_only).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from hightide.client import BrokerConnection
from hightide.protocol.errors import ErrorCode
from tests.cluster.test_data_across_brokers import coordinators, metadata
from tests.integration.clients import CREATE
from tests.waiting import wait_until

PARTITIONS = 3


def make_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """Create ``topic`` and return {partition: leader} once every partition has one."""
    CREATE["confluent"](bootstrap, topic, partitions)
    wait_until(lambda: len(metadata(bootstrap, topic)) == partitions
               and all(err == 0 for err, _ in metadata(bootstrap, topic).values()), 30,
               what=f"leaders for every partition of {topic}")
    return {p: leader for p, (_, leader) in metadata(bootstrap, topic).items()}


def producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def read_all(bootstrap: str, topic: str, isolation: str, expected: int, settle_s: float = 1.5) -> list[bytes]:
    """Every record of ``topic`` a consumer with ``isolation`` reads (assigned all
    partitions from the start): at least ``expected``, then ``settle_s`` more without any."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            got = [m for m in c.consume(100, 0.3) if not m.error()]
            out.extend(m.value() for m in got)
            if len(out) >= expected:
                if got:
                    quiet_until = time.monotonic() + settle_s
                elif quiet_until is None:
                    quiet_until = time.monotonic() + settle_s
                elif time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return out


def send_to_every_partition(p: Producer, topic: str, tag: str, per_partition: int) -> list[bytes]:
    values = [f"{tag}-{part}-{i}".encode() for part in range(PARTITIONS) for i in range(per_partition)]
    for v in values:
        p.produce(topic, v, partition=int(v.decode().split("-")[-2]))
    p.flush(30)
    return values


def test_commit_and_abort_with_partitions_led_by_every_broker(cluster):
    c = cluster(3)
    bootstrap = c.address(c.broker_ids[0])
    leaders = make_topic(bootstrap, "txn-spread")
    assert set(leaders.values()) == set(c.broker_ids)
    p = producer(bootstrap, "spread-1")
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for round_ in range(3):
        p.begin_transaction()
        committed += send_to_every_partition(p, "txn-spread", f"c{round_}", 5)
        p.commit_transaction(30)
        p.begin_transaction()
        aborted += send_to_every_partition(p, "txn-spread", f"a{round_}", 5)
        p.abort_transaction(30)
    assert sorted(read_all(bootstrap, "txn-spread", "read_committed", len(committed))) == sorted(committed)
    assert sorted(read_all(bootstrap, "txn-spread", "read_uncommitted", len(committed) + len(aborted))) == \
        sorted(committed + aborted)


def txn_coordinators(address: str, ids: list[str]) -> dict[str, int]:
    """{transactional id: coordinator node id} by FindCoordinator v4 (-1 on error)."""
    async def ask() -> dict[str, int]:
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            resp = await conn.request(10, 4, {"key_type": 1, "coordinator_keys": ids})
        finally:
            await conn.close()
        return {x.key: x.node_id if x.error_code == 0 else -1 for x in resp.coordinators}
    return asyncio.run(ask())


def committed_now(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets as they are now (not waiting for stable offsets)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted"})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                               timeout=20)}
    finally:
        c.close()


def test_consume_transform_produce_with_group_and_txn_coordinators_on_different_brokers(cluster):
    c = cluster(3)
    bootstrap = c.address(c.broker_ids[0])
    make_topic(bootstrap, "ctp-in")
    make_topic(bootstrap, "ctp-out")
    plain = Producer({"bootstrap.servers": bootstrap})
    inputs = [f"in-{i}".encode() for i in range(30)]
    for i, v in enumerate(inputs):
        plain.produce("ctp-in", v, partition=i % PARTITIONS)
    plain.flush(30)
    producer(bootstrap, "warm-up")  # creates __transaction_state
    ids = [f"ctp-{i}" for i in range(20)]
    wait_until(lambda: -1 not in txn_coordinators(bootstrap, ids).values(), 30, what="transaction coordinators")
    txn_nodes = txn_coordinators(bootstrap, ids)
    groups = coordinators(bootstrap, [f"ctp-group-{i}" for i in range(20)])
    group, g_node = next((g, n) for g, n in groups.items() if n != -1)
    txn_id = next(t for t, n in txn_nodes.items() if n != g_node)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    p = producer(bootstrap, txn_id)
    try:
        consumer.subscribe(["ctp-in"])
        seen: list[Any] = []
        deadline = time.monotonic() + 60
        while len(seen) < len(inputs) and time.monotonic() < deadline:
            seen += [m for m in consumer.consume(100, 0.5) if not m.error()]
        assert sorted(m.value() for m in seen) == sorted(inputs)
        p.begin_transaction()
        for m in seen:
            p.produce("ctp-out", b"out-" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                                      30)
        p.flush(30)
        assert all(o < 0 for o in committed_now(bootstrap, "ctp-in", group).values())  # pending until commit
        p.commit_transaction(30)
    finally:
        consumer.close()
    assert committed_now(bootstrap, "ctp-in", group) == dict.fromkeys(range(PARTITIONS), 10)
    assert sorted(read_all(bootstrap, "ctp-out", "read_committed", len(inputs))) == sorted(b"out-" + v for v in inputs)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_partition_leader_killed_mid_transaction_gets_its_marker_after_restart(cluster, commit):
    c = cluster(3)
    bootstrap = c.address(c.broker_ids[0])
    leaders = make_topic(bootstrap, "txn-kill")
    producer(bootstrap, "warm-up")
    ids = [f"kill-{i}" for i in range(20)]
    wait_until(lambda: -1 not in txn_coordinators(bootstrap, ids).values(), 30, what="transaction coordinators")
    txn_nodes = txn_coordinators(bootstrap, ids)
    txn_id, coord = next((t, n) for t, n in txn_nodes.items() if n != c.broker_ids[0])
    victim = next(n for n in c.broker_ids if n not in (coord, c.broker_ids[0]))
    assert victim in leaders.values()
    p = producer(bootstrap, txn_id)
    p.begin_transaction()
    values = send_to_every_partition(p, "txn-kill", "k", 10)
    c.kill(victim)
    # decided; the markers to the dead leader are retried
    p.commit_transaction(60) if commit else p.abort_transaction(60)
    dead = {part for part, leader in leaders.items() if leader == victim}
    early = read_all(bootstrap, "txn-kill", "read_committed", 0, settle_s=1.0)  # the live partitions' markers
    assert all(int(v.decode().split("-")[-2]) not in dead for v in early)
    assert bool(early) == commit
    c.restart(victim)
    visible = values if commit else []
    assert sorted(read_all(bootstrap, "txn-kill", "read_committed", len(visible))) == sorted(visible)
    p.begin_transaction()  # the next transaction works: the first completed
    more = send_to_every_partition(p, "txn-kill", "m", 2)
    p.commit_transaction(30)
    # every partition's LSO passed the first transaction: its marker is in the restarted leader's log too
    assert sorted(read_all(bootstrap, "txn-kill", "read_committed", len(visible) + len(more))) == \
        sorted(visible + more)
    assert sorted(read_all(bootstrap, "txn-kill", "read_uncommitted", len(values) + len(more))) == \
        sorted(values + more)


def test_write_txn_markers_to_a_broker_not_leading_the_partition_is_not_leader(cluster):
    c = cluster(3)
    bootstrap = c.address(c.broker_ids[0])
    leaders = make_topic(bootstrap, "txn-markers")
    part = next(p for p, leader in leaders.items() if leader != c.broker_ids[0])
    led_here = next(p for p, leader in leaders.items() if leader == c.broker_ids[0])

    async def send() -> dict[int, int]:
        host, port = bootstrap.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            resp = await conn.request(27, 1, {"markers": [{
                "producer_id": 4242, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                "topics": [{"name": "txn-markers", "partition_indexes": [part, led_here]}]}]})
        finally:
            await conn.close()
        return {int(r.partition_index): int(r.error_code) for r in resp.markers[0].topics[0].partitions}
    # another broker's partition is refused (the coordinator then asks the leader); this one's is written
    assert asyncio.run(send()) == {part: ErrorCode.not_leader_or_follower, led_here: ErrorCode.none}


def leaders_of(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: leader} of an internal topic, once it exists with a leader everywhere."""
    wait_until(lambda: (m := metadata(bootstrap, topic)) and all(err == 0 and leader >= 0
                                                                 for err, leader in m.values()),
               30, what=f"leaders for every partition of {topic}")
    return {p: leader for p, (_, leader) in metadata(bootstrap, topic).items()}


def request_lines(c: Any, node: int, api: str) -> list[str]:
    """The request-log lines (``hightide.request`` at DEBUG) of ``api`` in node's output."""
    return [line for line in c.node(node).output().splitlines() if f" {api} v" in line and "errors=" in line]


def test_the_first_txn_offset_commit_waits_for_the_other_brokers_verification(cluster):
    """Issue 26 item 6: with the group's coordinator and the transaction's coordinator on
    different brokers, the group coordinator verifies the transaction with the other
    broker (KIP-890) before writing the offsets; the TxnOffsetCommit is held until then
    (Kafka), not answered COORDINATOR_NOT_AVAILABLE while the question runs (kafkajs does
    not retry that code; librdkafka retries it after 500 ms). Placements are computed from
    the partition hash of the ids and the leaders of the internal topics, one per broker
    as group coordinator; the request log of each group coordinator shows every
    TxnOffsetCommit answered without an error. The transactional Produces too: a
    partition of ``eos-out`` led by a broker other than the transaction's coordinator is
    held until that coordinator verifies it, then appended (Kafka), not answered
    NOT_ENOUGH_REPLICAS while the question runs."""
    from hightide.group.records import OFFSETS_TOPIC
    from hightide.group.records import partition_for as group_partition
    from hightide.txn.records import STATE_TOPIC
    from hightide.txn.records import partition_for as txn_partition

    c = cluster(3, log_level="hightide.request=debug")
    bootstrap = c.address(c.broker_ids[0])
    make_topic(bootstrap, "eos-in")
    out_leaders = make_topic(bootstrap, "eos-out")
    assert len(set(out_leaders.values())) > 1  # some partition is led away from each transaction coordinator
    plain = Producer({"bootstrap.servers": bootstrap})
    inputs = [f"in-{i}".encode() for i in range(3 * PARTITIONS)]
    for i, v in enumerate(inputs):
        plain.produce("eos-in", v, partition=i % PARTITIONS)
    plain.flush(30)
    producer(bootstrap, "warm-up")  # creates __transaction_state
    coordinators(bootstrap, ["warm-up"])  # creates __consumer_offsets
    group_leaders, txn_leaders = leaders_of(bootstrap, OFFSETS_TOPIC), leaders_of(bootstrap, STATE_TOPIC)
    candidates = [f"eos-{i}" for i in range(200)]
    pairings: list[tuple[str, int, str, int]] = []  # (group, its coordinator, transactional id, its coordinator)
    for g_node in c.broker_ids:
        group = next(g for g in candidates if group_leaders[group_partition(g, len(group_leaders))] == g_node)
        txn_id = next(t for t in candidates if txn_leaders[txn_partition(t, len(txn_leaders))] not in (g_node, -1)
                      and t not in {p[2] for p in pairings})
        pairings.append((group, g_node, txn_id, txn_leaders[txn_partition(txn_id, len(txn_leaders))]))
    # the computed placement is the one the brokers name
    assert coordinators(bootstrap, [g for g, _, _, _ in pairings]) == {g: n for g, n, _, _ in pairings}
    assert txn_coordinators(bootstrap, [t for _, _, t, _ in pairings]) == {t: n for _, _, t, n in pairings}

    for group, g_node, txn_id, t_node in pairings:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        p = producer(bootstrap, txn_id, **{"client.id": f"txp-{txn_id}"})
        try:
            consumer.subscribe(["eos-in"])
            seen: list[Any] = []
            deadline = time.monotonic() + 60
            while len(seen) < len(inputs) and time.monotonic() < deadline:
                seen += [m for m in consumer.consume(100, 0.5) if not m.error()]
            assert sorted(m.value() for m in seen) == sorted(inputs)
            p.begin_transaction()
            for m in seen:
                p.produce("eos-out", f"{group}-".encode() + m.value(), partition=m.partition())
            p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                          consumer.consumer_group_metadata(), 30)
            p.commit_transaction(30)
        finally:
            consumer.close()
        assert committed_now(bootstrap, "eos-in", group) == dict.fromkeys(range(PARTITIONS), len(inputs) // PARTITIONS)
        lines = request_lines(c, g_node, "TxnOffsetCommit")
        assert lines, f"no TxnOffsetCommit in broker {g_node}'s request log"
        assert all("errors=NONE" in line for line in lines), \
            f"group {group} at broker {g_node}, transaction {txn_id} at broker {t_node}: {lines}"
    produces = {n: [line for line in request_lines(c, n, "Produce") if "client_id=txp-" in line]
                for n in set(out_leaders.values())}
    assert all(produces.values()), f"a leader of eos-out without transactional Produce in its request log: {produces}"
    failed = [line for lines in produces.values() for line in lines if "errors=NONE" not in line]
    assert not failed, "\n".join(failed)
    expected = sorted(f"{g}-".encode() + v for g, _, _, _ in pairings for v in inputs)
    assert sorted(read_all(bootstrap, "eos-out", "read_committed", len(expected))) == expected
