"""A seeded simulation of the coordinator runtime (group coordinator, one partition, a real
partition log, ``flush.messages=1``, a fake flusher): random interleavings of OffsetCommits
(some with ExpectedOffset), reads, fsync rounds, fsync failures (log offline, or the fsync
could not start and the partition reloads) and callers going away. After every step:

* reads only ever return committed state: the committed shard equals a fresh load of the
  log's records below the committed offset, and nothing is committed that is not fsynced;
* every commit answered OK is in the log below the committed offset;
* a commit answered with an error is never readable before it is in the log and durable
  (it becomes visible only through a reload of a durable log);
* when nothing is in flight, the working shard equals the committed shard.

A failing seed is named in the assertion; rerun it with ``SEEDS=<n>``.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from pathlib import Path

import pytest

from hightide.group.offsets import CommitRequest
from hightide.protocol.errors import ErrorCode
from hightide.coordinator.runtime import CoordinatorUnavailable
from tests.unit.test_coordinator_runtime import GROUP, T0, _log_state, _offsets, _runtime

SEEDS = [int(s) for s in os.environ["SEEDS"].split(",")] if os.environ.get("SEEDS") else list(range(40))
STEPS = 60
KEYS = 3


def _commit(groups, partition: int, offset: int, expected: int | None):
    commit = CommitRequest("t", partition, offset, -1, "", expected)
    return groups.execute(GROUP, lambda shard: shard.commit_offsets(
        GROUP, -1, "", [commit], T0, lambda t, p: True), T0)


def _check(seed: int, step: int, groups, broker, answered: dict) -> None:
    where = f"seed {seed} step {step}"
    runtime = groups.runtime
    committed = runtime.committed_offset(0)
    assert committed <= broker.log.recovery_point, f"{where}: committed past the fsynced offset"
    state = _log_state(groups, broker, upto=committed)
    assert _offsets(runtime.partitions[0].shard) == state, f"{where}: reads differ from the committed log"
    in_log = {}
    for offset, value in _log_values(groups, broker):
        in_log[value] = offset
    for value, ok in answered.items():
        if ok:
            assert value in in_log and in_log[value] < committed, f"{where}: answered {value} is not committed"
    part = runtime.partitions[0]
    if not part.inflight and part.working is not None:
        assert _offsets(part.working) == _offsets(part.shard), f"{where}: idle working shard differs"


def _log_values(groups, broker):
    from hightide.coordinator import runtime as coordinator_runtime
    for chunk in coordinator_runtime.iter_record_chunks(broker.log):
        for offset, key, value in chunk:
            shard = groups.runtime.adapter.new_shard(0)
            groups.runtime.adapter.load_record([shard], 0, offset, key, value)
            for tps in shard.offsets.offsets.values():
                for v in tps.values():
                    yield offset, v.offset


async def _simulate(seed: int, path: Path) -> None:
    rnd = random.Random(seed)
    groups, broker = _runtime(path, **{"log.flush.interval.messages": 1})
    tasks: dict[int, asyncio.Future] = {}
    answered: dict[int, bool] = {}
    for step in range(STEPS):
        action = rnd.choices(["commit", "yield", "round", "fail_offline", "fail_transient", "cancel"],
                             [40, 25, 20, 2, 5, 8])[0]
        if action == "commit":
            value = 1000 + step
            expected = None
            if rnd.random() < 0.3:  # optimistic locking against what the writer last saw
                shard = groups.runtime.working_shard(0)
                if shard is not None:
                    f = shard.fetch_offsets(GROUP, [("t", 0)])[0]
                    expected = f.offset if f.offset >= 0 else None
            tasks[value] = asyncio.ensure_future(_commit(groups, rnd.randrange(KEYS), value, expected))
        elif action == "yield":
            for _ in range(rnd.randrange(1, 4)):
                await asyncio.sleep(0)
        elif action == "round":
            broker.flusher.complete()
        elif action in ("fail_offline", "fail_transient"):
            broker.flusher.fail(offline=action == "fail_offline")
        elif action == "cancel" and tasks:
            rnd.choice(list(tasks.values())).cancel()  # the caller goes away; the write goes on
        await asyncio.sleep(0)
        for value, t in list(tasks.items()):
            if t.done():
                del tasks[value]
                if t.cancelled():
                    continue
                exc = t.exception()
                if exc is None:
                    group_error, errors = t.result()
                    if group_error == ErrorCode.none and all(e == ErrorCode.none for e in errors.values()):
                        answered[value] = True  # else refused (ExpectedOffset differs): nothing written
                else:
                    assert isinstance(exc, CoordinatorUnavailable), f"seed {seed}: unexpected {exc!r}"
                    answered[value] = False
        _check(seed, step, groups, broker, answered)
    # drain: complete the fsyncs (of the writes and of any reload) until nothing is left
    for _ in range(50):
        broker.flusher.complete()
        await asyncio.sleep(0)
        if not broker.flusher.pending and not groups.runtime.partitions[0].inflight and all(
                t.done() for t in tasks.values()):
            break
    await asyncio.sleep(0)
    _check(seed, STEPS, groups, broker, answered)


@pytest.mark.parametrize("seed", SEEDS)
def test_reads_only_ever_return_committed_state(seed):
    with tempfile.TemporaryDirectory(prefix="ht-sim-") as d:
        asyncio.run(_simulate(seed, Path(d)))
