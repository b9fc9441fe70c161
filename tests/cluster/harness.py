"""The multi-process cluster for tests: hightide.devcluster with test timings, optional
fault proxies between brokers and the controller, and log dumps on failure.

Timings: ``broker.heartbeat.interval.ms=250`` and ``broker.session.timeout.ms=3000`` —
fast enough for fencing tests, loose enough that a loaded 2-core machine does not fence a
healthy broker. Use through the ``cluster`` fixture (tests/cluster/conftest.py)::

    def test_x(cluster):
        c = cluster(3)                               # controller + 3 brokers, all unfenced
        q = cluster(3, controllers=3)                # a quorum of 3 controllers + 3 brokers
        q.kill(q.quorum_leader()); q.wait_leader()   # a new active controller
        c = cluster(2, proxied=[1], metadata_read_consistency="local")
        c.proxies[1].pause()                         # broker 1 cut off from the controller
        c.kill(0); c.wait_fenced(0)
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hightide.client import AdminClient
from hightide.client.cluster import QuorumInfo, active_controller
from hightide.devcluster import DevCluster, NodeProcess, plan

from .proxy import FaultProxy

HEARTBEAT_MS = 250
SESSION_MS = 3000


def kafka_names(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata_read_consistency`` → ``metadata.read.consistency`` (Kafka's config
    names never contain an underscore, so the mapping is exact); dotted names pass."""
    return {k.replace("_", "."): v for k, v in settings.items()}


class ClusterHarness(DevCluster):
    """A :class:`DevCluster` plus the proxies in front of the controller (``proxies``,
    by broker id) and test helpers."""

    def __init__(self, base_dir: Path, n_brokers: int, *, proxied: Iterable[int] = (),
                 settings: Mapping[str, Any] | None = None, **layout: Any) -> None:
        layout.setdefault("heartbeat_interval_ms", HEARTBEAT_MS)
        layout.setdefault("session_timeout_ms", SESSION_MS)
        super().__init__(plan(n_brokers, base_dir, settings=settings, **layout), base_dir)
        self.proxies: dict[int, FaultProxy] = {}
        if proxied and len(self.controllers) > 1:
            raise ValueError("proxies sit in front of a single controller; a quorum has several")
        controller = self.controllers[0].spec
        for bid in proxied:
            proxy = FaultProxy((controller.host, controller.port)).start()
            self.proxies[bid] = proxy
            self.route_via(bid, *proxy.address)

    def close(self, timeout: float = 20.0) -> None:
        try:
            super().close(timeout)
        finally:
            for proxy in self.proxies.values():
                proxy.stop()

    # -- shortcuts -----------------------------------------------------------------------
    def node(self, node_id: int) -> NodeProcess:
        return self.nodes[node_id]

    @property
    def controller(self) -> NodeProcess:
        return self.controllers[0]

    def address(self, node_id: int) -> str:
        return self.nodes[node_id].spec.address

    def kill(self, node_id: int) -> None:
        """kill -9 the node."""
        self.nodes[node_id].kill()

    def pause(self, node_id: int) -> None:
        """SIGSTOP the node."""
        self.nodes[node_id].pause()

    def resume(self, node_id: int) -> None:
        """SIGCONT the node."""
        self.nodes[node_id].resume()

    def restart(self, node_id: int, *, kill: bool = False) -> None:
        self.nodes[node_id].restart(kill=kill)

    def terminate(self, node_id: int) -> int | None:
        """SIGTERM (clean shutdown) and wait; returns the exit code."""
        return self.nodes[node_id].stop(sig=signal.SIGTERM)

    # -- the controller quorum --------------------------------------------------------------
    def live_controllers(self) -> list[NodeProcess]:
        """The controllers that run and are not paused."""
        return [n for n in self.controllers if n.alive and not n.paused]

    async def aquorum(self, timeout_s: float = 5.0) -> QuorumInfo:
        """DescribeQuorum of the active controller, found among the live controllers
        (:func:`hightide.client.cluster.active_controller`). Raises KafkaError."""
        servers = [(n.spec.host, n.spec.port) for n in self.live_controllers()]
        conn, quorum = await active_controller(servers, timeout_s=timeout_s)
        await conn.close()
        return quorum

    def quorum(self, timeout_s: float = 5.0) -> QuorumInfo:
        return asyncio.run(self.aquorum(timeout_s))

    def quorum_leader(self, timeout_s: float = 30.0) -> int:
        """The node id of the active controller (waits for one)."""
        return self.wait_leader(timeout=timeout_s)

    def wait_leader(self, *, other_than: int | None = None, timeout: float = 30.0) -> int:
        """Wait until a live controller other than ``other_than`` leads the quorum and
        return its id."""
        def leader() -> int | None:
            q = self.quorum(timeout_s=2.0)
            ok = q.leader_id >= 0 and q.leader_id != other_than and self.nodes[q.leader_id].alive
            return q.leader_id if ok else None
        return int(self.wait_until(leader, timeout, what=f"a quorum leader other than {other_than}"))

    def admin(self, node_id: int | None = None, **kw: Any) -> AdminClient:
        """An AdminClient bootstrapped from one broker (default: all brokers); use with
        ``async with``."""
        kw.setdefault("request_timeout_s", 15.0)
        return AdminClient(self.address(node_id) if node_id is not None else self.bootstrap, **kw)

    def run(self, coro: Any) -> Any:
        """Run a coroutine to completion from a synchronous test."""
        return asyncio.run(coro)

    def logs(self, tail: int = 3000) -> str:
        """The last ``tail`` characters of every node's output, for assertion messages."""
        return "\n".join(f"===== {n.spec.name} (pid {n.pid}, rc {n.returncode})\n{n.output()[-tail:]}"
                         for n in self.nodes.values())


def describe_failure(harnesses: Iterable[ClusterHarness]) -> str:
    """Every node log of ``harnesses``, for a failed test's report."""
    return "\n".join(h.logs(int(os.environ.get("HIGHTIDE_CLUSTER_LOG_TAIL", "4000"))) for h in harnesses)
