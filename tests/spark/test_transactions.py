"""Transactions in Spark: the source honours ``kafka.isolation.level`` (read_committed
reads up to the LSO and skips aborted records), and the sink's transactional mode (a
Kafka transaction per task, committed by the driver once every task succeeded) never
lets a read_committed reader see records of a failed job or micro-batch."""

from __future__ import annotations

import collections
import json
import uuid

import pytest

from hightide.client import TopicPartition
from hightide.client.transactions import list_transactions
from hightide.spark.kafkaio import KafkaIO

from .conftest import create_topic
from .test_sink import _read

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")


def _txn(bootstrap: str, topic: str, values: list[bytes], commit: bool | None) -> "ck.Producer":
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spk-{uuid.uuid4().hex[:8]}",
                     "linger.ms": 1})
    p.init_transactions(15)
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(15) == 0
    if commit is True:
        p.commit_transaction(15)
    elif commit is False:
        p.abort_transaction(15)
    return p


def _consume_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every value a read_committed confluent-kafka consumer reads to the end."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out, eof = [], set()
    try:
        while len(eof) < partitions:
            m = c.poll(10)
            assert m is not None, "consumer timed out"
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


@pytest.mark.spark_modes("local", "standalone")
def test_source_honours_isolation_level(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 1)
    _txn(bootstrap, topic_name, [b"c0", b"c1", b"c2"], commit=True)
    _txn(bootstrap, topic_name, [b"a0", b"a1"], commit=False)
    _txn(bootstrap, topic_name, [b"c3"], commit=True)
    open_txn = _txn(bootstrap, topic_name, [b"o0"], commit=None)
    try:
        rc = [r.value for r in _read(spark, bootstrap, topic_name, **{"kafka.isolation.level": "read_committed"})
              .select("value").collect()]
        assert rc == [b"c0", b"c1", b"c2", b"c3"]  # aborted skipped, the open one beyond the LSO
        ru = [r.value for r in _read(spark, bootstrap, topic_name).select("value").collect()]
        assert ru == [b"c0", b"c1", b"c2", b"a0", b"a1", b"c3", b"o0"]
    finally:
        open_txn.abort_transaction(15)


@pytest.mark.spark_modes("local")
def test_per_task_transactional_batch_write_is_all_or_nothing(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 3)
    df = spark.range(0, 300, 1, 3).selectExpr("cast(id as string) as key", "concat('v', cast(id as string)) as value")
    df.write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", topic_name) \
        .option("transactional", "per-task").mode("append").save()
    want = collections.Counter(f"v{i}".encode() for i in range(300))
    assert collections.Counter(_consume_committed(bootstrap, topic_name, 3)) == want
    committed = _read(spark, bootstrap, topic_name, **{"kafka.isolation.level": "read_committed"})
    assert collections.Counter(r.value for r in committed.select("value").collect()) == want

    # a job whose last task fails after the others wrote: they are aborted by the driver
    bad = spark.range(0, 300, 1, 3).selectExpr(
        "cast(id as string) as key",
        "case when id = 299 then cast(raise_error('task 2 fails') as string) "
        "else concat('x', cast(id as string)) end as value")
    with pytest.raises(Exception, match="task 2 fails"):
        bad.write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", topic_name) \
            .option("transactional", "per-task").mode("append").save()
    assert collections.Counter(_consume_committed(bootstrap, topic_name, 3)) == want  # no x-record visible
    assert collections.Counter(r.value for r in committed.select("value").collect()) == want
    everything = [r.value for r in _read(spark, bootstrap, topic_name).select("value").collect()]
    # local[2]: task 2 starts once task 0 or 1 finished, so at least one task's records were
    # written (now aborted): the half-written job that read_committed readers did not see
    assert sum(1 for v in everything if v.startswith(b"x")) >= 100


def _pipe(spark, bootstrap, src, dst, ckpt):
    """src -> dst, reading read_committed, writing transactionally; runs until caught up."""
    q = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 60)
         .option("kafka.isolation.level", "read_committed").load()
         .selectExpr("key", "value").coalesce(1)  # transactional=true: one writer per micro-batch
         .writeStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("checkpointLocation", str(ckpt)).option("transactional", "true")
         .trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None, q.exception()
    return q, {p.batchId: p.numInputRows for p in q.recentProgress if p.numInputRows > 0}


