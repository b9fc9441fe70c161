"""Issue 11 defect 5 (regression): the log cleaner must not block the event loop.

An embedded broker holds a compacted topic with ~15 MB of ``__consumer_offsets``-like
keyed records (offset-commit keys for a few thousand group/topic/partition triples,
rewritten over and over) in closed 1 MiB segments. While the cleaner compacts it, a
probe coroutine measures the longest gap between its wake-ups. The old cleaner ran on
the loop and stalled it ~1 s; now the loop only plans and swaps, and the reading,
rewriting and fsyncing run on a worker thread.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
import time

import pytest

from hightide.config import BrokerConfig
from hightide.protocol.records import build_batch, validate_batches
from hightide.server.broker import Broker

from tests.integration.clients import confluent_create_topic

STALL_BOUND_S = 0.2  # the old cleaner stalled ~1 s here; a worker-thread cleaner a few ms
TARGET_BYTES = 15 * 1024 * 1024
KEYS = 3000


def _offset_key(i: int) -> bytes:
    group, topic = f"group-{i % 50}".encode(), f"orders-{i % 7}".encode()
    return struct.pack(">hh", 1, len(group)) + group + struct.pack(">h", len(topic)) + topic + struct.pack(">i", i)


def _offset_value(offset: int, ts: int) -> bytes:
    meta = b"consumer-meta"
    return struct.pack(">hqih", 3, offset, 0, len(meta)) + meta + struct.pack(">q", ts)


def _batches(ts: int) -> list[bytes]:
    """Distinct batches of 100 commits each, cycling through every key."""
    out = []
    for start in range(0, KEYS, 100):
        out.append(build_batch([(_offset_key(i), _offset_value(start + i, ts), [], ts)
                                for i in range(start, start + 100)]))
    return out


async def _fill(plog, ts: int) -> int:
    """Append until the log holds TARGET_BYTES (yielding now and then)."""
    batches = [(b, validate_batches(b, client_origin=False)) for b in _batches(ts)]
    n = 0
    while plog.size_bytes < TARGET_BYTES:
        b, headers = batches[n % len(batches)]
        plog.append(b, headers, ts)
        n += 1
        if n % 200 == 0:
            await asyncio.sleep(0)
    plog.roll(ts)  # everything written is cleanable (the active segment never is)
    return n


async def _longest_stall(stop: asyncio.Event) -> float:
    loop = asyncio.get_running_loop()
    worst = 0.0
    while not stop.is_set():
        t0 = loop.time()
        await asyncio.sleep(0.002)
        worst = max(worst, loop.time() - t0 - 0.002)
    return worst


async def _scenario(tmp_path, topic: str) -> dict:
    config = BrokerConfig()
    config.set("log.cleaner.backoff.ms", "3600000")  # only the explicit pass below
    async with Broker(config, data_dir=str(tmp_path / "data"), listen=("127.0.0.1", 0)) as broker:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: confluent_create_topic(
            f"127.0.0.1:{broker.port}", topic, 1, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20)}))
        plog = broker.hosted.partition_log(topic, 0)
        assert plog is not None
        await _fill(plog, int(time.time() * 1000))
        before = plog.size_bytes
        stop = asyncio.Event()
        probe = asyncio.create_task(_longest_stall(stop))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        outcome = broker.cleaner.run_once()
        if inspect.isawaitable(outcome):  # the old cleaner ran synchronously
            await outcome
        took = time.monotonic() - t0
        stop.set()
        stall = await probe
        return {"bytes_before": before, "bytes_after": plog.size_bytes, "clean_s": took, "stall_s": stall,
                "records": plog.log_end_offset}


def test_cleaner_does_not_stall_the_event_loop(tmp_path, topic_name):
    r = asyncio.run(_scenario(tmp_path, topic_name))
    print(f"cleaner: {r['bytes_before']} -> {r['bytes_after']} bytes ({r['records']} records) in "
          f"{r['clean_s'] * 1000:.0f} ms; longest event-loop stall {r['stall_s'] * 1000:.1f} ms")
    assert r["bytes_before"] >= TARGET_BYTES
    assert r["bytes_after"] < r["bytes_before"] // 10, "the cleaning must really have compacted the log"
    assert r["stall_s"] < STALL_BOUND_S, (
        f"the event loop stalled {r['stall_s'] * 1000:.0f} ms while the cleaner ran")


pytestmark = pytest.mark.integration
