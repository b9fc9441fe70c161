"""Batch reads through ``format("hightide")`` against a real broker."""

from __future__ import annotations

import time

import pytest

from .conftest import create_topic, produce

pytestmark = pytest.mark.integration


def _read(spark, bootstrap, **options):
    r = spark.read.format("hightide").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_equals_what_was_produced(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 3)
    recs = [(None if i % 5 == 0 else b"key-%d" % i, None if i % 17 == 0 else b"value-%d" % i,
             [("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else [], i % 3) for i in range(3000)]
    acked = produce(bootstrap, topic_name, recs[:1500])
    acked += produce(bootstrap, topic_name, recs[1500:], **{"compression.type": "lz4"})
    df = _read(spark, bootstrap, subscribe=topic_name, includeHeaders="true", minPartitions="5")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    got = sorted((r.partition, r.offset, r.key, r.value, tuple((h.key, h.value) for h in r.headers),
                  round(r.timestamp.timestamp() * 1000)) for r in rows)
    assert got == sorted(acked)
    assert {r.topic for r in rows} == {topic_name} and {r.timestampType for r in rows} == {0}
    # without includeHeaders there is no headers column (Spark's Kafka schema)
    assert "headers" not in _read(spark, bootstrap, subscribe=topic_name).columns


@pytest.mark.spark_modes("local")
def test_offset_ranges_and_timestamps(spark, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [(None, b"a%d" % i, [], i % 2) for i in range(40)])
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(bootstrap, topic_name, [(None, b"b%d" % i, [], i % 2) for i in range(40)])

    def offsets(df):
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    df = _read(spark, bootstrap, subscribe=topic_name, startingOffsets=f'{{"{topic_name}":{{"0":5,"1":-2}}}}',
               endingOffsets=f'{{"{topic_name}":{{"0":-1,"1":7}}}}')
    assert offsets(df) == [(0, o) for o in range(5, 40)] + [(1, o) for o in range(0, 7)]
    df = _read(spark, bootstrap, assign=f'{{"{topic_name}":[1]}}', startingTimestamp=str(middle))
    assert offsets(df) == [(1, o) for o in range(20, 40)]
    df = _read(spark, bootstrap, subscribePattern=topic_name.replace("-", ".") + "$",
               startingOffsetsByTimestamp=f'{{"{topic_name}":{{"0":{middle},"1":0}}}}', endingTimestamp=str(middle))
    assert offsets(df) == [(1, o) for o in range(0, 20)]
    with pytest.raises(Exception, match="starting timestamp"):
        _read(spark, bootstrap, subscribe=topic_name, startingTimestamp=str(middle + 3_600_000)).collect()
    df = _read(spark, bootstrap, subscribe=topic_name, startingTimestamp=str(middle + 3_600_000),
               startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0


@pytest.mark.spark_modes("local")
def test_deleted_records_are_data_loss(spark, bootstrap, topic_name):
    from hightide.client import TopicPartition
    from hightide.spark.kafkaio import KafkaIO
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(None, b"%d" % i, [], 0) for i in range(30)])
    with KafkaIO(bootstrap) as io:
        io.run(io.admin.delete_records({TopicPartition(topic_name, 0): 10}))
    spec = f'{{"{topic_name}":{{"0":0}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        _read(spark, bootstrap, subscribe=topic_name, startingOffsets=spec).collect()
    df = _read(spark, bootstrap, subscribe=topic_name, startingOffsets=spec, failOnDataLoss="false")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(10, 30))
