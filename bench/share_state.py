"""Share coordinator (``__share_group_state``): state writes per second and recovery time.

Run:  .venv/bin/python bench/share_state.py [--quick]

In-process broker (no sockets), one share partition per run:

1. **Writes**: ``broker.share_state.write`` (WriteShareGroupState's path: shard decides,
   one record appended, replayed) with 1, 10 and 100 state batches per write, the window
   moving forward like a share partition's.
2. **Recovery**: N writes (snapshot every 500 updates, Kafka's default), then a restart of
   the runtime's load; once without pruning (replays everything) and once after pruning
   (replays from the latest snapshot only). Reported: records replayed and milliseconds.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic
from hightide.share.types import ShareStateKey, StateBatch


async def _broker(d: str) -> Broker:
    b = Broker(BrokerConfig.load(overrides={"share.coordinator.state.topic.num.partitions": 1}), data_dir=d,
               listen=("127.0.0.1", 0))
    await b.start()
    if "t" not in b.image.topics:
        _, records = b.controller.create_topics(b.image, [NewTopic("t", 1)])
        await b.metadata_writer.commit_metadata(records)
    await b.share_state.wait_loaded()
    return b


def _batches(i: int, n: int) -> tuple[StateBatch, ...]:
    start = i * 10
    return tuple(StateBatch(start + j * 2, start + j * 2 + 1, (0, 2)[j % 2], 1) for j in range(n))


async def writes(n_writes: int, per_write: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        b = await _broker(d)
        key = ShareStateKey("g", b.image.topics["t"].topic_id, 0)
        assert await b.share_state.initialize(key, 0, 0) == 0
        t = time.perf_counter()
        for i in range(n_writes):
            assert await b.share_state.write(key, 0, 0, i * 10, per_write // 2, _batches(i, per_write)) == 0
        dt = time.perf_counter() - t
        await b.stop()
        return n_writes / dt


async def recovery(n_writes: int, prune: bool) -> dict:
    with tempfile.TemporaryDirectory() as d:
        b = await _broker(d)
        key = ShareStateKey("g", b.image.topics["t"].topic_id, 0)
        assert await b.share_state.initialize(key, 0, 0) == 0
        for i in range(n_writes):
            assert await b.share_state.write(key, 0, 0, i * 10, 5, _batches(i, 10)) == 0
        if prune:
            await b.share_state.prune(int(time.time() * 1000))
        await b.stop()
        t = time.perf_counter()
        b = await _broker(d)
        ms = (time.perf_counter() - t) * 1000
        out = {"writes": n_writes, "pruned": prune, "records_replayed": b.share_state.loaded_records,
               "broker_start_ms": round(ms, 1)}
        await b.stop()
        return out


async def main(quick: bool) -> None:
    n = 1000 if quick else 5000
    result = {"writes_per_s": {f"{k}_batches": round(await writes(n if k < 100 else n // 5, k)) for k in (1, 10, 100)},
              "recovery": [await recovery(n, False), await recovery(n, True)]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    asyncio.run(main(ap.parse_args().quick))
