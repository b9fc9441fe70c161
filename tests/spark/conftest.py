"""One local[2] SparkSession for every Spark test (the JVM starts once), and helpers to
put records into a real ``hightide serve`` (the shared ``server`` fixture)."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest



@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import hightide.spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("hightide-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    hightide.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def bootstrap(server) -> str:
    return server.bootstrap


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from hightide.client import NewTopic
    from hightide.spark.kafkaio import KafkaIO
    with KafkaIO(bootstrap) as io:
        io.run(io.admin.create_topics([NewTopic(topic, partitions, 1)]))


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list, int | None]],
            **conf: Any) -> list[tuple[int, int, bytes | None, bytes | None, tuple, int]]:
    """Produce ``(key, value, headers, partition or None)`` with confluent-kafka; return
    what was acknowledged as ``(partition, offset, key, value, headers, timestamp)``."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})
    acked: list = []
    errors: list = []

    def cb(headers, err, msg):  # noqa: ANN001 - headers as sent (delivery reports lack them)
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                          tuple((k, v) for k, v in (headers or [])), msg.timestamp()[1]))
    for key, value, headers, partition in records:
        kw = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, value, key, headers=headers or None, on_delivery=functools.partial(cb, headers),
                          **kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(30)
    assert not errors, errors
    assert len(acked) == len(records)
    return acked


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {got!r})")
        time.sleep(interval)
