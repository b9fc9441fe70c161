"""The event loop's longest stall while the log cleaner compacts a large log (issue 11
defect 5).

An embedded broker gets a compacted topic holding ``--mb`` MB of
``__consumer_offsets``-like records (offset-commit keys for 3,000 group/topic/partition
triples, rewritten over and over) in closed 1 MiB segments; then one cleaner pass runs
while a probe task on the same loop sleeps 1 ms at a time and records how late it wakes.
Prints JSON: bytes before/after, the cleaning's wall time, the probe's longest and p99
lateness.

Run:  .venv/bin/python bench/cleaner_stall.py [--mb 15] [--runs 3]
(Works against the code before the change too: ``run_cleaner`` was synchronous there.)
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import struct
import tempfile
import time

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic
from hightide.protocol.records import build_batch, validate_batches

KEYS = 3000


def _batches(ts: int) -> list[bytes]:
    out = []
    for start in range(0, KEYS, 100):
        recs = []
        for i in range(start, start + 100):
            group, topic = f"group-{i % 50}".encode(), f"orders-{i % 7}".encode()
            key = struct.pack(">hh", 1, len(group)) + group + struct.pack(">h", len(topic)) + topic + struct.pack(">i", i)
            value = struct.pack(">hqih", 3, i, 0, 13) + b"consumer-meta" + struct.pack(">q", ts)
            recs.append((key, value, [], ts))
        out.append(build_batch(recs))
    return out


async def _probe(stalls: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        stalls.append(time.perf_counter() - t - 0.001)


async def run(mb: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        config = BrokerConfig()
        config.set("log.cleaner.backoff.ms", "3600000")
        b = Broker(config, data_dir=d, listen=("127.0.0.1", 0))
        await b.start()
        _, records = b.controller.create_topics(
            b.image, [NewTopic("offsets-like", 1, configs={"cleanup.policy": "compact", "segment.bytes": str(1 << 20)})])
        done = b.metadata_writer.commit_metadata(records)
        if inspect.isawaitable(done):
            await done
        plog = b.hosted.partition_log("offsets-like", 0)
        ts = int(time.time() * 1000)
        batches = [(x, validate_batches(x, client_origin=False)) for x in _batches(ts)]
        n = 0
        while plog.size_bytes < mb * 1024 * 1024:
            x, headers = batches[n % len(batches)]
            plog.append(x, headers, ts)
            n += 1
        plog.roll(ts)
        before = plog.size_bytes
        stalls: list[float] = []
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe(stalls, stop))
        await asyncio.sleep(0.05)
        stalls.clear()
        t = time.perf_counter()
        outcome = b.cleaner.run_once()
        if inspect.isawaitable(outcome):
            await outcome
        elapsed = time.perf_counter() - t
        stop.set()
        await probe
        after = plog.size_bytes
        await b.stop()
    stalls.sort()
    return {"mb": mb, "bytes_before": before, "bytes_after": after, "clean_ms": round(elapsed * 1000, 1),
            "max_stall_ms": round(stalls[-1] * 1000, 2), "p99_stall_ms": round(stalls[int(len(stalls) * 0.99)] * 1000, 2),
            "probes": len(stalls)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=15)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = [asyncio.run(run(args.mb)) for _ in range(args.runs)]
    print(json.dumps({"benchmark": "cleaner_stall", "runs": runs,
                      "max_stall_ms": max(r["max_stall_ms"] for r in runs)}))


if __name__ == "__main__":
    main()
