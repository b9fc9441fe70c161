"""Lag stays true across failovers (issue 15, item 3), with real processes.

* The OffsetFetch extension (seed 000) answered by any group coordinator carries the
  partition leader's high watermark — also for partitions the coordinator only follows
  (RF=3) or does not host at all (RF=1 on another broker), where a coordinator used to
  send its own follower HW or nothing.
* Through a kill -9 of a partition's leader while acks=all producers write to it, the
  lag monitor (what ``hightide lag watch -o json`` and the exporter read) never reports
  an end offset below what was acknowledged before the snapshot began, never one that
  went back, never a negative lag; what it cannot read meanwhile it reports as the last
  known end, marked ``stale_end``. After the failover the extension carries the new
  leader's HW.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from hightide.client import AdminClient, TopicPartition
from hightide.monitoring.monitor import LagMonitor

from .harness import ClusterHarness

RF3, RF1, PARTITIONS = "lag-rf3", "lag-rf1", 3
COMMITTED = 1
STALE = "stale_end"  # Anomaly.STALE_END (a str enum)


def create_topics(c: ClusterHarness) -> None:
    admin = KafkaAdmin({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic(RF3, PARTITIONS, 3), NewTopic(RF1, PARTITIONS, 1)]).values():
        f.result(30)

    async def led() -> bool:
        async with c.admin() as a:
            md = await a.metadata([RF3, RF1])
        parts = [p for t in (RF3, RF1) if t in md.topics for p in md.topics[t].partitions.values()]
        return len(parts) == 2 * PARTITIONS and all(p.leader >= 0 and len(p.isr) == len(p.replicas) for p in parts)
    c.wait_until(lambda: c.run(led()), 30, what="both topics led, ISR complete")


def produce(c: ClusterHarness, counts: dict[TopicPartition, int]) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[Any] = []
    for tp, n in counts.items():
        for i in range(n):
            p.produce(tp.topic, b"v%d" % i, partition=tp.partition,
                      on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert p.flush(30) == 0 and not failed


async def groups_by_coordinator(a: AdminClient, prefix: str, wanted: set[int]) -> dict[int, str]:
    """One group id per broker in ``wanted``, coordinated by it."""
    out: dict[int, str] = {}
    for i in range(500):
        g = f"{prefix}-{i}"
        coord = await a.find_coordinator(g)
        if coord.node_id in wanted and coord.node_id not in out:
            out[coord.node_id] = g
        if set(out) == wanted:
            return out
    raise AssertionError(f"no group ids coordinated by each of {wanted}: {out}")


async def extension_vs_leaders(a: AdminClient, groups: list[str]) -> list[tuple[str, TopicPartition, Any, Any]]:
    """(group, partition, extension HW, leader's ListOffsets latest) where they differ."""
    tps = [TopicPartition(t, p) for t in (RF3, RF1) for p in range(PARTITIONS)]
    latest = await a.list_offsets({tp: "latest" for tp in tps}, raise_on_error=False)
    earliest = await a.list_offsets({tp: "earliest" for tp in tps}, raise_on_error=False)
    wrong = []
    for g in groups:
        for tp, om in (await a.list_consumer_group_offsets(g)).items():
            want = (getattr(latest.get(tp), "offset", None), getattr(earliest.get(tp), "offset", None))
            if (om.high_watermark, om.log_start_offset) != want or om.last_stable_offset != want[0]:
                wrong.append((g, tp, (om.high_watermark, om.log_start_offset, om.last_stable_offset), want))
    return wrong


def test_offset_fetch_extension_carries_the_leaders_high_watermark_on_every_coordinator(cluster: Any) -> None:
    c = cluster(3)
    create_topics(c)
    counts = {TopicPartition(t, p): 5 + 3 * p + (7 if t == RF1 else 0) for t in (RF3, RF1) for p in range(PARTITIONS)}
    produce(c, counts)

    async def check() -> None:
        async with c.admin() as a:
            md = await a.metadata([RF1])
            groups = await groups_by_coordinator(a, "ext", set(c.broker_ids))
            for g in groups.values():
                await a.alter_consumer_group_offsets(g, {tp: COMMITTED for tp in counts})
            # every coordinator leads one RF1 partition and hosts no replica of the two others
            assert sorted(p.leader for p in md.topics[RF1].partitions.values()) == sorted(c.broker_ids)
            for node, g in groups.items():
                got = await a.list_consumer_group_offsets(g)
                assert {tp: om.high_watermark for tp, om in got.items()} == counts, (node, got)
            assert await extension_vs_leaders(a, list(groups.values())) == []
    c.run(check())


# -- the failover ------------------------------------------------------------------------------
@dataclass
class Acked:
    """Offsets of partition 0 acknowledged (acks=all) with the time the client learnt it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    at: list[tuple[float, int]] = field(default_factory=list)

    def before(self, t: float) -> int:
        """Records of partition 0 the high watermark had passed by time ``t`` (at least)."""
        with self.lock:
            return max((off + 1 for when, off in self.at if when <= t), default=0)

    def count(self) -> int:
        with self.lock:
            return len(self.at)


def producer_loop(bootstrap: str, acked: Acked, stop: threading.Event) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 60000})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            with acked.lock:
                acked.at.append((time.monotonic(), msg.offset()))
    try:
        while not stop.is_set():
            p.produce(RF3, b"x", partition=0, on_delivery=delivered)
            p.poll(0.01)
    finally:
        p.flush(60)


@dataclass
class Seen:
    t_start: float
    group: str
    tp: TopicPartition
    end: int | None
    lag: int | None
    anomalies: tuple[Any, ...]
    source: str


def test_lag_never_goes_back_when_the_leader_is_killed(cluster: Any) -> None:
    c = cluster(3)
    create_topics(c)
    idle = {TopicPartition(RF3, p): 10 + p for p in (1, 2)}
    produce(c, {TopicPartition(RF3, 0): 10, **idle})
    p0 = TopicPartition(RF3, 0)
    acked = Acked()
    stop = threading.Event()
    samples: list[Seen] = []
    durations: list[float] = []

    async def scenario() -> tuple[int, list[str], int]:
        async with c.admin() as a:
            md = await a.metadata([RF3])
            victim = md.topics[RF3].partitions[0].leader
            survivors = set(c.broker_ids) - {victim}
            groups = list((await groups_by_coordinator(a, "fo", survivors)).values())
            for g in groups:
                await a.alter_consumer_group_offsets(g, {TopicPartition(RF3, p): COMMITTED for p in range(PARTITIONS)})
            writer = threading.Thread(target=producer_loop, args=(c.bootstrap, acked, stop), daemon=True)
            writer.start()
            try:
                # a short request timeout, as a scrape has: what cannot be read in time
                # during the failover is reported stale rather than waited for
                async with c.admin(request_timeout_s=1.5) as watcher:
                    mon = LagMonitor(watcher, methods=(), marker_probe_max_lag=0)

                    async def snap() -> None:
                        t0 = time.monotonic()
                        snapshot = await mon.snapshot(groups)
                        durations.append(snapshot.duration_s)
                        for g, report in snapshot.groups.items():
                            assert report.error is None, (g, report.error)
                            for p in report.partitions:
                                samples.append(Seen(t0, g, TopicPartition(p.topic, p.partition), p.offsets.end_offset,
                                                    p.lag, p.offsets.anomalies, p.source))
                    deadline = time.monotonic() + 90
                    while acked.count() < 50:
                        assert time.monotonic() < deadline, "producing before the kill"
                        await snap()
                        await asyncio.sleep(0.2)
                    before_kill = acked.count()
                    c.kill(victim)
                    while True:  # until a new leader took writes for a while
                        assert time.monotonic() < deadline, "no failover"
                        await snap()
                        await asyncio.sleep(0.2)
                        if acked.count() > before_kill + 100:
                            md = await a.metadata([RF3])
                            if md.topics[RF3].partitions[0].leader in survivors:
                                break
            finally:
                stop.set()
                writer.join(90)
            final = acked.before(time.monotonic())
            async with c.admin(request_timeout_s=10.0) as watcher:  # a fresh monitor agrees with the truth
                fresh = LagMonitor(watcher, methods=(), marker_probe_max_lag=0)
                for _ in range(100):
                    snapshot = await fresh.snapshot(groups)
                    ends = {(g, p.topic, p.partition): (p.offsets.end_offset, p.source) for g, r in
                            snapshot.groups.items() for p in r.partitions}
                    if all(e == (final, "extension") for (g, t, p), e in ends.items() if p == 0):
                        break
                    await asyncio.sleep(0.2)
                assert all(e == (final, "extension") for (g, t, p), e in ends.items() if p == 0), (final, ends)
            return victim, groups, final

    victim, groups, final = c.run(scenario())
    assert {s.group for s in samples} == set(groups)
    last: dict[tuple[str, TopicPartition], int] = {}
    read: list[tuple[float, int]] = []  # (snapshot start, end) of partition 0 read, not stale
    stale = 0
    for s in samples:
        key = (s.group, s.tp)
        assert s.end is not None, s  # never unknown: the last known end while the leader cannot say
        assert s.lag == s.end - COMMITTED and s.lag >= 0, s
        assert {a.value for a in s.anomalies} <= {STALE}, s
        assert s.end >= last.get(key, 0), (s, last[key])  # never back
        last[key] = s.end
        if s.tp != p0:
            assert s.end == idle[s.tp], s
        elif STALE in s.anomalies:  # the highest end read by an earlier snapshot
            assert s.source == "last_known" and s.end == max(e for t, e in read if t < s.t_start), (s, read)
        else:  # a reading: never below what the leader had acknowledged when the snapshot began
            assert s.end >= acked.before(s.t_start), (s, acked.before(s.t_start))
            read.append((s.t_start, s.end))
        stale += STALE in s.anomalies
    assert final > 0 and max(s.end for s in samples if s.tp == p0 and s.end is not None) <= final
    print(f"{len(samples)} samples, {stale} stale, victim {victim}, final HW {final}, "
          f"snapshots {len(durations)} (max {max(durations):.2f} s)")

    async def after() -> list[Any]:
        async with c.admin() as a:
            return await extension_vs_leaders(a, groups)
    assert [w for w in c.run(after()) if w[1].topic == RF3] == []  # the new leader's HW, from any coordinator
