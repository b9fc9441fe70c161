"""A node's :class:`~hightide.aio.clock.Clock` in the simulation: the simulated loop's
time, with a wall clock the simulation may move (a clock jump).

``monotonic()`` is the loop's time, so the shell's deadlines on ``asyncio.timeout`` and
its own sleeps agree. ``now_ms()`` is ``epoch_ms + loop.time()`` plus this node's
``skew_ms``, which :meth:`SimClock.jump` changes: wall-clock steps, forward or back,
as NTP makes them. Kafka assumes monotonic time for its timeouts and tolerates wall
clock steps in record timestamps and retention; the simulation keeps jumps within
``MAX_JUMP_MS`` so that invariants about time (retention) are not the ones tested.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..aio.clock import Cancellable

EPOCH_MS = 1_800_000_000_000  # 2027-01-15: any fixed start; the loop starts at 1000 s
MAX_JUMP_MS = 5_000


class SimClock:
    """See the module doc. Built from the simulated loop; one per node."""

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_ms: int = EPOCH_MS) -> None:
        self.loop = loop
        self.epoch_ms = epoch_ms
        self.skew_ms = 0

    def now_ms(self) -> int:
        return self.epoch_ms + int(self.loop.time() * 1000) + self.skew_ms

    def monotonic(self) -> float:
        return self.loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Cancellable:
        return self.loop.call_later(delay_s, callback, *args)

    def jump(self, delta_ms: int) -> None:
        """Step this node's wall clock by ``delta_ms`` (bounded by ``MAX_JUMP_MS`` in total)."""
        self.skew_ms = max(-MAX_JUMP_MS, min(MAX_JUMP_MS, self.skew_ms + delta_ms))
