"""Lag, time lag, anomalies and status against a real `hightide serve` with a real
consumer (confluent-kafka); numbers checked against what the test produced and committed."""

from __future__ import annotations

import asyncio
import time

import pytest

from hightide.client import AdminClient, NewTopic, TopicPartition
from hightide.lag import Anomaly, Status, StatusRules
from hightide.monitoring.monitor import LagMonitor

from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration


def produce(bootstrap, topic, counts: dict[int, int], ts: int | None = None) -> None:
    recs = [Rec(p, None, b"v%d" % i, (), ts or int(time.time() * 1000)) for p, n in counts.items() for i in range(n)]
    confluent_produce(bootstrap, topic, recs)


def consume(c, n: int, timeout: float = 15.0) -> int:
    got, deadline = 0, time.monotonic() + timeout
    while got < n and time.monotonic() < deadline:
        for m in c.consume(n - got, 0.5):
            assert not m.error(), m.error()
            got += 1
    return got


def test_lag_rises_while_paused_time_lag_and_stall_then_back_to_ok(server, topic_name):
    from confluent_kafka import Consumer
    group = f"g-{topic_name}"

    async def setup():
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(topic_name, 2, 1)])
    asyncio.run(setup())
    produce(server.bootstrap, topic_name, {0: 10, 1: 10})
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 30000})
    c.subscribe([topic_name])
    try:
        assert consume(c, 20) == 20
        c.commit(asynchronous=False)
        produced = {0: 10, 1: 10}

        async def watch_pause():
            rules = StatusRules(window_ms=1_500, min_samples=3, stop_after_ms=60_000)
            async with AdminClient(server.bootstrap) as a:
                mon = LagMonitor(a, rules=rules)
                first = await mon.snapshot([group])
                assert [p.lag for p in first.groups[group].partitions] == [0, 0]
                assert first.groups[group].status.status == Status.OK
                assert len(first.groups[group].members) == 1
                # the consumer pauses; records arrive with a known timestamp
                t_pause = int(time.time() * 1000)
                await asyncio.to_thread(produce, server.bootstrap, topic_name, {0: 7, 1: 3}, t_pause)
                produced[0] += 7
                produced[1] += 3
                statuses, snaps = [], []
                for _ in range(8):
                    await asyncio.sleep(0.3)  # fixed: the status is judged over a window of samples in time
                    s = await mon.snapshot([group])
                    snaps.append(s)
                    statuses.append(s.groups[group].status.status)
                return t_pause, statuses, snaps, mon
        t_pause, statuses, snaps, _ = asyncio.run(watch_pause())
        last = snaps[-1].groups[group]
        # oracle: produced - committed (the consumer committed 10 per partition)
        assert {p.partition: p.lag for p in last.partitions} == {0: produced[0] - 10, 1: produced[1] - 10}
        assert {p.partition: p.high_watermark for p in last.partitions} == produced
        assert all(p.source == "extension" for p in last.partitions)
        # time lag: the oldest unread record has waited since t_pause
        for p in last.partitions:
            truth = snaps[-1].time_ms - t_pause
            assert p.time_lag.method == "record_timestamp" and abs(p.time_lag.ms - truth) <= 1000
            interp = next(t for t in p.time_lags if t.method == "interpolation")
            assert interp.ms is not None and abs(interp.ms - truth) <= 1000
        assert Status.STALL in statuses, statuses
        assert last.status.status == Status.STALL

        # the consumer resumes and catches up
        assert consume(c, 10) == 10
        c.commit(asynchronous=False)

        async def after():
            async with AdminClient(server.bootstrap) as a:
                mon = LagMonitor(a, rules=StatusRules(window_ms=1_500, min_samples=3))
                return await mon.snapshot([group])
        s = asyncio.run(after())
        rep = s.groups[group]
        assert [p.lag for p in rep.partitions] == [0, 0]
        assert rep.status.status == Status.OK
        assert all(p.time_lag.ms == 0 for p in rep.partitions)
    finally:
        c.close()


def test_retention_past_committed_offset_is_reported(server, topic_name):
    group = f"g-{topic_name}"

    async def go():
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(topic_name, 1, 1)])
            await asyncio.to_thread(produce, server.bootstrap, topic_name, {0: 10})
            tp = TopicPartition(topic_name, 0)
            await a.alter_consumer_group_offsets(group, {tp: 2})
            assert (await a.delete_records({tp: 6}))[tp] == 6
            for ext in (True, False):
                async with AdminClient(server.bootstrap, use_extensions=ext) as b:
                    snap = await LagMonitor(b).snapshot([group])
                    p = snap.groups[group].partitions[0]
                    assert (p.offsets.committed, p.offsets.log_start_offset, p.lag, p.offsets.lost) == (2, 6, 8, 4)
                    assert p.offsets.anomalies == (Anomaly.COMMITTED_BEFORE_LOG_START,)
                    assert p.status.status == Status.ERR
                    assert p.source == ("extension" if ext else "list_offsets")
            # committed past the end is reported, not clamped
            await a.alter_consumer_group_offsets(group, {tp: 15})
            p = (await LagMonitor(a).snapshot([group])).groups[group].partitions[0]
            assert p.lag == -5 and Anomaly.COMMITTED_PAST_END in p.offsets.anomalies
    asyncio.run(go())


def test_many_groups_one_call_vs_two_calls(server, topic_name):
    groups = [f"g{i}-{topic_name}" for i in range(20)]

    async def go():
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(topic_name, 4, 1)])
            await asyncio.to_thread(produce, server.bootstrap, topic_name, {p: 5 for p in range(4)})
            for i, g in enumerate(groups):
                await a.alter_consumer_group_offsets(g, {TopicPartition(topic_name, p): (i + p) % 6 for p in range(4)})
        results = {}
        for ext in (True, False):
            async with AdminClient(server.bootstrap, use_extensions=ext) as a:
                results[ext] = await a.lags(groups)
        for i, g in enumerate(groups):
            for ext in (True, False):
                assert {tp.partition: pl.lag for tp, pl in results[ext][g].items()} == \
                    {p: 5 - (i + p) % 6 for p in range(4)}
    asyncio.run(go())
