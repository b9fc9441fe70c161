"""Replication on real processes (issue 15): what a replica costs and how long a leader
failover takes, on 3 brokers + 1 controller on loopback, in one run.

* **throughput**: one confluent-kafka producer writes a fixed byte count (``--mb``)
  of 1 KB and of 10 KB records to a 3-partition topic (one leader per broker), for
  acks=all on RF=3 (min.insync.replicas=2), acks=1 on RF=1 and acks=all on RF=1 —
  MB/s and records/s from the first produce to the last delivery report;
* **latency**: the same three modes at a fixed moderate rate (``--rate`` 1 KB records
  per second to one partition for ``--latency-s``): produce → delivery report p50/p99;
* **failover**: an acks=all producer writes to partition 0 of an RF=3 topic
  (min.insync.replicas=2) every 5 ms; its leader is killed -9 ``--kills`` times; each
  time: kill → the first delivery of a record *sent after the kill* (what a client that
  keeps writing sees), and kill → the controller names a new leader. The killed broker is
  restarted and back in the ISR before the next kill. p50/p99/max.

    .venv/bin/python bench/replication.py [--mb 64] [--kills 20] [--parts throughput,latency,failover]
                                          [--out FILE]

``--parts`` runs only some of the three parts (``--kills 0`` skips the failover too).
Each throughput size also reports ``rf3_vs_acks1_rf1``: acks=all RF=3 MB/s over acks=1
RF=1 MB/s in the same run. Every throughput and latency row carries the CPU time the
three broker processes used during it (``broker_cpu_s_per_gb``,
``broker_cpu_ms_per_record``, all threads, from ``/proc``; a throughput row also the
producer's, ``client_cpu_s_per_gb``: all share the machine's cores): unlike the wall-clock
numbers it hardly depends on what else the machine runs.

Before every throughput and latency row the cluster's files are fsynced and dropped
from the page cache (``POSIX_FADV_DONTNEED`` on this run's files only; the brokers keep
running and lose nothing): each row then writes into page cache the earlier rows freed.
Without that the page cache of the earlier rows piles up, and on this VM memory beyond
about 7 GB of page cache costs ~10x more system CPU per page written (the first touch
of guest memory the host has not backed: ``bench/_limits.py``), so whichever row crossed
that line (an RF=3 row writes three times the bytes) paid for it. Each row reports
``memfree_mb`` (MemFree before it) so the regime is visible.

Prints JSON (and writes it to ``--out``) with the machine's physical limits and its load
average during each part (the machine is shared: other jobs run at the same time).
Wall-clock; not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402

from hightide.client import AdminClient, NewTopic  # noqa: E402
from hightide.devcluster import DevCluster  # noqa: E402

from _limits import emit, git_revision, log, machine, measure, process_cpu_s  # noqa: E402

HEARTBEAT_MS, SESSION_MS = 250, 3000
MODES = (("acks=all RF=3", "all", 3), ("acks=1 RF=1", "1", 1), ("acks=all RF=1", "all", 1))
QUIET = {"log_level": 0}


def pct(xs: list[float], p: float) -> float:
    """The ``p`` quantile (nearest rank) of ``xs``, rounded to 0.1."""
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(p * len(s)))], 1)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_s(cluster: DevCluster) -> float:
    """CPU seconds (user + system, all threads) the cluster's broker processes used so far."""
    return process_cpu_s([n.pid for n in cluster.brokers])


def memfree_mb() -> int:
    """MemFree from /proc/meminfo, MB."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemFree:"):
                return int(line.split()[1]) >> 10
    return -1


def drop_page_cache(directory: str) -> None:
    """fsync every file under ``directory`` and drop it from the page cache (clean pages
    only; the data stays on disk and the files stay open in the brokers)."""
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue  # deleted meanwhile
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def own_cpu_s() -> float:
    """CPU seconds this process (the producer, librdkafka's threads included) used so far."""
    t = os.times()
    return t.user + t.system


def create(bootstrap: str, topics: list[NewTopic]) -> None:
    """Create ``topics`` and wait until every partition has a leader and a full ISR."""
    async def go() -> None:
        async with AdminClient(bootstrap, request_timeout_s=30.0) as a:
            await a.create_topics(topics)
            deadline = time.monotonic() + 60
            while True:
                md = await a.metadata([t.name for t in topics])
                if all(t.name in md.topics and len(md.topics[t.name].partitions) == t.num_partitions and all(
                        p.leader >= 0 and len(p.isr) == t.replication_factor
                        for p in md.topics[t.name].partitions.values()) for t in topics):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"topics not led with a full ISR: {md.topics}")
                await asyncio.sleep(0.1)
    asyncio.run(go())


