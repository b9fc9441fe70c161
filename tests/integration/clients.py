"""Uniform produce / consume / admin over the real client libraries under test.

Every function takes a bootstrap "host:port" and works with plain tuples, so tests can
compare what each library saw against what was produced.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple


class Rec(NamedTuple):
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


class Got(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


LIBRARIES = ("confluent", "kafka-python", "aiokafka")


# -- confluent-kafka (librdkafka) -------------------------------------------------------
def confluent_create_topic(bootstrap: str, topic: str, partitions: int, configs: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic]
    fut.result(10)


def confluent_produce(bootstrap: str, topic: str, records: list[Rec], compression: str = "none",
                      extra: dict | None = None) -> list[tuple[int, int]]:
    """Produce with acks=all; returns (partition, offset) per record in order."""
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 20,
            "acks": "all", **(extra or {})}
    p = Producer(conf)
    out: list = [None] * len(records)
    errors = []

    def cb(i):
        def done(err, msg):
            if err:
                errors.append(err)
            else:
                out[i] = (msg.partition(), msg.offset())
        return done

    for i, r in enumerate(records):
        p.produce(topic, value=r.value, key=r.key, partition=r.partition, timestamp=r.timestamp,
                  headers=list(r.headers) or None, on_delivery=cb(i))
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return out


def confluent_consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30) -> list[Got]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error():
                    raise AssertionError(m.error())
                got.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                               tuple((k, v) for k, v in (m.headers() or [])), m.timestamp()[1]))
    finally:
        c.close()
    return got


# -- kafka-python -------------------------------------------------------------------------
def kafka_python_create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def kafka_python_produce(bootstrap: str, topic: str, records: list[Rec], compression: str = "none") -> list[tuple[int, int]]:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                      compression_type=None if compression == "none" else compression)
    futures = [p.send(topic, value=r.value, key=r.key, partition=r.partition, timestamp_ms=r.timestamp,
                      headers=list(r.headers)) for r in records]
    p.flush(30)
    out = []
    for f in futures:
        md = f.get(10)
        out.append((md.partition, md.offset))
    p.close()
    return out


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for tp, msgs in c.poll(500).items():
                for m in msgs:
                    got.append(Got(m.partition, m.offset, m.key, m.value,
                                   tuple((k, v) for k, v in (m.headers or [])), m.timestamp))
    finally:
        c.close()
    return got


# -- aiokafka ---------------------------------------------------------------------------
def aiokafka_create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    async def run():
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            await admin.close()
    asyncio.run(run())


def aiokafka_produce(bootstrap: str, topic: str, records: list[Rec], compression: str = "none") -> list[tuple[int, int]]:
    async def run():
        from aiokafka import AIOKafkaProducer
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                             compression_type=None if compression == "none" else compression)
        await p.start()
        try:
            futs = [await p.send(topic, value=r.value, key=r.key, partition=r.partition,
                                 timestamp_ms=r.timestamp, headers=list(r.headers)) for r in records]
            mds = [await f for f in futs]
            return [(md.partition, md.offset) for md in mds]
        finally:
            await p.stop()
    return asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30) -> list[Got]:
    async def run():
        from aiokafka import AIOKafkaConsumer, TopicPartition
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        try:
            while len(got) < expected and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500)
                for tp, msgs in batches.items():
                    for m in msgs:
                        got.append(Got(m.partition, m.offset, m.key, m.value,
                                       tuple((k, v) for k, v in (m.headers or [])), m.timestamp))
        finally:
            await c.stop()
        return got
    return asyncio.run(run())


CREATE = {"confluent": confluent_create_topic, "kafka-python": kafka_python_create_topic,
          "aiokafka": aiokafka_create_topic}
PRODUCE = {"confluent": confluent_produce, "kafka-python": kafka_python_produce, "aiokafka": aiokafka_produce}
CONSUME = {"confluent": confluent_consume, "kafka-python": kafka_python_consume, "aiokafka": aiokafka_consume}
