"""The ``hightide`` sink: batch and streaming writes, round trip through the source, and
a replayed micro-batch writing nothing twice (commit marker and record tags)."""

from __future__ import annotations

import collections
import json

import pytest

from hightide.client import TopicPartition
from hightide.spark.kafkaio import KafkaIO
from hightide.spark.sink import SINK_HEADER

from .conftest import create_topic, produce

pytestmark = pytest.mark.integration


def _read(spark, bootstrap, topic, **options):
    r = (spark.read.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("includeHeaders", "true"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_sink_round_trips_through_the_source(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 3)
    create_topic(bootstrap, topic_name + "-b", 2)
    df = spark.range(500).selectExpr(
        "case when id % 4 = 0 then null else cast(id as string) end as key",
        "concat('value-', cast(id as string)) as value",
        "array(named_struct('key', 'id', 'value', cast(cast(id as string) as binary))) as headers",
        "case when id % 10 = 0 then 2 else null end as partition")
    df.write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", topic_name) \
        .mode("append").save()
    rows = _read(spark, bootstrap, topic_name).collect()
    assert len(rows) == 500
    from hightide.spark.sink import default_partition
    for r in rows:
        i = int(r.value.decode().split("-")[1])
        assert r.key == (None if i % 4 == 0 else str(i).encode())
        assert [(h.key, h.value) for h in r.headers] == [("id", str(i).encode())]
        if i % 10 == 0:
            assert r.partition == 2
        elif r.key is not None:
            assert r.partition == default_partition(r.key, 3)  # Kafka's murmur2 partitioner
    # offsets per partition are dense: every record written once
    per = collections.defaultdict(list)
    for r in rows:
        per[r.partition].append(r.offset)
    assert all(sorted(v) == list(range(len(v))) for v in per.values())
    # a topic column routes rows when no topic option is given
    spark.range(40).selectExpr(f"case when id % 2 = 0 then '{topic_name}' else '{topic_name}-b' end as topic",
                               "cast(cast(id as string) as binary) as value") \
        .write.format("hightide").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    assert _read(spark, bootstrap, topic_name + "-b").count() == 20
    assert _read(spark, bootstrap, topic_name).count() == 520
    with pytest.raises(Exception, match="overwrite"):
        df.write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", topic_name) \
            .mode("overwrite").save()


def _pipe(spark, bootstrap, src, dst, ckpt, **sink_options):
    w = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 200).load()
         .selectExpr("key", "value")
         .writeStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("checkpointLocation", str(ckpt)))
    for k, v in sink_options.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start()
    q.awaitTermination(240)
    assert q.exception() is None, q.exception()
    return q, {p.batchId: p.numInputRows for p in q.recentProgress if p.numInputRows > 0}


@pytest.mark.spark_modes("local")
def test_replayed_batch_writes_nothing_twice(spark, bootstrap, topic_name, tmp_path):
    src, dst = topic_name, topic_name + "-out"
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 3)
    produce(bootstrap, src, [(b"k%d" % i, b"v%d" % i, [], i % 2) for i in range(600)])
    expected = collections.Counter(b"v%d" % i for i in range(600))
    ckpt = tmp_path / "ckpt"

    def written() -> collections.Counter:
        return collections.Counter(r.value for r in _read(spark, bootstrap, dst).select("value").collect())

    q, batches = _pipe(spark, bootstrap, src, dst, ckpt)
    last = max(batches)
    assert sum(batches.values()) == 600 and last >= 2
    assert written() == expected
    sink_group = f"spark-hightide-sink-{q.id}"
    with KafkaIO(bootstrap) as io:
        marker = io.committed(sink_group)
    assert {json.loads(m)["batch"] for _, m in marker.values()} == {last}
    # every record carries its tag: <sink>/<batch>/<task>/<position>
    tags = [dict(r.headers)[SINK_HEADER].decode() for r in _read(spark, bootstrap, dst).select("headers").collect()]
    assert {int(t.split("/")[1]) for t in tags} == set(batches)

    def replay_last_batch(rewind_marker: bool, **opts):
        """Forget that the last batch completed (as after a crash), restart the query."""
        (ckpt / "commits" / str(last)).unlink()
        (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
        if rewind_marker:  # crash before the sink's commit: the marker names the batch before
            with KafkaIO(bootstrap) as io:
                io.commit(sink_group, {tp: (0, json.dumps({"batch": last - 1, "run": "crashed"}))
                                       for tp in marker})
        q2, again = _pipe(spark, bootstrap, src, dst, ckpt, **opts)
        assert q2.id == q.id and again == {last: batches[last]}  # Spark re-ran exactly that batch
        return q2

    # 1. crash after the sink committed: the marker says the batch is done
    replay_last_batch(rewind_marker=False)
    assert written() == expected
    # 2. crash between the writes and the sink's commit: the tags in the log say so
    replay_last_batch(rewind_marker=True)
    assert written() == expected
    with KafkaIO(bootstrap) as io:
        assert {json.loads(m)["batch"] for _, m in io.committed(sink_group).values()} == {last}
    # control: the same replay without the check duplicates the batch's records
    replay_last_batch(rewind_marker=True, exactlyOnce="false")
    got = written()
    assert sum(got.values()) == 600 + batches[last] and set(got) == set(expected)
    assert TopicPartition(dst, 0) in marker
