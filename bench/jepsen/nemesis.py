"""The cluster under test and the nemesis that breaks it.

:class:`ProxiedCluster` is a :class:`hightide.devcluster.DevCluster` (one controller, N
brokers, test timings: heartbeat 250 ms, session 3 s) with two fault-injecting TCP
proxies per broker (tests/cluster/proxy.py): one in front of the broker — its advertised
listener, so clients *and other brokers* reach it only through the proxy — and one
between the broker and each controller (``controllers`` voters, 1 by default). Isolating a broker blackholes both: nobody can
reach it and it cannot reach the controller (its own connections to other brokers'
proxies stay up: a one-way partition, the broker still hears leaders but nobody hears
it).

:class:`Nemesis` runs in the caller's thread: one fault at a time, each held for a random
1-5 s (some shorter, some longer than the 3 s session timeout) then healed, with
1-3 s to recover in between. Faults (``--faults``): ``kill`` (kill -9 a broker, restart
it on the same data dir), ``pause`` (SIGSTOP, SIGCONT), ``partition`` (isolate a broker
as above), ``controller`` (kill -9 the active controller — the quorum's leader, asked
with DescribeQuorum — and restart it). Every start and
heal is a ``nemesis`` event in the history. Targets are drawn from a seeded RNG, so a
seed replays the same fault schedule (not the same timing).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hightide.devcluster import DevCluster, plan

from tests.cluster.proxy import FaultProxy

from .history import History

__all__ = ["FAULTS", "Nemesis", "ProxiedCluster"]

FAULTS = ("kill", "pause", "partition", "controller")
HEARTBEAT_MS, SESSION_MS = 250, 3000


class ProxiedCluster:
    """Controller + ``n`` brokers behind per-broker proxies (see the module doc)."""

    def __init__(self, base_dir: Path, n: int, settings: Mapping[str, Any] | None = None,
                 controllers: int = 1) -> None:
        self.dev = DevCluster(plan(n, base_dir, n_controllers=controllers, heartbeat_interval_ms=HEARTBEAT_MS,
                                   session_timeout_ms=SESSION_MS, settings=settings), base_dir)
        self.front: dict[int, FaultProxy] = {}
        self.ctl: dict[int, list[FaultProxy]] = {}  # per broker: one proxy to each controller
        self.isolated: set[int] = set()
        for node in self.dev.brokers:
            spec = node.spec
            front = FaultProxy((spec.host, spec.port)).start()
            self.front[spec.node_id] = front
            spec.settings["advertised.listeners"] = f"PLAINTEXT://{front.address[0]}:{front.address[1]}"
            links = [(c.spec.node_id, FaultProxy((c.spec.host, c.spec.port)).start()) for c in self.dev.controllers]
            self.ctl[spec.node_id] = [link for _, link in links]
            spec.settings["controller.quorum.voters"] = ",".join(
                f"{cid}@{link.address[0]}:{link.address[1]}" for cid, link in links)

    @property
    def bootstrap(self) -> str:
        """Every broker's proxied address (what clients use)."""
        return ",".join(f"{p.address[0]}:{p.address[1]}" for p in self.front.values())

    def start(self, timeout: float = 90.0) -> None:
        try:
            self.dev.start(wait_unfenced=True, timeout=timeout)
        except BaseException:
            self.close()
            raise

    def isolate(self, bid: int) -> None:
        self.isolated.add(bid)
        for proxy in (self.front[bid], *self.ctl[bid]):
            proxy.blackhole(True)
            proxy.close_connections()

    def heal(self, bid: int) -> None:
        self.isolated.discard(bid)
        for proxy in (self.front[bid], *self.ctl[bid]):
            proxy.blackhole(False)
            proxy.close_connections()  # blackholed connections lost bytes: start them afresh

    def active_controller(self) -> int:
        """The node id of the active controller (the quorum's leader; the only controller
        when there is one, or when the quorum cannot be asked)."""
        ctls = self.dev.controllers
        if len(ctls) == 1:
            return ctls[0].spec.node_id
        from hightide.client.cluster import active_controller

        async def ask() -> int:
            conn, info = await active_controller([(c.spec.host, c.spec.port) for c in ctls if c.alive],
                                                 timeout_s=10.0)
            await conn.close()
            return info.leader_id
        try:
            leader = asyncio.run(ask())
        except Exception:  # noqa: BLE001 - an election in progress: any controller will do
            return ctls[0].spec.node_id
        return leader if leader in self.dev.nodes else ctls[0].spec.node_id

    def heal_all(self) -> None:
        """Every node running and resumed, every proxy passing bytes."""
        for node in self.dev.nodes.values():
            if node.paused:
                node.resume()
            if not node.alive:
                node.start().wait_listening(30)
        for bid in list(self.isolated):
            self.heal(bid)

    def close(self) -> None:
        try:
            self.dev.close()
        finally:
            for proxy in (*self.front.values(), *(p for links in self.ctl.values() for p in links)):
                proxy.stop()


class Nemesis:
    """Injects ``faults`` into ``cluster`` (see the module doc)."""

    def __init__(self, cluster: ProxiedCluster, history: History, faults: list[str], seed: int, *,
                 hold_s: tuple[float, float] = (1.0, 5.0), rest_s: tuple[float, float] = (1.0, 3.0)) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
        self.cluster, self.history, self.faults = cluster, history, list(faults)
        self.rnd = random.Random(seed)
        self.hold_s, self.rest_s = hold_s, rest_s
        self.injected = 0
        self.errors: list[str] = []

    def run(self, duration_s: float) -> None:
        """Inject faults for ``duration_s`` seconds in the calling thread (the last fault is
        healed even if that runs past the end), then heal everything.

        Runs in the caller's thread on purpose: a node restarted here is a child of this
        thread, and hightide.devcluster starts nodes with PR_SET_PDEATHSIG, which kills a
        child when the *thread* that started it exits."""
        end = time.monotonic() + duration_s
        while time.monotonic() + self.rest_s[0] < end:
            time.sleep(min(self.rnd.uniform(*self.rest_s), max(0.0, end - time.monotonic())))
            if time.monotonic() >= end:
                break
            self._one(min(self.rnd.uniform(*self.hold_s), max(0.5, end - time.monotonic())))
        self.cluster.heal_all()

    def _one(self, hold: float) -> None:
        fault = self.rnd.choice(self.faults)
        target = self._target(fault)
        self.history.add("nemesis", "info", "nemesis", fault=fault, node=target, phase="start")
        try:
            self._inject(fault, target)
            self.injected += 1
            time.sleep(hold)
        finally:
            try:
                self._heal(fault, target)
            except Exception as exc:  # noqa: BLE001 - recorded; heal_all retries at the end
                self.errors.append(f"healing {fault} of {target}: {exc}")
            self.history.add("nemesis", "info", "nemesis", fault=fault, node=target, phase="heal")

    def _target(self, fault: str) -> int:
        if fault == "controller":
            return self.cluster.active_controller()
        return self.rnd.choice(self.cluster.dev.broker_ids)

    def _inject(self, fault: str, node: int) -> None:
        proc = self.cluster.dev.nodes[node]
        if fault in ("kill", "controller"):
            proc.kill()
        elif fault == "pause":
            proc.pause()
        else:
            self.cluster.isolate(node)

    def _heal(self, fault: str, node: int) -> None:
        proc = self.cluster.dev.nodes[node]
        if fault in ("kill", "controller"):
            proc.start().wait_listening(30)
        elif fault == "pause":
            proc.resume()
        else:
            self.cluster.heal(node)
