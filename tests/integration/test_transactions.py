"""Transactions end to end with a real client (confluent-kafka / librdkafka): the
transaction coordinator (InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, markers) and read_committed consumers."""

from __future__ import annotations

import uuid

import pytest

from tests.waiting import wait_until

from .clients import confluent_create_topic

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")


def _producer(bootstrap: str, txn_id: str, **extra: object) -> "ck.Producer":
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    conf.update(extra)
    p = ck.Producer(conf)
    p.init_transactions(15)
    return p


def _consume(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int = 1,
             timeout: float = 20.0) -> list[bytes]:
    """Every value of ``topic`` a consumer with ``isolation`` gets until it reached the end
    (``expect`` values, or the end offsets it can read), in order per partition."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "enable.partition.eof": True})
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
                return len(eof) == partitions and len(out) >= expect
            raise RuntimeError(m.error())
        out.append(m.value())
        eof.discard(m.partition())
        return False

    try:
        wait_until(done, timeout, what=f"{isolation} consumer reads {expect} records of {topic}")
    finally:
        c.close()
    return out


def test_commit_and_abort_visible_only_as_committed(server, topic_name):
    """A committed transaction is visible to read_committed; an aborted one only to
    read_uncommitted."""
    confluent_create_topic(server.bootstrap, topic_name, 2)
    p = _producer(server.bootstrap, f"tx-{topic_name}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic_name, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, value=f"a{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic_name, value=b"last", partition=0)
    p.commit_transaction(15)

    committed = _consume(server.bootstrap, topic_name, "read_committed", 11, partitions=2)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    everything = _consume(server.bootstrap, topic_name, "read_uncommitted", 16, partitions=2)
    assert sorted(everything) == sorted([f"c{i}".encode() for i in range(10)] +
                                        [f"a{i}".encode() for i in range(5)] + [b"last"])


def test_zombie_is_fenced(server, topic_name):
    """A second producer with the same transactional.id fences the first: the old one's
    commit fails as fenced, its open transaction is aborted, the new one commits."""
    confluent_create_topic(server.bootstrap, topic_name, 1)
    txn_id = f"zombie-{topic_name}"
    old = _producer(server.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic_name, value=b"zombie")
    old.flush(10)
    new = _producer(server.bootstrap, txn_id)  # aborts the old transaction, bumps the epoch
    new.begin_transaction()
    new.produce(topic_name, value=b"fresh")
    new.commit_transaction(15)
    with pytest.raises(ck.KafkaException) as info:
        old.produce(topic_name, value=b"late")
        old.commit_transaction(15)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    assert _consume(server.bootstrap, topic_name, "read_committed", 1) == [b"fresh"]
