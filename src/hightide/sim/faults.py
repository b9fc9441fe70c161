"""The fault schedule of a run, drawn from its seed.

Every ``gap`` (random, 0.5-4 s simulated) one fault starts and, after a random time, is
undone: ``kill`` (kill -9, restart later on the same storage), ``stop`` (SIGTERM and a
restart: the ordered stop must finish within its bound), ``pause`` (SIGSTOP ... SIGCONT),
``partition`` (a node cut off from every other node and client, both ways), ``one-way``
(a node's outgoing bytes held, its incoming delivered), ``sever`` (every connection of a
node reset), ``slow`` (every write delayed 20-300 ms more), ``clock`` (a node's wall clock
stepped by up to ±2 s). At most ``max_down`` nodes are killed, stopped or paused at once
(the faults' kinds and their limits are part of the run's description).

:meth:`FaultSchedule.heal` undoes everything still in effect (restarts, resumes, heals):
the run's quiet phase, after which every client must make progress.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..log.storage_faulty import Fault
from ..aio.tasks import STOP_WAIT_S
from .loop import NodeRun
from .world import STOP_BOUND_S, SimNode, World

__all__ = ["FAULT_KINDS", "FaultSchedule"]

FAULT_KINDS = ("kill", "stop", "pause", "partition", "one-way", "sever", "slow", "clock", "slow-disk", "fsync-fail")
#: Kinds a run takes only when named (``--faults``): ``pause-leader`` pauses the active
#: controller (the drawn node is ignored), as a SIGSTOP of the quorum's leader;
#: ``quorum-loss`` pauses every controller but one (no quorum: metadata writes cannot
#: commit until they resume); ``cut-off`` partitions a broker from every controller,
#: both ways, while clients and the other brokers still reach it (it is fenced when its
#: session expires, and must not answer metadata reads from its stale image meanwhile);
#: ``split`` partitions a broker from the other brokers, both ways, while the controllers
#: and clients still reach it: it falls out of the ISR of every partition it follows
#: (``replica.lag.time.max.ms``) yet stays registered and unfenced, so a leader that goes
#: meanwhile is succeeded by a replica with all the acknowledged records, or by nobody
#: (Kafka's ISR rule), never by it.
#: ``stop-busy`` is ``stop`` on a loaded machine: while the node stops, it gets the CPU
#: in time slices of 5-50 ms (:meth:`.loop.SimLoop.slice`), so what falls due for it
#: between two slices — its timers, the answers on every connection — is handled in one
#: loop iteration, as on a real busy loop (or after SIGCONT).
EXTRA_KINDS = ("pause-leader", "quorum-loss", "cut-off", "split", "stop-busy")


@dataclass
class FaultSchedule:
    world: World
    rng: random.Random
    trace: Callable[[str], None]
    kinds: tuple[str, ...] = FAULT_KINDS
    max_down: int = 1
    #: The indices of the faults to apply (None: all); see :meth:`run`.
    only: frozenset[int] | None = None
    #: The indices of the faults applied so far.
    applied: list[int] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    #: Undo steps that failed (a restart past its bound): the run reports them as anomalies.
    failures: list[str] = field(default_factory=list)
    _down: set[int] = field(default_factory=set)
    _disk_faulted: set[int] = field(default_factory=set)
    _undo: list[asyncio.Task[None]] = field(default_factory=list)
    #: Undo steps whose action has begun (healing lets them finish rather than cut a
    #: restart off between its stop and its start).
    _undoing: set[asyncio.Task[None]] = field(default_factory=set)
    #: [node id (None: every node), start, end] of each fault that slows or silences a
    #: node (end: inf while in effect): what excuses a late answer (:meth:`disturbed`).
    windows: list[list[Any]] = field(default_factory=list)

    def disturbed(self, node_id: int, start: float, end: float) -> bool:
        """True if a fault that slows or silences ``node_id`` (pause, partition, kill,
        stop, slow disk or network, a disk error) was in effect at some time in
        [``start``, ``end``]."""
        return any((w[0] is None or w[0] == node_id) and w[1] <= end and w[2] >= start for w in self.windows)

    async def run(self, duration_s: float) -> None:
        """Start faults for ``duration_s`` (simulated) seconds.

        The schedule is a function of the seed alone: fault ``i`` (counted from 0) draws
        its gap, kind, node, hold time and parameter whether or not it is applied, so
        leaving faults out (``only``: the indices to apply) keeps the others as they were
        (what shrinking needs). A kill, stop, pause or disk error of a node that is down,
        or while ``max_down`` nodes are down, is skipped."""
        loop = asyncio.get_running_loop()
        end = loop.time() + duration_s
        index = -1
        while loop.time() < end:
            index += 1
            gap = self.rng.uniform(0.5, 4.0)
            kind = self.rng.choice(self.kinds)
            node = self.rng.choice(sorted(self.world.nodes.values(), key=lambda n: n.node_id))
            hold_s, param = self.rng.uniform(0.5, 8.0), self.rng.random()
            await asyncio.sleep(gap)
            if self.only is not None and index not in self.only:
                continue
            if kind == "pause-leader":
                leader = self.world.active_controller()
                if leader is None:
                    continue
                node, kind = leader, "pause"
            if kind in ("cut-off", "split"):
                brokers = sorted(self.world.brokers, key=lambda n: n.node_id)
                node = node if not node.controller else brokers[int(param * len(brokers))]
            if kind == "quorum-loss":
                if self._down or any(not n.up for n in self.world.controllers):
                    continue
                self.applied.append(index)
                await self._quorum_loss(hold_s, param, index)
                continue
            if kind in ("kill", "stop", "pause", "fsync-fail", "stop-busy"):
                if node.node_id in self._down or len(self._down) >= self.max_down or not node.up:
                    continue
                self._down.add(node.node_id)
            self.applied.append(index)
            await self._start(kind, node, hold_s, param, index)

    async def _start(self, kind: str, node: SimNode, hold_s: float, param: float, index: int) -> None:
        """Fault ``index``: ``kind`` on ``node`` for ``hold_s``; ``param`` (in [0, 1)) sets
        its size (the network's slowness, the clock step, the disk's slowness)."""
        world, net = self.world, self.world.net
        self.counts[kind] += 1
        if kind not in ("sever", "clock"):
            window = [None if kind == "slow" else node.node_id, asyncio.get_running_loop().time(), float("inf")]
            self.windows.append(window)
        self.trace(f"fault #{index} {kind} {node} for {hold_s:.2f}s")
        if kind == "kill":
            world.kill(node)
            self._later(hold_s, self._restart(node))
        elif kind == "stop":
            took = await world.stop(node)
            self.trace(f"{node} stopped in {took:.2f}s")
            self._later(hold_s, self._restart(node))
        elif kind == "stop-busy":
            run = node.run
            assert run is not None
            slice_s = 0.005 + 0.045 * param
            world.loop.slice(run, slice_s)  # a new incarnation runs unsliced
            took = await self._watched_stop(node, run)
            self.trace(f"{node} stopped in {took:.2f}s (CPU every {1000 * slice_s:.1f} ms)")
            self._later(hold_s, self._restart(node))
        elif kind == "pause":
            world.pause(node)
            self._later(hold_s, self._resume(node))
        elif kind in ("partition", "one-way"):
            others = {n for n in world.nodes if n != node.node_id} | set(range(1000, 1100))
            net.partition({node.node_id}, others, both_ways=kind == "partition")
            self._later(hold_s, self._heal())
        elif kind == "cut-off":  # held past the session timeout (6 s) half the time
            net.partition({node.node_id}, {c.node_id for c in world.controllers})
            self._later(2 * hold_s, self._heal())
        elif kind == "split":
            net.partition({node.node_id}, {b.node_id for b in world.brokers if b is not node})
            self._later(hold_s, self._heal())
        elif kind == "sever":
            net.sever(node.node_id)
        elif kind == "slow":
            net.slow(0.02 + 0.28 * param)
            self._later(hold_s, self._unslow())
        elif kind == "clock" and node.clock is not None:
            node.clock.jump(int(-2000 + 4001 * param))
        elif kind == "slow-disk":
            node.disk_slow_s = 0.05 + 0.45 * param
            self._later(hold_s, self._fast_disk(node))
        elif kind == "fsync-fail":
            node.disk.set_rules(Fault("fsync", "EIO", count=1))
            self._disk_faulted.add(node.node_id)
            self._later(hold_s, self._operator_restart(node))

    async def _watched_stop(self, node: SimNode, run: NodeRun) -> float:
        """``world.stop(node)``, and every task of the node the stop cancels must end
        within :data:`~hightide.aio.tasks.STOP_WAIT_S` of its cancellation (the bound
        ``cancel_and_wait`` gives it: a loop that honours its cancellation ends within a
        step or two). One that does not swallowed its cancel: the node is killed (as the
        operator or the exit watchdog would) and the run fails. Raises TimeoutError then,
        or when the stop overruns its bound."""
        loop = self.world.loop
        stopping = asyncio.ensure_future(self.world.stop(node))
        cancelled_at: dict[asyncio.Task[Any], float] = {}
        while not stopping.done():
            await asyncio.wait((stopping,), timeout=0.05)
            now = loop.time()
            for task in loop.tasks_of(run) if not stopping.done() else ():
                if task.cancelling():
                    since = cancelled_at.setdefault(task, now)
                    if now - since > STOP_WAIT_S:
                        self.world.kill(node)
                        stopping.cancel()
                        raise TimeoutError(f"{node}'s stop: task {task.get_name()} still runs {now - since:.1f} s "
                                           f"after its cancellation (swallowed), at {since - 1000:.3f}")
        try:
            return stopping.result()
        except TimeoutError:
            raise TimeoutError(f"{node} did not stop within {STOP_BOUND_S:.0f} s") from None

    async def _quorum_loss(self, hold_s: float, param: float, index: int) -> None:
        """Fault ``index``: pause every controller but one (``param`` picks it) for ``hold_s``."""
        controllers = sorted(self.world.controllers, key=lambda n: n.node_id)
        spared = controllers[int(param * len(controllers))]
        paused = [n for n in controllers if n is not spared]
        self.counts["quorum-loss"] += 1
        self.trace(f"fault #{index} quorum-loss: pause {', '.join(map(str, paused))} for {hold_s:.2f}s")
        now = asyncio.get_running_loop().time()
        for node in paused:
            self._down.add(node.node_id)
            self.world.pause(node)
            self.windows.append([node.node_id, now, float("inf")])
            self._later(hold_s, self._resume(node))

    def _later(self, delay_s: float, action: Coroutine[Any, Any, None]) -> None:
        window = self.windows[-1] if self.windows and self.windows[-1][2] == float("inf") else None

        async def after() -> None:
            try:
                await asyncio.sleep(delay_s)
            except asyncio.CancelledError:
                action.close()
                raise
            self._undoing.add(task)
            try:
                await action
            except Exception as exc:  # noqa: BLE001 - a restart that failed is the run's verdict
                self.failures.append(f"{exc.__class__.__name__}: {exc}")
            finally:
                if window is not None:
                    window[2] = asyncio.get_running_loop().time()
        task = asyncio.ensure_future(after())
        self._undo.append(task)

    async def _restart(self, node: SimNode) -> None:
        if not node.up:
            self.trace(f"restart {node}")
            await self.world.launch(node)
        self._down.discard(node.node_id)

    async def _fast_disk(self, node: SimNode) -> None:
        node.disk_slow_s = 0.0

    async def _operator_restart(self, node: SimNode) -> None:
        """After a disk error: the operator restarts the node (a halted one is down already)."""
        node.disk.clear()
        self._disk_faulted.discard(node.node_id)
        if node.up:
            took = await self.world.stop(node)
            self.trace(f"{node} stopped in {took:.2f}s after its disk error")
        await self._restart(node)

    async def _resume(self, node: SimNode) -> None:
        self.trace(f"resume {node}")
        self.world.resume(node)
        self._down.discard(node.node_id)

    async def _heal(self) -> None:
        self.trace("heal the network")
        self.world.net.heal()

    async def _unslow(self) -> None:
        self.world.net.slow(0.0)

    async def heal(self) -> None:
        """Undo every fault still in effect (see the module doc). An undo step already
        under way (an operator restart between its stop and its start) finishes first:
        cut off, it would leave the node stopped for good."""
        for task in self._undo:
            if task not in self._undoing:  # still waiting: its action never starts
                task.cancel()
        await asyncio.gather(*self._undo, return_exceptions=True)  # begun: each bounded (restart, stop)
        self._undo.clear()
        self._undoing.clear()
        self.world.net.heal()
        self.world.net.slow(0.0)
        for node in self.world.nodes.values():
            node.disk_slow_s = 0.0
            if node.node_id in self._disk_faulted:  # a disk error: the operator restarts the node
                self._disk_faulted.discard(node.node_id)
                node.disk.clear()
                if node.up:
                    await self.world.stop(node)
            if node.run is not None and node.run.state == "paused":
                self.world.resume(node)
            if not node.up:
                self.trace(f"restart {node}")
                await self.world.launch(node)
        self._down.clear()
        now = asyncio.get_running_loop().time()
        for window in self.windows:
            window[2] = min(window[2], now)
        self.trace("healed")