@pytest.mark.spark_modes("local")
def test_transactional_streaming_sink_exactly_once(spark, bootstrap, topic_name, tmp_path):
    src, dst = topic_name, topic_name + "-out"
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 2)
    _txn(bootstrap, src, [b"s0-%d" % i for i in range(150)], commit=True)
    _txn(bootstrap, src, [b"dead%d" % i for i in range(20)], commit=False)  # aborted: never copied
    ckpt = tmp_path / "ckpt"
    q, batches = _pipe(spark, bootstrap, src, dst, ckpt)
    last = max(batches)
    assert sum(batches.values()) == 150 and last >= 1
    want = collections.Counter(b"s0-%d" % i for i in range(150))  # the aborted records are not read
    assert collections.Counter(_consume_committed(bootstrap, dst, 2)) == want
    # every task's transaction was committed by the driver (ids <prefix>-<task>)
    with KafkaIO(bootstrap) as io:
        listed = io.run(list_transactions(io.admin))
        mine = [t for t in listed if t.transactional_id.startswith(f"spark-hightide-{q.id}-")]
        assert mine and {t.state for t in mine} == {"CompleteCommit"}
        # a crash between the tasks' commits and the sink's marker: the marker names the
        # batch before; a restart replays the last batch, whose committed records are found
        sink_group = f"spark-hightide-sink-{q.id}"
        marker = io.committed(sink_group)
        (ckpt / "commits" / str(last)).unlink()
        (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
        io.commit(sink_group, {tp: (0, json.dumps({"batch": last - 1, "run": "crashed"})) for tp in marker})
    q2, again = _pipe(spark, bootstrap, src, dst, ckpt)
    assert q2.id == q.id and again == {last: batches[last]}
    assert collections.Counter(_consume_committed(bootstrap, dst, 2)) == want


@pytest.mark.spark_modes("local")
def test_transactional_micro_batch_is_atomic(spark, bootstrap, topic_name, tmp_path):
    """transactional=true: a micro-batch read from 3 input partitions is written by one
    task in one transaction; a read_committed reader sees none of it until the driver's
    commit, then all of it (the LSO stays 0 while the records are already in the log)."""
    src, dst = topic_name, topic_name + "-out"
    create_topic(bootstrap, src, 3)
    create_topic(bootstrap, dst, 1)
    n = 9000
    spark.range(0, n, 1, 3).selectExpr("cast(id as string) as key", "concat('m', cast(id as string)) as value") \
        .write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", src) \
        .mode("append").save()
    q = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").load()
         .selectExpr("key", "value").coalesce(1)
         .writeStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("kafka.batch.records", 15)  # many Produce rounds: the transaction is open a while
         .option("checkpointLocation", str(tmp_path / "ckpt")).option("transactional", "true")
         .trigger(availableNow=True).start())
    tp = TopicPartition(dst, 0)
    seen: list[tuple[int, int]] = []  # (high watermark, last stable offset)
    try:
        with KafkaIO(bootstrap) as io:
            while q.isActive:
                hw = io.run(io.admin.list_offsets({tp: "latest"}))[tp].offset
                lso = io.run(io.admin.list_offsets({tp: "latest"}, isolation_level="read_committed"))[tp].offset
                seen.append((int(hw), int(lso)))
            q.awaitTermination(240)
            assert q.exception() is None, q.exception()
            final = int(io.run(io.admin.list_offsets({tp: "latest"}, isolation_level="read_committed"))[tp].offset)
            mine = [t for t in io.run(list_transactions(io.admin))
                    if t.transactional_id.startswith(f"spark-hightide-{q.id}-")]
    finally:
        q.stop()
    assert final == n + 1  # every record, then the COMMIT marker
    assert {lso for _, lso in seen} <= {0, final}, "read_committed saw part of the micro-batch"
    assert any(hw > 0 and lso == 0 for hw, lso in seen), f"never saw the open transaction: {seen[-5:]}"
    assert [t.state for t in mine] == ["CompleteCommit"]  # one transaction for the micro-batch
    assert collections.Counter(_consume_committed(bootstrap, dst, 1)) == \
        collections.Counter(b"m%d" % i for i in range(n))


