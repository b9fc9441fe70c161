"""The event loop's longest stall while a broker loads a big ``__consumer_offsets``
(issue 11: shards load asynchronously, in chunks).

``prepare`` fills ``__consumer_offsets`` (one partition) with ``--mb`` MB of offset
commits through an embedded broker; ``measure`` starts a broker on a copy of that data
directory while a probe task on the same loop sleeps 1 ms at a time, and reports how late
it woke at worst until the coordinator is loaded (also counting only after ``start()``
returned: start-up's own synchronous work, opening the logs, is not the load), and how long
loading took.

Run:  .venv/bin/python bench/coordinator_load_stall.py [--mb 15]
(``measure`` also runs against the code before the change: PYTHONPATH=/work/base/src
.venv/bin/python bench/coordinator_load_stall.py --measure DIR)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time

from hightide import Broker, BrokerConfig

CFG = {"offsets.topic.num.partitions": 1, "log.cleaner.enable": False}


async def prepare(data_dir: str, mb: int) -> int:
    from hightide.cluster.controller import NewTopic
    from hightide.group.offsets import CommitRequest
    b = Broker(BrokerConfig.load(overrides=CFG), data_dir=data_dir, listen=("127.0.0.1", 0))
    await b.start()
    _, records = b.controller.create_topics(b.image, [NewTopic("t", 50)])
    await b.metadata_writer.commit_metadata(records)
    await b.groups.ensure_topic()
    plog = b.hosted.partition_log("__consumer_offsets", 0)
    n = 0
    while plog.size_bytes < mb << 20:
        commits = [CommitRequest("t", p, n, -1, "m" * 32) for p in range(50)]
        gid = f"g{n % 500}"
        await b.groups.execute(gid, lambda s: s.commit_offsets(gid, -1, "", commits, int(time.time() * 1000),
                                                               lambda t, p: True), int(time.time() * 1000))
        n += 1
    await b.stop()
    return n * 50


async def measure(data_dir: str) -> dict:
    stalls: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - t - 0.001)
    task = asyncio.create_task(probe())
    await asyncio.sleep(0.02)
    stalls.clear()
    t = time.perf_counter()
    b = Broker(BrokerConfig.load(overrides=CFG), data_dir=data_dir, listen=("127.0.0.1", 0))
    await b.start()
    started = time.perf_counter() - t
    during_start = len(stalls)
    wait = getattr(b.groups, "wait_loaded", None)
    if wait is not None:
        await wait()
    loaded = time.perf_counter() - t
    stop.set()
    await task
    await b.stop()
    after_start = sorted(stalls[during_start + 1:])  # the first one wakes after start() itself
    stalls.sort()
    return {"start_ms": round(started * 1000, 1), "loaded_ms": round(loaded * 1000, 1),
            "max_stall_after_start_ms": round(after_start[-1] * 1000, 2) if after_start else None,
            "max_stall_ms": round(stalls[-1] * 1000, 2) if stalls else None,
            "p99_stall_ms": round(stalls[int(len(stalls) * 0.99)] * 1000, 2) if stalls else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=15)
    ap.add_argument("--measure", help="measure only, on a copy of this prepared data directory")
    ap.add_argument("--keep", help="prepare into this directory and keep it")
    args = ap.parse_args()
    if args.measure:
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(args.measure, d, dirs_exist_ok=True)
            print(json.dumps(asyncio.run(measure(d))))
        return
    with tempfile.TemporaryDirectory() as d:
        src = args.keep or d
        commits = asyncio.run(prepare(src, args.mb))
        with tempfile.TemporaryDirectory() as m:
            shutil.copytree(src, m, dirs_exist_ok=True)
            print(json.dumps({"mb": args.mb, "commits": commits, **asyncio.run(measure(m))}))


if __name__ == "__main__":
    main()
