"""The flusher's periodic policy costs at most one look at each log per tick, however
many rounds the durability requests start (issue 33: a broker asks for a round after
every applied metadata batch; looking at every partition's log in each of those rounds
made the cost of a metadata write grow with the number of partitions)."""

from __future__ import annotations

import asyncio

from hightide.aio.clock import ManualClock
from hightide.disk.flusher import SWEEP_SLICE, TICK_S, Flusher
from hightide.log.flush import FlushJob


class _Log:
    """A partition log as the flusher sees it, counting the policy's looks."""

    def __init__(self) -> None:
        self.looks = 0

    def needs_flush(self, now: int) -> bool:
        self.looks += 1
        return False

    def begin_flush(self, now: int) -> FlushJob:
        return FlushJob(None, [], (), 0, None)  # type: ignore[arg-type]

    def end_flush(self, job: FlushJob, ok: bool) -> None:
        pass


def _rounds(n_logs: int, rounds: int, clock: ManualClock, step_s: float = 0.0) -> list[_Log]:
    logs = [_Log() for _ in range(n_logs)]
    pairs = [(("t", i), lg) for i, lg in enumerate(logs)]
    f = Flusher(lambda: pairs, clock=clock)

    async def go() -> None:
        waited = _Log()
        for _ in range(rounds):
            f.durable(waited)  # type: ignore[arg-type]
            await f.flush_due()
            clock.advance(step_s)

    try:
        asyncio.run(go())
    finally:
        f.shutdown_threads()
    return logs


def test_rounds_within_one_tick_look_at_each_log_once() -> None:
    logs = _rounds(50, 40, ManualClock())
    assert max(lg.looks for lg in logs) == 1


def test_each_tick_looks_at_every_log_again() -> None:
    logs = _rounds(50, 6, ManualClock(), step_s=TICK_S)
    assert all(lg.looks == 6 for lg in logs)


def test_more_logs_than_a_slice_are_swept_a_slice_per_tick() -> None:
    n = SWEEP_SLICE + SWEEP_SLICE // 2
    logs = _rounds(n, 30, ManualClock())  # one tick: one slice
    assert sum(lg.looks for lg in logs) == SWEEP_SLICE
    logs = _rounds(n, 2, ManualClock(), step_s=TICK_S)  # two ticks: the whole sweep once
    assert all(lg.looks == 1 for lg in logs)


class _Dirty(_Log):
    """A log that reports itself, due once ``due`` is set, pending until flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.due = False
        self.pending = False
        self.flushed = 0

    def needs_flush(self, now: int) -> bool:
        self.looks += 1
        return self.due

    def flush_pending(self) -> bool:
        return self.pending

    def begin_due_flush(self, now: int) -> FlushJob:
        return FlushJob(None, [], (), 0, None)  # type: ignore[arg-type]

    def end_flush(self, job: FlushJob, ok: bool) -> None:
        self.flushed += 1
        self.due = self.pending = False


def test_with_a_dirty_feed_idle_logs_cost_only_the_backstop() -> None:
    """Issue 33: the periodic policy looks at the logs that reported a change (every
    tick until they are flushed) and at ``BACKSTOP_SLICE`` others per tick: at 30,000
    idle partitions the sweep of 2,000 per tick was a quarter of a node's Python time."""
    from hightide.disk.flusher import BACKSTOP_SLICE
    clock = ManualClock()
    idle = [_Dirty() for _ in range(BACKSTOP_SLICE * 4)]
    busy = _Dirty()
    pairs = [(("t", i), lg) for i, lg in enumerate([*idle, busy])]
    f = Flusher(lambda: pairs, clock=clock, dirty_feed=True)

    async def tick() -> None:
        await f.flush_due()
        if f._periodic is not None:
            await f._periodic
        clock.advance(TICK_S)

    async def go() -> None:
        busy.pending = True  # appended, flush.ms not reached: looked at every tick
        f.note_dirty(busy)  # type: ignore[arg-type]
        for _ in range(3):
            await tick()
        assert busy.looks >= 3 and busy.flushed == 0
        busy.due = True
        await tick()
        assert busy.flushed == 1
        looks = busy.looks
        for _ in range(3):
            await tick()
        assert busy.looks - looks <= 1  # clean: only the backstop sweep may look again
    try:
        asyncio.run(go())
    finally:
        f.shutdown_threads()
    assert sum(lg.looks for lg in idle) <= BACKSTOP_SLICE * 7  # 7 ticks of the backstop, not 7 sweeps
    assert max(lg.looks for lg in idle) <= 2


def test_a_real_log_reports_its_appends_and_is_flushed_by_the_policy(tmp_path) -> None:
    """A log among the LogManager's open ones reports each append (its on_dirty); the
    policy flushes it once flush.ms has passed, without any sweep over the others."""
    from hightide.log.config import LogConfig
    from hightide.log.manager import LogManager
    from hightide.protocol.records import build_batch, validate_batches
    clock = ManualClock()
    logs = LogManager(str(tmp_path))
    f = Flusher(lambda: logs, clock=clock, dirty_feed=True)
    logs.on_dirty = f.note_dirty
    plog = logs.open(("t", 0), LogConfig(flush_interval_ms=100), clock.now_ms())

    async def go() -> None:
        await f.flush_due()  # the new (empty) log: nothing pending, it drops out
        assert not f._dirty
        batch = build_batch([(None, b"x", [], 1)])
        plog.append(batch, validate_batches(batch), clock.now_ms())
        assert id(plog) in f._dirty
        clock.advance(TICK_S)
        await f.flush_due()  # its new directory's entry only
        if f._periodic is not None:
            await f._periodic
        assert plog.recovery_point == 0 and id(plog) in f._dirty  # flush.ms not reached: kept
        clock.advance(TICK_S)
        await f.flush_due()
        assert plog.recovery_point == 0 and id(plog) in f._dirty
        clock.advance(0.2)
        await f.flush_due()
        if f._periodic is not None:
            await f._periodic
        assert plog.recovery_point == 1
        clock.advance(TICK_S)
        await f.flush_due()  # looked at once more after its flush: clean, it drops out
        assert not f._dirty
    try:
        asyncio.run(go())
    finally:
        f.shutdown_threads()
        logs.close()