@pytest.mark.spark_modes("local")
def test_transactional_true_refuses_several_writers(spark, bootstrap, topic_name):
    """transactional=true with a 3-task write: the driver aborts the tasks' transactions
    and fails the job with the reason (coalesce, or per-task): nothing is visible."""
    create_topic(bootstrap, topic_name, 2)
    df = spark.range(0, 300, 1, 3).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    with pytest.raises(Exception, match=r"ONE transaction from ONE task, but 3 tasks wrote"):
        df.write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", topic_name) \
            .option("transactional", "true").mode("append").save()
    assert _consume_committed(bootstrap, topic_name, 2) == []
    assert len(_read(spark, bootstrap, topic_name).collect()) == 300  # written, aborted


def test_transactional_option_values():
    from hightide.spark.options import OptionError, SinkOptions

    def parse(**kw: str) -> tuple[bool, bool]:
        o = SinkOptions.parse({"kafka.bootstrap.servers": "x:9092", **kw})
        return o.transactional, o.per_task_transactions

    assert parse() == (False, False)
    assert parse(transactional="TRUE") == (True, False)
    assert parse(transactional="per-task") == (True, True)
    assert parse(transactionalIdPrefix="p") == (True, False)
    assert parse(transactionalIdPrefix="p", transactional="false") == (False, False)
    with pytest.raises(OptionError, match="transactional must be true, false or per-task, got 'yes'"):
        parse(transactional="yes")


class _FakeIO:
    """KafkaIO's fetch_range over fixed bytes (what _committed_tags reads)."""

    def __init__(self, records: bytes) -> None:
        self.records = records

    def fetch_range(self, tp, start, end, **kw):
        from hightide.spark.kafkaio import FetchChunk
        yield FetchChunk(self.records, end, 0, start, end)


def test_replay_scan_counts_only_committed_transactions():
    """The replay check of transactional mode: tags in a committed transaction or a plain
    batch count as written; tags of an aborted or still open transaction do not."""
    import numpy as np
    import pyarrow as pa

    from hightide.client import TopicPartition
    from hightide.protocol.records import build_batch
    from hightide.spark.encode import encode_batch, tag_header
    from hightide.spark.sink import SINK_HEADER, _committed_tags

    def tagged(base: int, positions: list[int], pid: int, txn: bool) -> bytes:
        n = len(positions)
        b = bytearray(encode_batch(pa.array([None] * n, pa.binary()), pa.array([b"v"] * n, pa.binary()),
                                   timestamp=1, producer_id=pid, producer_epoch=0, base_sequence=0,
                                   header_count=np.ones(n, np.int64),
                                   headers=tag_header(SINK_HEADER, "h/3/0/", np.array(positions)),
                                   transactional=txn))
        b[0:8] = base.to_bytes(8, "big")  # the broker assigns the base offset
        return bytes(b)

    def marker(base: int, pid: int, commit: bool) -> bytes:
        key = b"\x00\x00" + (b"\x00\x01" if commit else b"\x00\x00")
        return build_batch([(key, b"\x00\x00\x00\x00\x00\x00", [], 1)], base_offset=base, producer_id=pid,
                           producer_epoch=0, is_transactional=True, is_control=True)

    log = (tagged(0, [0, 1], 5, True) + marker(2, 5, commit=True)      # committed: 0, 1
           + tagged(3, [2, 3], 6, True) + marker(5, 6, commit=False)   # aborted: 2, 3
           + tagged(6, [4], -1, False)                                 # plain batch: 4
           + tagged(7, [5], 7, True))                                  # still open: 5
    assert _committed_tags(_FakeIO(log), TopicPartition("t", 0), 0, 8, b"h/3/0/") == {0, 1, 4}
