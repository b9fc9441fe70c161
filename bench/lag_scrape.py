"""Time to compute consumer lag for many groups: hightide's one-call OffsetFetch
extension vs the two-call path (OffsetFetch, then ListOffsets) every Kafka broker needs.

Run:  .venv/bin/python bench/lag_scrape.py [--groups 500] [--partitions 100] [--repeat 5]

Set-up: a real ``hightide serve``, one topic of P partitions with records in each, G
groups whose offsets are committed with ``AdminClient.alter_consumer_group_offsets``
(different offsets per group). Then, R times each:

* ``lags``: ``AdminClient.lags(all groups)`` with ``use_extensions`` True / False, the
  raw lag computation (OffsetFetch batches of 100 groups per request, plus, on the
  two-call path, ListOffsets latest + earliest for every partition);
* ``snapshot``: a full exporter scrape (``LagMonitor.snapshot``: lag, describe groups,
  max-timestamp anchors, records at committed offsets, status and time lag).

Reports median/max seconds, Kafka requests per pass (round trips, also per API), and
checks that both paths give identical lag. Round trips are counted two ways: batched
(``lags`` of all groups: OffsetFetch carries 100 groups per request) and per group
(``AdminClient.lag`` of one group at a time, coordinator cached, over the first
50 groups), which is how exporters that ask group by group pay. Prints one JSON
document (progress on stderr) with the same-run physical limits.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import signal
import statistics
import subprocess
import sys
from collections import Counter
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
from produce_consume import Broker  # noqa: E402

from hightide.client import AdminClient, NewTopic, TopicPartition  # noqa: E402
from hightide.lag import offset_lag  # noqa: E402
from hightide.monitoring.monitor import LagMonitor  # noqa: E402

TARGET_RATIO = 3.0
TARGET_SCRAPE_S = 2.0
PER_GROUP_SAMPLE = 50


log = _limits.log


API_NAMES = {1: "Fetch", 2: "ListOffsets", 3: "Metadata", 9: "OffsetFetch", 10: "FindCoordinator",
             15: "DescribeGroups", 18: "ApiVersions"}


def requests_by_api(admin: AdminClient) -> Counter:
    conns = {id(c): c for c in [*admin._conns.values(), admin._bootstrap_conn] if c is not None}
    out: Counter = Counter()
    for c in conns.values():
        out.update(c.requests_sent)
    return out


def requests(admin: AdminClient) -> int:
    return sum(requests_by_api(admin).values())


def _named(counts: Counter) -> dict[str, int]:
    return {API_NAMES.get(k, str(k)): v for k, v in sorted(counts.items()) if v}


async def setup(bootstrap: str, topic: str, groups: list[str], partitions: int) -> None:
    from confluent_kafka import Producer
    async with AdminClient(bootstrap) as a:
        await a.create_topics([NewTopic(topic, partitions, 1)])
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for part in range(partitions):
            for i in range(20):
                p.produce(topic, b"x" * 10, partition=part)
        p.flush(30)
        sem = asyncio.Semaphore(32)

        async def commit(i: int, g: str) -> None:
            async with sem:
                await a.alter_consumer_group_offsets(
                    g, {TopicPartition(topic, q): (i + q) % 21 for q in range(partitions)})
        await asyncio.gather(*(commit(i, g) for i, g in enumerate(groups)))


async def measure(bootstrap: str, groups: list[str], ext: bool, repeat: int) -> dict:
    async with AdminClient(bootstrap, use_extensions=ext) as a:
        await a.lags(groups[:1])  # connect, find coordinator
        times, trips, result = [], [], None
        for _ in range(repeat):
            before = requests(a)
            t0 = time.perf_counter()
            result = await a.lags(groups)
            rows = [offset_lag(pl.committed, pl.high_watermark, pl.log_start_offset)
                    for g in result.values() for pl in g.values()]
            times.append(time.perf_counter() - t0)
            trips.append(requests(a) - before)
        before = requests_by_api(a)
        await a.lags(groups)
        batched_by_api = _named(requests_by_api(a) - before)
        # per group, as exporters that ask one group at a time do (coordinator cached)
        per_group_trips, per_group_times = [], []
        before = requests_by_api(a)
        for g in groups[:PER_GROUP_SAMPLE]:
            n0, t0 = requests(a), time.perf_counter()
            await a.lag(g)
            per_group_times.append(time.perf_counter() - t0)
            per_group_trips.append(requests(a) - n0)
        per_group_by_api = _named(requests_by_api(a) - before)
        mon = LagMonitor(a)
        snap_times, snap_trips = [], []
        before = requests_by_api(a)
        for _ in range(repeat):
            s = await mon.snapshot(groups, all_topics=True)
            snap_times.append(s.duration_s)
            snap_trips.append(s.round_trips)
        snap_by_api = _named(requests_by_api(a) - before)
        lags = {g: {tp: pl.lag for tp, pl in r.items()} for g, r in result.items()}
        return {"lags": {"median_s": statistics.median(times), "max_s": max(times),
                         "round_trips": statistics.median(trips), "partition_lags": len(rows),
                         "requests_by_api": batched_by_api},
                "per_group": {"groups": PER_GROUP_SAMPLE, "median_s": statistics.median(per_group_times),
                              "round_trips": statistics.median(per_group_trips),
                              "requests_by_api": {k: v / PER_GROUP_SAMPLE for k, v in per_group_by_api.items()}},
                "snapshot": {"median_s": statistics.median(snap_times), "max_s": max(snap_times),
                             "round_trips": statistics.median(snap_trips),
                             "requests_by_api": {k: v / repeat for k, v in snap_by_api.items()}},
                "_lags": lags}


def snapshot_only(args: argparse.Namespace) -> None:
    """Set up as the full run, then ``--repeat`` snapshots of every group (after one
    untimed snapshot that connects and finds the coordinator): their durations, the CPU
    seconds each cost the client (``process_time``) and the broker (/proc, all threads),
    and the client's GC collections, as JSON. ``--profile``: py-spy of the broker;
    ``--client-profile``: cProfile of the client (pstats file), both over the timed
    snapshots."""
    import gc
    collections = [0, 0, 0]

    def counted(phase: str, info: dict) -> None:
        if phase == "start":
            collections[info["generation"]] += 1

    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(Path(tmp))
        broker.start()
        try:
            groups = [f"bench-group-{i:04d}" for i in range(args.groups)]
            asyncio.run(setup(broker.bootstrap, "lag-bench", groups, args.partitions))

            client_cpu: list[float] = []
            broker_cpu: list[float] = []

            async def run() -> list[float]:
                async with AdminClient(broker.bootstrap) as a:
                    mon = LagMonitor(a)
                    await mon.snapshot(groups, all_topics=True)
                    gc.callbacks.append(counted)
                    spy = _py_spy(broker.proc.pid, args.profile) if args.profile else None
                    prof = cProfile.Profile() if args.client_profile else None
                    out = []
                    try:
                        if prof is not None:
                            prof.enable()
                        for _ in range(args.repeat):
                            c0, b0 = time.process_time(), _cpu_seconds(broker.proc.pid)
                            out.append((await mon.snapshot(groups, all_topics=True)).duration_s)
                            client_cpu.append(time.process_time() - c0)
                            broker_cpu.append(_cpu_seconds(broker.proc.pid) - b0)
                    finally:
                        if prof is not None:
                            prof.disable()
                            prof.dump_stats(args.client_profile)
                        if spy is not None:
                            spy.send_signal(signal.SIGINT)
                            spy.wait(60)
                    gc.callbacks.remove(counted)
                    return out
            times = asyncio.run(run())
        finally:
            broker.stop()
    total = [c + b for c, b in zip(client_cpu, broker_cpu)]
    print(json.dumps({"benchmark": "lag_scrape", "mode": "snapshot_only", "groups": args.groups,
                      "partitions": args.partitions, "pythonpath": os.environ.get("PYTHONPATH"),
                      "snapshot_s": {"median": statistics.median(times), "min": min(times), "max": max(times),
                                     "all": times},
                      "cpu_s_per_snapshot": {"client_median": statistics.median(client_cpu),
                                             "broker_median": statistics.median(broker_cpu),
                                             "total_median": statistics.median(total), "total_min": min(total),
                                             "client_all": client_cpu, "broker_all": broker_cpu},
                      "gc_collections_per_snapshot": [c / args.repeat for c in collections],
                      "load_average": os.getloadavg(), "machine": _limits.machine()}, indent=2))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _py_spy(pid: int, path: str) -> subprocess.Popen:
    """py-spy recording the broker ``pid`` into ``path`` (speedscope) until SIGINT."""
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "200", "--format", "speedscope",
                             "--output", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", metavar="PATH",
                    help="with --snapshot-only: record the broker with py-spy during the timed snapshots")
    ap.add_argument("--client-profile", metavar="PATH",
                    help="with --snapshot-only: cProfile the client during the timed snapshots (pstats file)")
    ap.add_argument("--snapshot-only", action="store_true",
                    help="time only LagMonitor.snapshot (one-call path), --repeat times, and the CPU seconds of "
                         "client and broker per snapshot: for before/after runs "
                         "(PYTHONPATH=<other src> runs that code, client and broker)")
    args = ap.parse_args()
    if args.snapshot_only:
        snapshot_only(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        limits = _limits.measure(tmp, seconds=0.5)
        broker = Broker(Path(tmp))
        broker.start()
        try:
            groups = [f"bench-group-{i:04d}" for i in range(args.groups)]
            t0 = time.perf_counter()
            asyncio.run(setup(broker.bootstrap, "lag-bench", groups, args.partitions))
            log(f"set-up: {args.groups} groups x {args.partitions} partitions in {time.perf_counter() - t0:.1f}s")
            one = asyncio.run(measure(broker.bootstrap, groups, True, args.repeat))
            log(f"one call: {one['lags']}")
            two = asyncio.run(measure(broker.bootstrap, groups, False, args.repeat))
            log(f"two calls: {two['lags']}")
        finally:
            broker.stop()
    same = one.pop("_lags") == two.pop("_lags")
    ratio = two["lags"]["round_trips"] / max(1, one["lags"]["round_trips"])
    per_group_ratio = two["per_group"]["round_trips"] / max(1, one["per_group"]["round_trips"])
    print(json.dumps({
        "benchmark": "lag_scrape", "groups": args.groups, "partitions": args.partitions,
        "group_partitions": args.groups * args.partitions, "repeat": args.repeat,
        "one_call_extension": one, "two_call_fallback": two,
        "round_trip_ratio": round(ratio, 2), "per_group_round_trip_ratio": round(per_group_ratio, 2),
        "speedup": round(two["lags"]["median_s"] / one["lags"]["median_s"], 2),
        "identical_lag": same,
        "targets": {"round_trip_ratio_min": TARGET_RATIO, "scrape_s_max": TARGET_SCRAPE_S,
                    "ratio_met_batched": ratio >= TARGET_RATIO,
                    "ratio_met_per_group": per_group_ratio >= TARGET_RATIO,
                    "scrape_met": one["snapshot"]["max_s"] < TARGET_SCRAPE_S},
        "limits": limits, "machine": _limits.machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
