"""The client-matrix scenario for one Python Kafka client (issue 29 item 2), run as a
script by any interpreter that has the client (the project's venv, or an old client's
venv under .venv-clients/). Usage: python matrix_py.py CLIENT BOOTSTRAP TOPIC GROUP, CLIENT
one of kafka-python, aiokafka, confluent-kafka. Prints one JSON line: the client's version
and {check: "ok" | "n/a" | error text} for admin, produce, group consume + commit, resume,
committed offsets and transactions. Only the standard library and the client are imported.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

DEADLINE_S = 40


def kafka_python(b: str, topic: str, group: str) -> tuple[str, dict]:
    import kafka
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    out: dict = {}
    admin = KafkaAdminClient(bootstrap_servers=b)
    admin.create_topics([NewTopic(topic, 1, 1)])
    out["admin"] = "ok" if topic in admin.list_topics() else "topic not listed"
    p = KafkaProducer(bootstrap_servers=b)
    for i in range(5):
        p.send(topic, f"a{i}".encode()).get(timeout=20)
    p.flush()
    out["produce"] = "ok"

    def consume(n: int) -> list[str]:
        c = KafkaConsumer(topic, bootstrap_servers=b, group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=False, consumer_timeout_ms=15000)
        got: list[str] = []
        for m in c:
            got.append(m.value.decode())
            if len(got) == n:
                break
        c.commit()
        c.close()
        return got
    got = consume(5)
    out["group consume + commit"] = "ok" if got == [f"a{i}" for i in range(5)] else f"got {got}"
    for v in ("b0", "b1"):
        p.send(topic, v.encode()).get(timeout=20)
    got = consume(2)
    out["resume"] = "ok" if got == ["b0", "b1"] else f"got {got}"
    lister = getattr(admin, "list_consumer_group_offsets", None) or admin.list_group_offsets  # 2.x / 3.x
    offsets = lister(group)
    offsets = offsets.get(group, offsets)  # 3.x: {group: {partition: offset}}
    committed = offsets.get(TopicPartition(topic, 0))
    out["committed offsets"] = "ok" if committed is not None and committed.offset == 7 else f"got {offsets}"
    if hasattr(p, "init_transactions") and tuple(int(x) for x in kafka.__version__.split(".")[:2]) >= (2, 1):
        t = KafkaProducer(bootstrap_servers=b, transactional_id=f"{group}-tx")
        t.init_transactions()
        t.begin_transaction()
        t.send(topic, b"c0")
        t.commit_transaction()
        t.begin_transaction()
        t.send(topic, b"x0")
        t.abort_transaction()
        t.close()
        c = KafkaConsumer(topic, bootstrap_servers=b, auto_offset_reset="earliest", enable_auto_commit=False,
                          isolation_level="read_committed", consumer_timeout_ms=5000)
        seen = [m.value.decode() for m in c]
        c.close()
        out["transactions"] = "ok" if seen[-1:] == ["c0"] and "x0" not in seen else f"read {seen}"
    else:
        out["transactions"] = "n/a"
    p.close()
    admin.close()
    return kafka.__version__, out


async def aiokafka_(b: str, topic: str, group: str) -> tuple[str, dict]:
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    out: dict = {}
    try:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        admin = AIOKafkaAdminClient(bootstrap_servers=b)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1)])
        out["admin"] = "ok" if topic in await admin.list_topics() else "topic not listed"
    except ImportError:  # aiokafka < 0.9 has no admin client: kafka-python's (its dependency) creates it
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic as KNewTopic
        admin = None
        k = KafkaAdminClient(bootstrap_servers=b)
        k.create_topics([KNewTopic(topic, 1, 1)])
        k.close()
        out["admin"] = "n/a"
    p = AIOKafkaProducer(bootstrap_servers=b)
    await p.start()
    for i in range(5):
        await p.send_and_wait(topic, f"a{i}".encode())
    out["produce"] = "ok"

    async def consume(n: int) -> list[str]:
        c = AIOKafkaConsumer(topic, bootstrap_servers=b, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        got: list[str] = []
        try:
            async with asyncio.timeout(20):
                async for m in c:
                    got.append(m.value.decode())
                    if len(got) == n:
                        break
            await c.commit()
            committed = await c.committed(TopicPartition(topic, 0))
        finally:
            await c.stop()
        out["committed offsets"] = "ok" if committed == 7 or n == 5 else f"got {committed}"
        return got
    got = await consume(5)
    out["group consume + commit"] = "ok" if got == [f"a{i}" for i in range(5)] else f"got {got}"
    for v in ("b0", "b1"):
        await p.send_and_wait(topic, v.encode())
    got = await consume(2)
    out["resume"] = "ok" if got == ["b0", "b1"] else f"got {got}"
    await p.stop()
    t = AIOKafkaProducer(bootstrap_servers=b, transactional_id=f"{group}-tx")
    await t.start()
    async with t.transaction():
        await t.send_and_wait(topic, b"c0")
    await t.begin_transaction()
    await t.send_and_wait(topic, b"x0")
    await t.abort_transaction()
    await t.stop()
    c = AIOKafkaConsumer(topic, bootstrap_servers=b, auto_offset_reset="earliest", isolation_level="read_committed")
    await c.start()
    seen: list[str] = []
    try:
        while True:
            batch = await c.getmany(timeout_ms=2000)
            if not batch:
                break
            seen += [m.value.decode() for ms in batch.values() for m in ms]
    finally:
        await c.stop()
    out["transactions"] = "ok" if seen[-1:] == ["c0"] and "x0" not in seen else f"read {seen}"
    if admin is not None:
        await admin.close()
    return aiokafka.__version__, out


def confluent(b: str, topic: str, group: str) -> tuple[str, dict]:
    import confluent_kafka
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    out: dict = {}
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    out["admin"] = "ok" if topic in admin.list_topics(timeout=20).topics else "topic not listed"
    p = Producer({"bootstrap.servers": b})
    for i in range(5):
        p.produce(topic, f"a{i}".encode())
    p.flush(20)
    out["produce"] = "ok"

    def consume(n: int) -> list[str]:
        c = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic])
        got: list[str] = []
        end = time.monotonic() + 20
        while len(got) < n and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value().decode())
        c.commit(asynchronous=False)
        c.close()
        return got
    got = consume(5)
    out["group consume + commit"] = "ok" if got == [f"a{i}" for i in range(5)] else f"got {got}"
    for v in ("b0", "b1"):
        p.produce(topic, v.encode())
    p.flush(20)
    got = consume(2)
    out["resume"] = "ok" if got == ["b0", "b1"] else f"got {got}"
    c = Consumer({"bootstrap.servers": b, "group.id": group})
    committed = c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    c.close()
    out["committed offsets"] = "ok" if committed == 7 else f"got {committed}"
    t = Producer({"bootstrap.servers": b, "transactional.id": f"{group}-tx"})
    t.init_transactions(20)
    t.begin_transaction()
    t.produce(topic, b"c0")
    t.commit_transaction(20)
    t.begin_transaction()
    t.produce(topic, b"x0")
    t.abort_transaction(20)
    c = Consumer({"bootstrap.servers": b, "group.id": f"{group}-rc", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe([topic])
    seen: list[str] = []
    end = time.monotonic() + 20
    while time.monotonic() < end:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                break
            continue
        seen.append(m.value().decode())
    c.close()
    out["transactions"] = "ok" if seen[-1:] == ["c0"] and "x0" not in seen else f"read {seen}"
    return f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})", out


def main() -> None:
    client, b, topic, group = sys.argv[1:5]
    if client == "kafka-python":
        version, out = kafka_python(b, topic, group)
    elif client == "aiokafka":
        version, out = asyncio.run(aiokafka_(b, topic, group))
    else:
        version, out = confluent(b, topic, group)
    print(json.dumps({"version": version, "checks": out}))


if __name__ == "__main__":
    main()
