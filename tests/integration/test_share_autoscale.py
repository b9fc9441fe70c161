"""Autoscaling share consumers from share lag: a local pool of confluent-kafka
``ShareConsumer`` processes is scaled up and down by the hint of ``hightide share-groups
describe G --scale-hint TARGET`` (desired consumers = ceil(share lag / TARGET)) and drains a
burst. The timeline (seconds, share lag, desired, running) is printed (``pytest -s``) and
docs/share-groups.md shows one."""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
import time
import uuid

import pytest

from ..rawkafka import RawClient
from .test_cli import run
from .test_share_consumer import _group
from .clients import confluent_create_topic

sc = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration

PARTITIONS = 4
BURST = 3000
TARGET = 750  # share lag one consumer should carry: the burst asks for 4
MAX_POOL = 4
COST_S = 0.004  # per record: 12 s of processing in all
TIMEOUT_S = 240.0


def _worker(bootstrap: str, group: str, topic: str, cost_s: float) -> None:
    """One share consumer: poll, "process" (sleep per record), implicit acknowledgement;
    SIGTERM closes it cleanly (acknowledging what it processed, leaving the group)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    c = sc.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        while not stop:
            msgs = c.poll(0.2)
            if msgs:
                time.sleep(len(msgs) * cost_s)
    finally:
        c.close()


def _produce_spread(bootstrap: str, topic: str, n: int) -> None:
    p = sc.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "batch.num.messages": 100})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def test_pool_follows_the_scale_hint_and_drains_a_burst(server, topic_name):
    group = f"sg-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(server.bootstrap, topic_name, PARTITIONS)
    with RawClient(server.bootstrap) as c:
        _group(c, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="15000")
    ctx = mp.get_context("spawn")
    pool: list = []
    stopped: list = []
    timeline: list[tuple[float, int | None, int | None, int]] = []
    burst_at: float | None = None
    t0 = time.monotonic()

    def scale_to(n: int) -> None:
        while len(pool) < n:
            p = ctx.Process(target=_worker, args=(server.bootstrap, group, topic_name, COST_S), daemon=True)
            p.start()
            pool.append(p)
        while len(pool) > n:
            p = pool.pop()
            p.terminate()  # SIGTERM: the worker closes its consumer
            stopped.append(p)

    try:
        while time.monotonic() - t0 < TIMEOUT_S:
            r = run(server, "share-groups", "describe", group, "--scale-hint", str(TARGET), "-o", "json", ok=False)
            rows = json.loads(r.stdout) if r.exit_code == 0 else []
            lag = rows[0]["lag"] if rows else None
            desired = rows[0]["desired"] if rows else None
            # the controller: the hint, capped; an unknown lag (no share group or share
            # partitions not started yet) runs one consumer, which starts them
            scale_to(1 if desired is None else min(MAX_POOL, desired))
            now = round(time.monotonic() - t0, 1)
            timeline.append((now, lag, desired, len(pool)))
            if burst_at is None and lag == 0 and not pool:
                _produce_spread(server.bootstrap, topic_name, BURST)  # the partitions are started: the burst
                burst_at = now
            elif burst_at is not None and lag == 0 and not pool and any(d and d >= MAX_POOL for _, _, d, _ in timeline):
                break
            time.sleep(1.0)
    finally:
        scale_to(0)
        for p in stopped:
            p.join(20)
            if p.is_alive():
                p.kill()
                p.join(5)
        print("\nt_s  share_lag  desired  running")
        for t, lag, d, n in timeline:
            print(f"{t:5.1f}  {lag if lag is not None else '-':>9}  {d if d is not None else '-':>7}  {n:>7}")
    assert burst_at is not None, timeline
    after = [row for row in timeline if row[0] > burst_at]
    peak = max(n for _, _, _, n in after)
    assert peak == MAX_POOL, timeline  # a lag of 3000 at 750 per consumer: scaled up to 4
    assert after[-1][1:] == (0, 0, 0), timeline  # drained, and scaled down to zero
    assert all(p.exitcode == 0 for p in stopped), [p.exitcode for p in stopped]  # clean closes
    # every record acknowledged: each share partition's start offset at its end
    offsets = json.loads(run(server, "share-groups", "describe", group, "-o", "json").stdout)
    assert sum(o["start_offset"] for o in offsets) == BURST and all(o["lag"] == 0 for o in offsets), offsets
