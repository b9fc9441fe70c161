"""The simulated cluster: controllers and brokers, each a real :class:`~hightide.Broker`
(the production shell and cores above the seams) on its own
:class:`~hightide.log.storage_memory.MemoryStorage`, clock and node context, all on one
:class:`~.loop.SimLoop` and one :class:`~.network.SimNetwork`.

Node lifecycle as the fault schedule drives it:

- :meth:`World.start` formats the data dirs (``kafka-storage format``: one cluster id,
  the controllers' voter set) and starts every node;
- :meth:`World.kill` is ``kill -9``: the node's callbacks never run again
  (:meth:`SimLoop.kill`), its connections close (the kernel's doing), its storage loses
  what was not fsynced (:meth:`MemoryStorage.crash`), its data-dir lock is released;
- :meth:`World.restart` starts a new incarnation on the same storage;
- :meth:`World.pause` / :meth:`World.resume` are SIGSTOP / SIGCONT;
- :meth:`World.stop` is SIGTERM: the node's own ordered stop, whose duration is checked
  against its bound.

Each node's data dir is a path in its own MemoryStorage; the data-dir lock (an ``flock``
on the real file system) is taken in a real temporary directory of the same name.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import tempfile
from dataclasses import dataclass, field
from typing import Any

from ..config import BrokerConfig
from ..log.data_dir import format_dir, new_id, write_meta_properties
from ..log.storage_faulty import FaultyStorage
from ..log.storage_memory import MemoryStorage
from ..server.broker import Broker
from .clock import SimClock
from .loop import NODE, NodeRun, SimLoop
from .network import SimNetwork

log = logging.getLogger("hightide.sim")

CONTROLLER_BASE = 3000
BROKER_PORT, CONTROLLER_PORT = 9092, 9093
#: How long (simulated) a node may take to start listening, and to stop when asked.
START_BOUND_S = 30.0
STOP_BOUND_S = 60.0


class NodeHalted(BaseException):
    """Raised in a node that halts (see :meth:`World.halt`): unwinds its current callback."""


@dataclass(eq=False)
class SimNode:
    """One node of the simulated cluster (all its incarnations)."""

    node_id: int
    controller: bool
    settings: dict[str, Any]
    data_dir: str
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    #: The engine the node runs on: ``storage`` behind the fault injector (failing fsyncs).
    disk: FaultyStorage = field(init=False)
    #: Extra simulated seconds each of this node's disk jobs takes (a slow disk).
    disk_slow_s: float = 0.0
    clock: SimClock | None = None
    broker: Broker | None = None
    run: NodeRun | None = None
    incarnations: int = 0

    def __post_init__(self) -> None:
        self.disk = FaultyStorage(self.storage)

    @property
    def host(self) -> str:
        return f"n{self.node_id}"

    @property
    def port(self) -> int:
        return CONTROLLER_PORT if self.controller else BROKER_PORT

    @property
    def up(self) -> bool:
        return self.run is not None and self.run.state != "dead" and self.broker is not None

    def __repr__(self) -> str:
        return f"{'controller' if self.controller else 'broker'} {self.node_id}"


class World:
    """``controllers`` controllers and ``brokers`` brokers (see the module doc)."""

    def __init__(self, loop: SimLoop, rng: random.Random, *, controllers: int = 3, brokers: int = 3,
                 settings: dict[str, Any] | None = None) -> None:
        self.loop = loop
        self.rng = rng
        self.net = SimNetwork(loop, random.Random(rng.getrandbits(64)))
        loop.network = self.net
        self._disk_rng = random.Random(rng.getrandbits(64))
        loop.disk_delay = self._disk_delay
        self._tmp = tempfile.TemporaryDirectory(prefix="hightide-sim-")
        voters = ",".join(f"{CONTROLLER_BASE + i}@n{CONTROLLER_BASE + i}:{CONTROLLER_PORT}" for i in range(controllers))
        common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
                  "broker.heartbeat.interval.ms": 500, "broker.session.timeout.ms": 6000,
                  "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3,
                  "offsets.topic.replication.factor": min(3, brokers),
                  "transaction.state.log.replication.factor": min(3, brokers),
                  "default.replication.factor": min(3, brokers), "min.insync.replicas": min(2, brokers),
                  # followers leave the ISR within a fault's length (Kafka's default is 30 s)
                  "replica.lag.time.max.ms": 3000,
                  "log.cleaner.enable": False, **(settings or {})}
        self.nodes: dict[int, SimNode] = {}
        for i in range(controllers):
            nid = CONTROLLER_BASE + i
            self._add(nid, True, {**common, "process.roles": "controller",
                                  "listeners": f"CONTROLLER://n{nid}:{CONTROLLER_PORT}"})
        for nid in range(brokers):
            listener = f"PLAINTEXT://n{nid}:{BROKER_PORT}"
            self._add(nid, False, {**common, "process.roles": "broker", "listeners": listener,
                                   "advertised.listeners": listener})
        self.cluster_id = new_id()

    def _disk_delay(self) -> float:
        """How long one disk job (an fsync, a snapshot write) of the running node takes:
        0.1-3 ms, plus the node's slowness (see :attr:`SimNode.disk_slow_s`)."""
        run = NODE.get()
        node = self.nodes.get(run.node_id) if run is not None else None
        slow = node.disk_slow_s if node is not None else 0.0
        return self._disk_rng.uniform(0.0001, 0.003) + (self._disk_rng.uniform(0.5, 1.0) * slow if slow else 0.0)

    def halt(self, reason: str) -> None:
        """The running node halts (``hightide.aio.halt.halt_process``: Kafka's fatal fault
        handler): it is killed once the current callback has unwound (the crash then drops
        what the unwinding wrote to the page cache)."""
        run = NODE.get()
        node = self.nodes.get(run.node_id) if run is not None else None
        if node is None or node.run is not run:
            raise RuntimeError(f"halt outside a running node: {reason}")
        log.warning("node %d halts: %s", node.node_id, reason)
        self.loop.call_soon(self.kill, node, context=contextvars.Context())
        raise NodeHalted(reason)

    def _add(self, nid: int, controller: bool, settings: dict[str, Any]) -> None:
        data_dir = os.path.join(self._tmp.name, f"{'controller' if controller else 'broker'}-{nid}")
        self.nodes[nid] = SimNode(nid, controller, {"node.id": nid, **settings}, data_dir)

    @property
    def brokers(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if not n.controller]

    @property
    def controllers(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.controller]

    def active_controller(self) -> SimNode | None:
        """The controller whose Raft core leads now and runs (white-box), if any."""
        for node in self.controllers:
            runtime = getattr(node.broker, "metadata_runtime", None) if node.up else None
            if runtime is not None and node.run is not None and node.run.state == "running" \
                    and runtime.shell.core.role == "leader":
                return node
        return None

    @property
    def bootstrap(self) -> list[str]:
        return [f"{n.host}:{n.port}" for n in self.brokers]

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Format every data dir, then start every node (controllers first)."""
        voters = [n.node_id for n in self.controllers]
        for n in self.nodes.values():
            if n.controller:
                format_dir(n.data_dir, cluster_id=self.cluster_id, node_id=n.node_id, voters=voters,
                           storage=n.storage)
            else:
                write_meta_properties(n.data_dir, self.cluster_id, n.node_id, n.storage)
            n.storage.fsync_dir(n.data_dir)
        for n in self.controllers + self.brokers:
            await self.launch(n)

    async def launch(self, node: SimNode) -> None:
        """Start a new incarnation of ``node`` on its storage; returns once it listens.
        Raises TimeoutError if that takes longer than :data:`START_BOUND_S`."""
        os.makedirs(node.data_dir, exist_ok=True)
        run, ctx = self.loop.node_context(node.node_id)
        node.incarnations += 1
        node.run = run
        node.clock = node.clock or SimClock(self.loop)
        config = BrokerConfig.load(overrides=node.settings)
        broker = Broker(config, data_dir=node.data_dir, listen=(node.host, node.port), storage=node.disk,
                        clock=node.clock, transport=self.net)
        node.broker = broker
        task = self.loop.create_task(broker.start(), name=f"start {node}", context=ctx)
        async with asyncio.timeout(START_BOUND_S):
            await asyncio.shield(task)

    def kill(self, node: SimNode) -> None:
        """kill -9 (see the module doc)."""
        if node.run is None or node.run.state == "dead":
            return
        self.loop.kill(node.run)
        self.net.node_killed(node.run)
        node.storage.crash()
        node.disk.clear()  # a new process: the disk's next fault is the schedule's to set
        node.disk_slow_s = 0.0
        broker, node.broker = node.broker, None
        lock = getattr(broker, "_dir_lock", None)
        if lock is not None:
            lock.release()  # the kernel drops a dead process's flocks

    async def restart(self, node: SimNode) -> None:
        self.kill(node)
        await self.launch(node)

    def pause(self, node: SimNode) -> None:
        if node.run is not None:
            self.loop.pause(node.run)

    def resume(self, node: SimNode) -> None:
        if node.run is not None:
            self.loop.resume(node.run)

    async def stop(self, node: SimNode) -> float:
        """SIGTERM: the node's ordered stop, in its own context. Returns how long it took
        (simulated seconds); raises TimeoutError past :data:`STOP_BOUND_S`."""
        if not node.up or node.run is None or node.broker is None:
            return 0.0
        self.resume(node)
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, node.run)
        t0 = self.loop.time()
        task = self.loop.create_task(node.broker.stop(), name=f"stop {node}", context=ctx)
        async with asyncio.timeout(STOP_BOUND_S):
            await asyncio.shield(task)
        node.run.state = "dead"  # the process exits
        self.net.node_killed(node.run)
        node.broker = None
        return self.loop.time() - t0

    async def close(self) -> None:
        """Stop every node that is up (bounded each), then drop the temporary dirs."""
        for node in self.brokers + self.controllers:
            try:
                await self.stop(node)
            except (TimeoutError, Exception):  # noqa: BLE001 - closing: the run's verdict is already made
                self.kill(node)
        self._tmp.cleanup()