def topic_config(rf: int) -> dict[str, str]:
    return {"min.insync.replicas": "2"} if rf == 3 else {}


def throughput(bootstrap: str, topic: str, acks: str, size: int, total_bytes: int) -> dict[str, Any]:
    """One producer writes ``total_bytes`` of ``size``-byte records round-robin over the
    topic's 3 partitions; MB/s from the first produce to the last delivery report."""
    n = total_bytes // size
    p = Producer({**QUIET, "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "batch.size": 1_000_000, "queue.buffering.max.kbytes": 256 * 1024})
    value = os.urandom(size)
    failed = [0]

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed[0] += 1
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % 3, on_delivery=report)
                break
            except BufferError:
                p.poll(0.005)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    return {"record_bytes": size, "records": n, "mb": round(n * size / 1e6, 1), "seconds": round(elapsed, 2),
            "mb_per_s": round(n * size / 1e6 / elapsed, 1), "records_per_s": round(n / elapsed),
            "failed": failed[0] + left}


def latency(bootstrap: str, topic: str, acks: str, rate: int, seconds: float) -> dict[str, Any]:
    """``rate`` 1 KB records per second to partition 0 for ``seconds``: produce → delivery
    report, p50/p99 in ms."""
    p = Producer({**QUIET, "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    lat: list[float] = []
    failed = [0]
    value = os.urandom(1000)

    def report(err: Any, _msg: Any, t: float) -> None:
        if err is None:
            lat.append((time.perf_counter() - t) * 1000)
        else:
            failed[0] += 1
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            p.poll(min(0.002, due - now))
        p.produce(topic, value, partition=0, on_delivery=lambda e, m, t=time.perf_counter(): report(e, m, t))
    p.flush(60)
    return {"rate_per_s": rate, "record_bytes": 1000, "records": n, "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99), "max_ms": round(max(lat), 1), "failed": failed[0]}


class Writer:
    """An acks=all producer writing to partition 0 every 5 ms on its own thread; keeps
    (sent at, delivered at) of every record delivered."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.p = Producer({**QUIET, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                           "message.timeout.ms": 60_000})
        self.topic = topic
        self.lock = threading.Lock()
        self.delivered: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            self.p.produce(self.topic, b"x" * 100, partition=0,
                           on_delivery=lambda e, m, s=sent: self.done(e, s))
            self.p.poll(0.005)
        self.p.flush(60)

    def done(self, err: Any, sent: float) -> None:
        if err is None:
            with self.lock:
                self.delivered.append((sent, time.monotonic()))

    def first_sent_after(self, t: float) -> float | None:
        with self.lock:
            got = [d for s, d in self.delivered if s >= t]
        return min(got) if got else None


async def partition_state(a: AdminClient, topic: str) -> tuple[int, int]:
    """(leader, ISR size) of partition 0."""
    md = await a.metadata([topic])
    p = md.topics[topic].partitions[0]
    return p.leader, len(p.isr)


def failover(cluster: DevCluster, topic: str, kills: int) -> dict[str, Any]:
    writer = Writer(cluster.bootstrap, topic)
    writer.thread.start()
    resumed: list[float] = []
    elected: list[float] = []

    async def state() -> tuple[int, int]:
        async with AdminClient(cluster.bootstrap, request_timeout_s=5.0) as a:
            return await partition_state(a, topic)

    def wait(cond: Any, what: str, timeout_s: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                got = cond()
                if got:
                    return got
            except Exception:  # noqa: BLE001 - not yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} within {timeout_s} s")
            time.sleep(0.02)
    try:
        for k in range(kills):
            leader, _ = wait(lambda: (s := asyncio.run(state()))[1] == 3 and s, "a full ISR")
            wait(lambda: writer.first_sent_after(time.monotonic() - 0.5), "writes before the kill")
            t0 = time.monotonic()
            cluster.nodes[leader].kill()
            t_elected = wait(lambda: (s := asyncio.run(state()))[0] not in (-1, leader) and time.monotonic(),
                             "a new leader")
            t_resumed = wait(lambda: writer.first_sent_after(t0), "a write delivered after the kill")
            elected.append((t_elected - t0) * 1000)
            resumed.append((t_resumed - t0) * 1000)
            log(f"kill {k + 1}/{kills} of broker {leader}: new leader seen {elected[-1]:.0f} ms, "
                f"first acks=all write {resumed[-1]:.0f} ms")
            cluster.nodes[leader].start().wait_listening(30)
    finally:
        writer.stop.set()
        writer.thread.join(90)
    return {"kills": kills, "session_timeout_ms": SESSION_MS, "heartbeat_ms": HEARTBEAT_MS,
            "kill_to_first_acks_all_write_ms": {"p50": pct(resumed, 0.5), "p99": pct(resumed, 0.99),
                                                "max": round(max(resumed), 1), "all": [round(x) for x in resumed]},
            "kill_to_new_leader_in_metadata_ms": {"p50": pct(elected, 0.5), "p99": pct(elected, 0.99),
                                                  "max": round(max(elected), 1)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64, help="bytes per throughput case, MB")
    ap.add_argument("--rate", type=int, default=500, help="records/s of the latency runs")
    ap.add_argument("--latency-s", type=float, default=10.0)
    ap.add_argument("--kills", type=int, default=20, help="leader kills of the failover part (0: no failover part)")
    ap.add_argument("--parts", default="throughput,latency,failover",
                    help="comma-separated parts to run: throughput, latency, failover")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if not parts <= {"throughput", "latency", "failover"}:
        ap.error(f"unknown part(s) in --parts: {', '.join(sorted(parts - {'throughput', 'latency', 'failover'}))}")
    if args.kills <= 0:
        parts.discard("failover")
    out: dict[str, Any] = {"machine": machine(), "revision": git_revision(), "loadavg_start": load()}
    with tempfile.TemporaryDirectory() as d, DevCluster.create(
            3, d, heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS) as cluster:
        out["physical_limits"] = measure(d)
        cluster.start(timeout=90)
        topics = [NewTopic(f"tput-{i}-{size}", 3, rf, topic_config(rf))
                  for i, (_, _, rf) in enumerate(MODES) for size in (1000, 10_000)]
        topics += [NewTopic(f"lat-{i}", 1, rf, topic_config(rf)) for i, (_, _, rf) in enumerate(MODES)]
        topics.append(NewTopic("failover", 1, 3, topic_config(3)))
        create(cluster.bootstrap, topics)
        if "throughput" in parts:
            results = []
            for size in (1000, 10_000):
                for i, (name, acks, rf) in enumerate(MODES):
                    log(f"throughput {name}, {size} B records, {args.mb} MB")
                    drop_page_cache(d)
                    free = memfree_mb()
                    cpu0, client0 = cpu_s(cluster), own_cpu_s()
                    r = throughput(cluster.bootstrap, f"tput-{i}-{size}", acks, size, args.mb * 1_000_000)
                    results.append({"mode": name, "loadavg": load(), "memfree_mb": free, **r,
                                    "broker_cpu_s_per_gb": round((cpu_s(cluster) - cpu0) / (r["mb"] / 1000), 2),
                                    "client_cpu_s_per_gb": round((own_cpu_s() - client0) / (r["mb"] / 1000), 2)})
                    log(f"  {r['mb_per_s']} MB/s in {r['seconds']} s")
            out["throughput"] = results
            out["rf3_vs_acks1_rf1"] = {
                str(size): round(by["acks=all RF=3"] / by["acks=1 RF=1"], 3)
                for size in (1000, 10_000)
                if (by := {r["mode"]: r["mb_per_s"] for r in results if r["record_bytes"] == size})}
        if "latency" in parts:
            lats = []
            for i, (name, acks, _) in enumerate(MODES):
                log(f"latency {name} at {args.rate}/s")
                drop_page_cache(d)
                free = memfree_mb()
                cpu0 = cpu_s(cluster)
                r = latency(cluster.bootstrap, f"lat-{i}", acks, args.rate, args.latency_s)
                lats.append({"mode": name, "loadavg": load(), "memfree_mb": free, **r,
                             "broker_cpu_ms_per_record": round((cpu_s(cluster) - cpu0) * 1000 / r["records"], 3)})
                log(f"  p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms, broker CPU {lats[-1]['broker_cpu_ms_per_record']} ms/record")
            out["latency"] = lats
        if "failover" in parts:
            log(f"failover: {args.kills} leader kills")
            out["failover"] = {**failover(cluster, "failover", args.kills), "loadavg_end": load()}
    out["loadavg_end"] = load()
    emit(out, args.out)


if __name__ == "__main__":
    main()
