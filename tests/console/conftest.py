"""Fixtures of the console tests: one broker (the shared ``server``) with a lagging, a
caught-up, a stopped-and-climbing and a share group, and helpers to compare with the CLI."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from dataclasses import dataclass

import pytest

from hightide.client import AdminClient, NewTopic, TopicPartition

from ..integration.clients import Rec, confluent_produce
from ..integration.test_cli import run
from ..integration.test_share_group_offsets import join_and_leave, seed_oracle
from ..integration.test_share_state import topic_id
from ..rawkafka import RawClient


@dataclass
class Scenario:
    bootstrap: str
    topic: str  # 3 partitions x 10 records
    climbing: str  # 1 partition, a record every 0.2 s while the tests run
    share_topic: str
    lagging: str  # committed 2 of 10 on each partition: lag 8
    caught_up: str  # committed 10 of 10
    stopped: str  # committed 0 on the climbing topic, never moves
    share: str  # share group with the seed's worked example (lag 7 and 2)
    resettable: str  # committed 5 of 10, reset by the tests
    share_lags: dict[int, int]


def commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    async def go() -> None:
        async with AdminClient(bootstrap) as a:
            await a.alter_consumer_group_offsets(group, offsets)
    asyncio.run(go())


def cli_rows(server, group: str) -> dict[tuple[str, int], dict]:
    """``hightide groups describe GROUP -o json`` keyed by (topic, partition)."""
    rows = json.loads(run(server, "groups", "describe", group, "-o", "json").stdout)
    return {(r["topic"], r["partition"]): r for r in rows}


@pytest.fixture(scope="module")
def scenario(server):
    tag = uuid.uuid4().hex[:6]
    sc = Scenario(server.bootstrap, f"orders-{tag}", f"clicks-{tag}", f"jobs-{tag}", f"lagging-{tag}",
                  f"caught-up-{tag}", f"stopped-{tag}", f"share-{tag}", f"resettable-{tag}", {})

    async def topics() -> None:
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(sc.topic, 3, 1), NewTopic(sc.climbing, 1, 1),
                                   NewTopic(sc.share_topic, 2, 1)])
    asyncio.run(topics())
    confluent_produce(server.bootstrap, sc.topic, [Rec(i % 3, None, b"v%d" % i, (), 0) for i in range(30)])
    confluent_produce(server.bootstrap, sc.climbing, [Rec(0, None, b"c", (), 0) for _ in range(5)])
    confluent_produce(server.bootstrap, sc.share_topic, [Rec(0, None, b"s", (), 0) for _ in range(11)]
                      + [Rec(1, None, b"s", (), 0) for _ in range(4)])
    commit(server.bootstrap, sc.lagging, {TopicPartition(sc.topic, p): 2 for p in range(3)})
    commit(server.bootstrap, sc.caught_up, {TopicPartition(sc.topic, p): 10 for p in range(3)})
    commit(server.bootstrap, sc.resettable, {TopicPartition(sc.topic, p): 5 for p in range(3)})
    commit(server.bootstrap, sc.stopped, {TopicPartition(sc.climbing, 0): 0})
    with RawClient(server.bootstrap) as c:
        join_and_leave(c, sc.share, sc.share_topic)
        sc.share_lags = seed_oracle(c, sc.share, topic_id(c, sc.share_topic))
    stop = threading.Event()

    def climb() -> None:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
        while not stop.wait(0.2):
            p.produce(sc.climbing, b"c", partition=0)
            p.poll(0)
        p.flush(10)
    t = threading.Thread(target=climb, name="climbing-producer", daemon=True)
    t.start()
    try:
        yield sc
    finally:
        stop.set()
        t.join(15)
