"""The sink's target topics: created by the cluster the way a Kafka producer's writes get
them created (Metadata with auto-creation allowed; the cluster's
``auto.create.topics.enable`` decides), a missing topic otherwise one clear line.

These call the sink's task function directly (no Spark session: it is what a Spark task
runs), so they run once, not once per Spark mode."""

from __future__ import annotations

import pyarrow as pa
import pytest

from hightide.client import TopicPartition
from hightide.spark.kafkaio import KafkaIO
from hightide.spark.options import OptionError, SinkOptions
from hightide.spark.sink import write_task

pytestmark = pytest.mark.integration


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch({"key": pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
                            "value": pa.array([f"v{i}".encode() for i in range(n)], pa.binary())})


def test_the_sink_gets_a_missing_topic_created_as_a_producer_does(server, topic_name):
    opts = SinkOptions.parse({"kafka.bootstrap.servers": server.bootstrap, "topic": topic_name})
    msg = write_task(opts, iter([_batch(5)]), task=0, retry=False)
    assert msg.skipped_rows == 0
    with KafkaIO(server.bootstrap) as io:
        parts = io.partitions([topic_name])[topic_name]
        ends = io.offsets({TopicPartition(topic_name, p): "latest" for p in parts})
    assert parts == [0]  # the broker's num.partitions (1)
    assert sum(ends.values()) == 5


def test_a_missing_topic_without_auto_creation_is_one_clear_line(fresh_server, topic_name):
    srv = fresh_server("--set", "auto.create.topics.enable=false")
    opts = SinkOptions.parse({"kafka.bootstrap.servers": srv.bootstrap, "topic": topic_name})
    with pytest.raises(OptionError) as info:
        write_task(opts, iter([_batch(2)]), task=0, retry=False)
    message = str(info.value)
    assert "\n" not in message
    assert f"topics ['{topic_name}'] do not exist" in message
    assert "auto.create.topics.enable=false" in message and f"hightide topics create {topic_name}" in message
    with KafkaIO(srv.bootstrap) as io:
        assert io.partitions([topic_name]) == {}
