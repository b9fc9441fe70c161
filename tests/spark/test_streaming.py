"""Streaming reads: maxOffsetsPerTrigger, exactly-once across a restart from the
checkpoint, new partitions picked up, progress committed as group offsets (lag)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hightide.cli import main as cli
from hightide.client import TopicPartition

from ..waiting import wait_until
from .conftest import create_topic, produce

pytestmark = pytest.mark.integration


def _describe(bootstrap: str, group: str) -> dict[tuple[str, int], dict]:
    """``hightide groups describe GROUP -o json``, per partition."""
    res = CliRunner().invoke(cli, ["groups", "describe", group, "-b", bootstrap, "-o", "json"])
    assert res.exit_code == 0, res.output
    return {(r["topic"], r["partition"]): r for r in json.loads(res.output)}


def _run(spark, bootstrap, topic, out, checkpoint, group):
    q = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 250)
         .option("groupId", group).load()
         .selectExpr("partition", "offset", "value")
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .queryName("ingest").trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None, q.exception()
    return q, [p for p in q.recentProgress if p.numInputRows > 0]


def test_stream_exactly_once_across_restart_and_group_lag(spark, bootstrap, topic_name, tmp_path):
    create_topic(bootstrap, topic_name, 3)
    group = f"g-{topic_name}"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    acked = produce(bootstrap, topic_name, [(None, b"first-%d" % i, [], i % 3) for i in range(900)])

    q, batches = _run(spark, bootstrap, topic_name, out, ckpt, group)
    assert len(batches) >= 4  # 900 records at most ~250 per trigger
    assert all(p.numInputRows <= 250 + 3 for p in batches)  # + one per partition: Spark's rounding
    assert sum(p.numInputRows for p in batches) == 900

    # the listener commits each batch's end offsets: caught up -> lag 0 everywhere
    def caught_up():
        d = _describe(bootstrap, group)
        return d if len(d) == 3 and all(r["lag"] == 0 for r in d.values()) else None
    rows = wait_until(caught_up, timeout=30, interval=0.2, what="the group committed at lag 0 on 3 partitions")
    assert {k: r["current_offset"] for k, r in rows.items()} == {(topic_name, p): 300 for p in range(3)}
    from hightide.spark.kafkaio import KafkaIO
    with KafkaIO(bootstrap) as io:
        meta = json.loads(io.committed(group)[TopicPartition(topic_name, 0)][1])
    assert meta["query"] == str(q.id) and meta["name"] == "ingest"
    assert meta["batch"] == batches[-1].batchId and meta["run"] == str(q.runId)

    # while stopped: more records, and a partition added -> the group shows the lag
    acked += produce(bootstrap, topic_name, [(None, b"second-%d" % i, [], i % 3) for i in range(150)])
    with KafkaIO(bootstrap) as io:
        io.run(io.admin.create_partitions({topic_name: 4}))
    acked += produce(bootstrap, topic_name, [(None, b"new-%d" % i, [], 3) for i in range(50)])
    lag = {k: r["lag"] for k, r in _describe(bootstrap, group).items()}
    assert lag == {(topic_name, p): 50 for p in range(3)}

    q2, batches2 = _run(spark, bootstrap, topic_name, out, ckpt, group)
    assert q2.id == q.id  # same query, restarted from its checkpoint
    assert sum(p.numInputRows for p in batches2) == 200
    got = sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect())
    assert got == sorted((a[0], a[1], a[3]) for a in acked)  # no gap, no duplicate
    rows = wait_until(lambda: (d := _describe(bootstrap, group)) and len(d) == 4
                      and all(r["lag"] == 0 for r in d.values()) and d,
                      timeout=30, interval=0.2, what="the group committed at lag 0 on 4 partitions")
    assert rows[(topic_name, 3)]["current_offset"] == 50


@pytest.mark.spark_modes("local")
def test_partitions_added_while_running_are_picked_up(spark, bootstrap, topic_name):
    from hightide.spark.kafkaio import KafkaIO
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(None, b"a%d" % i, [], 0) for i in range(10)])
    table = "t_" + topic_name.replace("-", "_")
    q = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic_name).option("startingOffsets", "earliest").load()
         .selectExpr("partition", "offset").writeStream.format("memory").queryName(table)
         .trigger(processingTime="200 milliseconds").start())
    try:
        def rows():
            return sorted(tuple(r) for r in spark.sql(f"select * from {table}").collect())
        wait_until(lambda: len(rows()) == 10, timeout=60, interval=0.2, what="10 rows from partition 0")
        with KafkaIO(bootstrap) as io:
            io.run(io.admin.create_partitions({topic_name: 2}))
        produce(bootstrap, topic_name, [(None, b"b%d" % i, [], 1) for i in range(5)])
        wait_until(lambda: len(rows()) == 15, timeout=60, interval=0.2, what="5 more rows from the new partition 1")
        assert rows() == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]
    finally:
        q.stop()
