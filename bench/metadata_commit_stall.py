"""The event loop's longest stall while metadata commits run (issue 11 defect 5).

An embedded broker creates ``--topics`` topics, one metadata commit each (each commit is
fsynced: the metadata log flushes every message), while a probe task on the same loop
sleeps 1 ms at a time and records how late it wakes. Prints JSON: the probe's longest and
p99 lateness, commits per second.

Run:  .venv/bin/python bench/metadata_commit_stall.py [--topics 50]
(Works against the code before the change too: ``commit_metadata`` was synchronous there.)
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import tempfile
import time

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic


async def _probe(stalls: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        stalls.append(time.perf_counter() - t - 0.001)


async def run(topics: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        b = Broker(BrokerConfig(), data_dir=d, listen=("127.0.0.1", 0))
        await b.start()
        stalls: list[float] = []
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe(stalls, stop))
        await asyncio.sleep(0.05)
        stalls.clear()
        t = time.perf_counter()
        for i in range(topics):
            _, records = b.controller.create_topics(b.image, [NewTopic(f"t{i}", 1)])
            done = b.metadata_writer.commit_metadata(records)
            if inspect.isawaitable(done):
                await done
        elapsed = time.perf_counter() - t
        stop.set()
        await probe
        await b.stop()
    stalls.sort()
    return {"topics": topics, "commits_per_s": round(topics / elapsed, 1),
            "max_stall_ms": round(stalls[-1] * 1000, 2),
            "p99_stall_ms": round(stalls[int(len(stalls) * 0.99)] * 1000, 2), "probes": len(stalls)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=50)
    print(json.dumps(asyncio.run(run(ap.parse_args().topics))))


if __name__ == "__main__":
    main()
