"""The shell's one clock: :class:`Clock`, and :data:`SYSTEM_CLOCK`, its production
implementation over :mod:`time` and :mod:`asyncio`.

Every component of the asyncio shell (``server``, ``coordinator``, ``replica``,
``node``, ``disk``) reads time, sleeps and schedules callbacks only through the
``Clock`` it was built with (a constructor argument or a field of its narrow
environment, e.g. ``CoordinatorEnv.clock``, defaulting to :data:`SYSTEM_CLOCK`); the
``Broker`` takes one and hands it down. A test (or the whole-node simulator) passes
another — :class:`ManualClock` here is one advanced by hand — and the components' timers
(group heartbeats, ISR expiry, the lifecycle's heartbeat schedule, ...) run on its time
without real sleeps. ``tests/unit/test_one_clock.py`` keeps it so: no ``time.time(``,
``time.monotonic(``, ``asyncio.sleep(`` or ``call_later(`` in those packages.

Not through the clock: deadlines of ``asyncio.timeout()`` / ``asyncio.wait(...,
timeout=...)`` and of socket operations run on the event loop's own time
(``loop.time()``). They are left as they are: the simulator runs its own event loop
whose time is the simulated time, so those deadlines follow it there. A ``Clock``
other than the system clock should therefore keep ``monotonic()`` in step with its
loop's ``time()`` when the two are mixed.

The sans-IO cores (``cluster/``, ``group/``, ``txn/``, ...) take time as an argument
and never read a clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

from .tasks import wait_event


class Cancellable(Protocol):
    """What :meth:`Clock.call_later` returns (an ``asyncio.TimerHandle`` in production)."""

    def cancel(self) -> None:
        """Do not run the callback (no-op when it ran or was cancelled already)."""
        ...


class Clock(Protocol):
    """Time as the shell reads it."""

    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (record timestamps, the cores'
        ``now_ms`` arguments, deadlines kept in ms)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, deadlines, latencies)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` (<= 0: yield to the loop once, like
        ``asyncio.sleep(0)``). Cancellable."""
        ...

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Cancellable:
        """Run ``callback(*args)`` on the loop after ``delay_s`` seconds, unless the
        returned handle is cancelled first."""
        ...


class SystemClock:
    """The production :class:`Clock`: ``time.time``, ``time.monotonic``, ``asyncio.sleep``
    and the running loop's ``call_later``."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay_s, callback, *args)


SYSTEM_CLOCK: Clock = SystemClock()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Timer:
    __slots__ = ("callback", "args", "cancelled")

    def __init__(self, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.callback, self.args, self.cancelled = callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A :class:`Clock` that moves only when told (tests): :meth:`advance` moves time and
    runs, in time order, the callbacks and wakes the sleepers that fall due (a sleeper
    resumes on the loop's next steps: ``await asyncio.sleep(0)`` a few times, or use
    :meth:`advance_and_settle`). ``now_ms()`` starts at ``start_ms``, ``monotonic()`` at
    ``start_s``; both move together. Deadlines on the loop's own time
    (``asyncio.timeout``) do not follow it."""

    def __init__(self, start_ms: int = 1_700_000_000_000, start_s: float = 1000.0) -> None:
        self._wall0, self._mono0 = start_ms, start_s
        self._ns = 0  # time elapsed, in integer nanoseconds: steps of 0.1 s add up exactly
        self._timers: list[tuple[int, int, _Timer]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._wall0 + self._ns // 1_000_000

    def monotonic(self) -> float:
        return self._mono0 + self._ns / 1e9

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Cancellable:
        timer = _Timer(callback, args)
        heapq.heappush(self._timers, (self._ns + max(0, round(delay_s * 1e9)), next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()

    @property
    def sleepers(self) -> int:
        """How many callbacks and sleepers are waiting for time to move."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    def advance(self, seconds: float) -> None:
        """Move time ``seconds`` on, running each due callback at its own time."""
        end = self._ns + round(seconds * 1e9)
        while self._timers and self._timers[0][0] <= end:
            at, _, timer = heapq.heappop(self._timers)
            self._ns = max(self._ns, at)
            if not timer.cancelled:
                timer.callback(*timer.args)
        self._ns = end

    async def advance_and_settle(self, seconds: float, spins: int = 100) -> None:
        """Advance ``seconds``, stopping at each callback or sleeper that falls due on the
        way and letting the loop run ``spins`` rounds there, so a woken sleeper acts at
        its own time (what it schedules meanwhile is run in turn); 0: only let the loop
        run."""
        end = self._ns + round(seconds * 1e9)
        while True:
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            at = self._timers[0][0] if self._timers else end
            self.advance(max(0, min(at, end) - self._ns) / 1e9)
            for _ in range(spins):
                await asyncio.sleep(0)
            if self._ns >= end:
                return


async def wait_event_on(clock: Clock, event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes on ``clock`` (None: no
    timeout); True if the event is set. Like :func:`hightide.aio.tasks.wait_event`, whose
    timeout runs on the loop's time, for a wait that is a schedule of the component (a
    heartbeat interval) rather than a bound on IO. On the system clock it is exactly
    ``wait_event`` (the loop's time is the system's monotonic time)."""
    if event.is_set():
        return True
    if clock is SYSTEM_CLOCK:
        return await wait_event(event, timeout_s)
    if timeout_s is None:
        await event.wait()
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout_s))
    try:
        await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
    return event.is_set()
