"""Crash loop with transactions (issue 16): a confluent-kafka transactional producer
commits and aborts transactions over two partitions of a ``hightide serve`` that is
killed with -9 while a transaction is open, round after round. After every restart the
LSO never passes the open transaction; at the end every transaction is wholly visible
to read_committed or not at all (committed: all of it; aborted or in doubt: none), and
read_uncommitted sees every record that was acknowledged."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.waiting import wait_until

from ..rawkafka import RawClient
from .clients import confluent_create_topic

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")

ROUNDS = 3
PER_TXN = 4  # records per transaction, alternating over the two partitions


def _lso_and_hw(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    out = []
    with RawClient(bootstrap) as c:
        for isolation in (1, 0):
            r = c.request(2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                "timestamp": -1}]}]})
            p = r.topics[0].partitions[0]
            assert p.error_code == 0
            out.append(p.offset)
    return out[0], out[1]


def _all_values(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads up to the end of each partition."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()

    def done() -> bool:
        m = c.poll(0.2)
        if m is None:
            return False
        if m.error():
            if m.error().code() == ck.KafkaError._PARTITION_EOF:
                eof.add(m.partition())
                return len(eof) == partitions
            raise RuntimeError(m.error())
        out.append(m.value())
        eof.discard(m.partition())
        return False

    try:
        wait_until(done, 30, what=f"a {isolation} consumer reaching the end of {topic}")
    finally:
        c.close()
    return out


def _txn(p: Any, topic: str, name: str) -> list[bytes]:
    values = [f"{name}-{i}".encode() for i in range(PER_TXN)]
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 2)
    p.flush(10)
    return values


def test_kill_9_mid_transaction_round_after_round(fresh_server, tmp_path) -> None:
    topic = "crash-" + uuid.uuid4().hex[:6]
    data = tmp_path / "data"
    srv = fresh_server(data_dir=data)
    port = srv.port
    confluent_create_topic(srv.bootstrap, topic, 2)
    committed: set[bytes] = set()
    not_committed: set[bytes] = set()
    for round_ in range(ROUNDS):
        p = ck.Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "crash-loop", "linger.ms": 2})
        p.init_transactions(30)  # after a restart: fences and aborts the transaction left open
        committed.update(_txn(p, topic, f"r{round_}-commit"))
        p.commit_transaction(30)
        not_committed.update(_txn(p, topic, f"r{round_}-abort"))
        p.abort_transaction(30)
        committed.update(_txn(p, topic, f"r{round_}-commit2"))
        p.commit_transaction(30)
        lso_before = [_lso_and_hw(srv.bootstrap, topic, part)[0] for part in (0, 1)]
        not_committed.update(_txn(p, topic, f"r{round_}-open"))  # acknowledged, never committed
        for part in (0, 1):
            lso, hw = _lso_and_hw(srv.bootstrap, topic, part)
            assert lso == lso_before[part] < hw  # the open transaction holds the LSO back
        srv.kill9()
        del p  # its broker is gone; a new producer with the same id takes over
        srv = fresh_server(data_dir=data, port=port)
        for part in (0, 1):  # restarted: the LSO still stops at the open transaction
            assert _lso_and_hw(srv.bootstrap, topic, part)[0] == lso_before[part]
    p = ck.Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "crash-loop"})
    p.init_transactions(30)  # aborts the last round's open transaction
    for part in (0, 1):
        lso, hw = _lso_and_hw(srv.bootstrap, topic, part)
        assert lso == hw
    visible = _all_values(srv.bootstrap, topic, "read_committed")
    assert sorted(visible) == sorted(committed)  # every committed transaction wholly, nothing else
    everything = _all_values(srv.bootstrap, topic, "read_uncommitted")
    assert set(everything) == committed | not_committed
    assert len(everything) == len(committed) + len(not_committed)
