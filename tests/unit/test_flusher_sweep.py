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
