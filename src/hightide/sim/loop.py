"""A deterministic asyncio event loop on simulated time, with per-node pause and crash.

:class:`SimLoop` is an ``asyncio.BaseEventLoop`` whose clock (``loop.time()``) is a
number it moves itself: when nothing is ready to run, time jumps to the earliest timer.
There is no I/O selector (the simulated network delivers bytes with ``call_soon`` /
``call_later``), and ``run_in_executor`` runs the function on the loop, after a delay
the simulation chooses (a disk that is slow, from the seed), never on a thread. Given
the same callbacks in the same order, two runs are identical; all the randomness of a
run comes from the seed of :mod:`hightide.sim.world`.

Nodes. Every callback carries the ``contextvars.Context`` it was scheduled in (asyncio
copies the current one into each task and handle). A node's tasks are started in a
context where :data:`NODE` names its :class:`NodeRun`; everything they schedule inherits
it. Before running a ready callback the loop looks at that run's state:

- ``running``: run it;
- ``paused`` (SIGSTOP): hold it, in order; :meth:`SimLoop.resume` puts the held
  callbacks back (SIGCONT: every timer that fell due meanwhile fires at once);
- ``running`` in time slices (:meth:`SimLoop.slice`, a loaded machine whose scheduler
  gives the process the CPU every ``slice_s``): a callback that falls due between two
  slices is held, in order; at the next slice every held callback is put back at once,
  so what fell due meanwhile — timers, bytes from every connection — is handled in one
  loop iteration, as a busy loop's ``epoll`` returns every ready socket together. Within
  a slice the node runs every callback of that instant (its own chains take no time);
- ``dead`` (kill -9): drop it. The node's tasks never run again; they are kept
  referenced (:attr:`SimLoop.zombies`) so that garbage collection never closes their
  coroutines, which would run ``finally`` blocks a killed process never runs.

Callbacks outside any node (the simulation's own driver, its clients) always run.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NODE", "NodeRun", "SimLoop", "SimulationStuck"]


class SimulationStuck(RuntimeError):
    """Nothing is ready and no timer is set while the driver still waits: a deadlock."""


@dataclass(eq=False)
class NodeRun:
    """One incarnation of one node (a restart makes a new one with the same ``node_id``)."""

    node_id: int
    incarnation: int
    state: str = "running"  # running | paused | dead
    held: collections.deque[asyncio.Handle] = field(default_factory=collections.deque)
    #: Time slices (see the module doc): their period in ns (0: none), the instant of the
    #: current slice, and the timer of the next one while callbacks wait for it.
    slice_ns: int = 0
    slice_at_ns: int = -1
    next_slice: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"NodeRun(node={self.node_id}#{self.incarnation}, {self.state})"


#: The node whose code is running (None: the simulation's driver or a client).
NODE: contextvars.ContextVar[NodeRun | None] = contextvars.ContextVar("hightide_sim_node", default=None)

_MAX_JUMP_S = 24 * 3600.0
#: Callbacks at one instant after which the loop reports a livelock (a busy loop that
#: never lets time move: on a real clock it would burn a core).
LIVELOCK_STEPS = 1_000_000


#: The context of the loop's own bookkeeping callbacks (no node: never held).
_OUTSIDE = contextvars.Context()


def node_of(handle: asyncio.Handle) -> NodeRun | None:
    """The node a scheduled callback belongs to (by the context it was scheduled in)."""
    ctx = getattr(handle, "_context", None)
    return None if ctx is None else ctx.get(NODE)


class SimLoop(asyncio.BaseEventLoop):
    """See the module doc. ``start_s`` is the loop's time at creation; ``disk_delay``
    returns the simulated duration of one executor job (default: none)."""

    # BaseEventLoop's own state, which the step below drives (typeshed does not declare it)
    _ready: collections.deque[Any]
    _scheduled: list[Any]
    _stopping: bool
    _timer_cancelled_count: int

    def __init__(self, start_s: float = 1000.0, *, disk_delay: Callable[[], float] | None = None) -> None:
        super().__init__()
        self._now_ns = round(start_s * 1e9)
        self._clock_resolution = 1e-9
        self.disk_delay = disk_delay or (lambda: 0.0)
        self.zombies: list[Any] = []
        self.steps = 0  # callbacks run so far (a progress measure for traces)
        self._nodes: list[NodeRun] = []
        self.step_hook: Callable[[], None] | None = None
        self._spin_at, self._spin_steps = -1, 0  # livelock detection: time, and the steps then
        #: The simulated network (:class:`~.network.SimNetwork`) behind ``create_connection``
        #: and ``create_server``; set by whoever builds it.
        self.network: Any = None
        self._task_nodes: weakref.WeakKeyDictionary[asyncio.Task[Any], NodeRun] = weakref.WeakKeyDictionary()

    # --- time --------------------------------------------------------------------------

    def time(self) -> float:
        """Simulated seconds. Time moves on a grid of whole nanoseconds, rounded up to the
        timer it jumps to: a timer set for the tiny remainder of a deadline (a deadline
        computed in float seconds may sit one ulp past the time its timer fires at) moves
        time on by at least a nanosecond, so such a wait ends, as it does on a real clock,
        instead of firing again and again at the same instant."""
        return self._now_ns / 1e9

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        """As asyncio's, on the nanosecond grid: a positive delay is at least one
        nanosecond (a delay below the float resolution of the time would otherwise fire
        at the same instant, and a wait for the remainder of a deadline would spin)."""
        if delay > 0:
            at = (self._now_ns + max(1, math.ceil(delay * 1e9))) / 1e9
            return self.call_at(at, callback, *args, context=context)
        return super().call_later(delay, callback, *args, context=context)

    # --- nodes -------------------------------------------------------------------------

    def node_context(self, node_id: int) -> tuple[NodeRun, contextvars.Context]:
        """A new incarnation of ``node_id`` and a context to start its tasks in
        (``loop.create_task(coro, context=ctx)`` or ``ctx.run(...)``)."""
        run = NodeRun(node_id, sum(1 for r in self._nodes if r.node_id == node_id))
        self._nodes.append(run)
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, run)
        return run, ctx

    def pause(self, run: NodeRun) -> None:
        if run.state == "running":
            run.state = "paused"

    def resume(self, run: NodeRun) -> None:
        if run.state != "paused":
            return
        run.state = "running"
        held, run.held = run.held, collections.deque()
        self._ready.extend(held)

    def slice(self, run: NodeRun, slice_s: float) -> None:
        """Run ``run`` in time slices of period ``slice_s`` from now on (0: no longer;
        what was held is put back at once). See the module doc."""
        run.slice_ns = max(0, round(slice_s * 1e9))
        if run.slice_ns == 0:
            if run.next_slice is not None:
                run.next_slice.cancel()
                run.next_slice = None
            self._next_slice(run)

    def _next_slice(self, run: NodeRun) -> None:
        """A slice of ``run`` begins: what it held while waiting for the CPU runs now."""
        run.next_slice = None
        if run.state != "running":  # paused: held until resumed (then until the next slice)
            return
        run.slice_at_ns = self._now_ns
        held, run.held = run.held, collections.deque()
        self._ready.extend(held)

    def kill(self, run: NodeRun) -> None:
        """kill -9: the run's callbacks never run again (see the module doc)."""
        run.state = "dead"
        run.held.clear()
        self.zombies.extend(t for t in asyncio.all_tasks(self) if self._task_nodes.get(t) is run)

    def tasks_of(self, run: NodeRun) -> list[asyncio.Task[Any]]:
        """The tasks of ``run`` that have not ended, by name."""
        return sorted((t for t in asyncio.all_tasks(self) if self._task_nodes.get(t) is run and not t.done()),
                      key=lambda t: t.get_name())

    def create_task(self, coro: Any, *, name: str | None = None,  # type: ignore[override]
                    context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        task = super().create_task(coro, name=name, context=context)
        run = (context if context is not None else contextvars.copy_context()).get(NODE)
        if run is not None:
            self._task_nodes[task] = run
        return task

    # --- the network: the loop's own connect/listen go to the simulated network -----------

    async def create_connection(self, protocol_factory: Any, host: Any = None, port: Any = None,
                                **kwargs: Any) -> Any:
        if self.network is None:
            raise RuntimeError("this simulated loop has no network")
        return await self.network.connect(protocol_factory, host, port, ssl=kwargs.get("ssl"),
                                          server_hostname=kwargs.get("server_hostname"))

    async def create_server(self, protocol_factory: Any, host: Any = None, port: Any = None,
                            **kwargs: Any) -> Any:
        if self.network is None:
            raise RuntimeError("this simulated loop has no network")
        return await self.network.listen(protocol_factory, host, port, ssl=kwargs.get("ssl"))

    # --- the executor: jobs run on the loop, after a simulated delay -------------------

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:  # type: ignore[override]
        fut: asyncio.Future[Any] = self.create_future()

        def run() -> None:
            if fut.cancelled():
                return
            try:
                result = func(*args)
            except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting task
                if not fut.done():
                    fut.set_exception(exc)
            else:
                if not fut.done():
                    fut.set_result(result)

        delay = self.disk_delay()
        if delay > 0:
            self.call_later(delay, run)
        else:
            self.call_soon(run)
        return fut

    def set_default_executor(self, executor: Any) -> None:
        pass

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        pass

    # --- what BaseEventLoop needs of a selector loop ----------------------------------

    def _process_events(self, event_list: Any) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                             context: contextvars.Context | None = None) -> asyncio.Handle:
        return self.call_soon(callback, *args, context=context)

    def _run_once(self) -> None:
        """One step: move time to the next timer if nothing is ready, move due timers to
        the ready queue, run what is ready (held or dropped by node state)."""
        scheduled = self._scheduled
        if len(scheduled) > 100 and self._timer_cancelled_count * 2 > len(scheduled):
            live = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    live.append(handle)
            heapq.heapify(live)
            self._scheduled = scheduled = live
            self._timer_cancelled_count = 0
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False
        if not self._ready and not self._stopping:
            if not scheduled:
                raise SimulationStuck("no callback is ready and no timer is set")
            self._now_ns = max(self._now_ns, math.ceil(scheduled[0]._when * 1e9))
        if self._now_ns != self._spin_at:
            self._spin_at, self._spin_steps = self._now_ns, self.steps
        elif self.steps - self._spin_steps > LIVELOCK_STEPS:
            busy = ", ".join(sorted({repr(h)[:120] for h in list(self._ready)[:8]}))
            raise SimulationStuck(f"livelock: {LIVELOCK_STEPS} callbacks ran without time moving on; ready: {busy}")
        end = self.time() + self._clock_resolution
        while scheduled and scheduled[0]._when < end:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            self._ready.append(handle)
        for _ in range(len(self._ready)):
            handle = self._ready.popleft()
            if handle._cancelled:
                continue
            run = node_of(handle)
            if run is not None and run.state != "running":
                if run.state == "paused":
                    run.held.append(handle)
                continue
            if run is not None and run.slice_ns and self._now_ns != run.slice_at_ns:  # waits for its slice
                run.held.append(handle)
                if run.next_slice is None:
                    at_ns = (self._now_ns // run.slice_ns + 1) * run.slice_ns
                    run.next_slice = self.call_at(at_ns / 1e9, self._next_slice, run, context=_OUTSIDE)
                continue
            self.steps += 1
            handle._run()
            if self.step_hook is not None:
                self.step_hook()

    def jump(self, seconds: float) -> None:
        """Move time on by ``seconds`` at once (timers due meanwhile fire on the next step)."""
        self._now_ns += round(min(max(0.0, seconds), _MAX_JUMP_S) * 1e9)
