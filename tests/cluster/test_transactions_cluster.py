"""Transactions across brokers (issue 16) with real processes and confluent-kafka: a
topic whose partitions are led by all three brokers; the transaction coordinator sends
markers to other leaders with WriteTxnMarkers, and a broker verifies a transactional
produce with a coordinator on another broker (KIP-890, AddPartitionsToTxn verify_only).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

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
