"""A local cluster on loopback: one controller and N brokers as ``hightide serve`` processes.

Used by ``hightide dev-cluster``, the multi-process tests (tests/cluster/harness.py) and
the cluster benchmarks. Theory of operation:

1. :func:`plan` lays the cluster out without starting anything: node ids (brokers
   ``0..N-1``, controllers from 3000 as Kafka's test kit numbers them), one loopback port
   per node (free ports, or consecutive ones from a base port: brokers first), one data
   dir per node under a base dir, and the ``--set`` values each node gets
   (:meth:`NodeSpec.command` builds the command line). A broker's controller address can
   be redirected (:meth:`DevCluster.route_via`), e.g. through a fault-injecting proxy.
2. :class:`DevCluster` starts the nodes (controllers first), each a child process whose
   output goes to ``<base>/logs/<name>.log``; :meth:`NodeProcess.wait_listening` fails
   fast with the node's last output line when a node exits during start-up (port in use,
   data dir locked, bad config). Children get SIGKILL if this process dies
   (``PR_SET_PDEATHSIG`` on Linux, for nodes started from the main thread), and
   :meth:`DevCluster.close` (also run by ``with`` and at interpreter exit) stops
   whatever is still running, so nothing leaks.
3. Broker states come from DescribeCluster (v2, fenced brokers included) asked of the
   brokers themselves: :meth:`DevCluster.states` and :meth:`DevCluster.wait_unfenced`.

Pure data and process control; no hightide server code is imported.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CONTROLLER_ID_BASE", "DevCluster", "LayoutMismatch", "NodeFailed", "NodeProcess", "NodeSpec",
           "StatusPoller", "free_ports", "plan",
           "single_node"]

CONTROLLER_ID_BASE = 3000
"""The first controller's node.id (brokers are 0..N-1), as Kafka's KafkaClusterTestKit."""
CONTROLLER_LISTENER = "CONTROLLER"
BROKER_LISTENER = "PLAINTEXT"
HOST = "127.0.0.1"


class NodeFailed(RuntimeError):
    """A node exited or did not come up in time; the message ends with its last output."""


def free_ports(n: int, host: str = HOST) -> list[int]:
    """``n`` distinct ports that were free on ``host`` a moment ago (all bound at once, so
    they differ, then released: another process may still take one in between)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_in_use(port: int, host: str = HOST) -> bool:
    """True if ``host:port`` cannot be bound now (another process listens there)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class NodeSpec:
    """One node of the layout: what ``hightide serve`` is started with.

    ``settings`` are the ``--set NAME=VALUE`` pairs (Kafka config names); ``port`` is the
    node's one listener (PLAINTEXT for a broker, CONTROLLER for a controller)."""

    node_id: int
    roles: tuple[str, ...]
    data_dir: Path
    port: int
    host: str = HOST
    settings: dict[str, str] = field(default_factory=dict)
    log_level: str = "INFO"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def name(self) -> str:
        if self.is_broker and self.is_controller:
            return f"single-{self.node_id}"
        return f"{'broker' if self.is_broker else 'controller'}-{self.node_id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self, python: str = sys.executable) -> list[str]:
        """The argv that runs this node: ``python -m hightide serve --data-dir ...
        --node-id N --set name=value ...`` (settings in a stable order)."""
        argv = [python, "-m", "hightide", "serve", "--data-dir", str(self.data_dir),
                "--node-id", str(self.node_id), "--log-level", self.log_level]
        if self.is_broker and self.is_controller:  # the single-node combined mode listens on --listen
            argv += ["--listen", self.address]
        for name in sorted(self.settings):
            argv += ["--set", f"{name}={self.settings[name]}"]
        return argv


def plan(n_brokers: int, base_dir: str | os.PathLike[str], *, n_controllers: int = 1,
         base_port: int | None = None, host: str = HOST, heartbeat_interval_ms: int | None = None,
         session_timeout_ms: int | None = None, read_consistency: str | None = None,
         settings: Mapping[str, Any] | None = None, log_level: str = "INFO",
         dynamic_voters: bool = False) -> list[NodeSpec]:
    """The layout of a cluster of ``n_controllers`` controllers and ``n_brokers`` brokers.

    Ports: ``base_port`` given → brokers ``base_port .. base_port+N-1`` then the
    controllers; None → free ports. Data dirs: ``<base_dir>/broker-<id>`` and
    ``<base_dir>/controller-<id>``. ``settings`` (Kafka names, any value ``str()``-able)
    are added to every node after the layout's own, so they may override them.
    ``dynamic_voters``: a dynamic quorum (KIP-853): every node finds the controllers
    through ``controller.quorum.bootstrap.servers`` instead of static
    ``controller.quorum.voters``, and :func:`format_dirs` formats the controllers with
    their initial voter set (``--initial-controllers``).
    Raises ValueError on a count below 1 (brokers: 0 allowed) or a port past 65535."""
    if n_controllers < 1 or n_brokers < 0:
        raise ValueError("a cluster needs at least one controller and zero or more brokers")
    count = n_brokers + n_controllers
    ports = list(range(base_port, base_port + count)) if base_port else free_ports(count, host)
    if ports[-1] > 65535:
        raise ValueError(f"ports {ports[0]}..{ports[-1]} run past 65535")
    base = Path(base_dir)
    controllers = [(CONTROLLER_ID_BASE + i, ports[n_brokers + i]) for i in range(n_controllers)]
    voters = ",".join(f"{cid}@{host}:{port}" for cid, port in controllers)
    common = {"controller.quorum.voters": voters, "controller.listener.names": CONTROLLER_LISTENER}
    if dynamic_voters:
        common = {"controller.quorum.bootstrap.servers": ",".join(f"{host}:{port}" for _, port in controllers),
                  "controller.listener.names": CONTROLLER_LISTENER}
    for name, value in (("broker.heartbeat.interval.ms", heartbeat_interval_ms),
                        ("broker.session.timeout.ms", session_timeout_ms),
                        ("metadata.read.consistency", read_consistency)):
        if value is not None:
            common[name] = str(value)
    extra = {k: _setting(v) for k, v in (settings or {}).items()}
    specs = []
    for cid, port in controllers:
        own = {"process.roles": "controller", "listeners": f"{CONTROLLER_LISTENER}://{host}:{port}"}
        specs.append(NodeSpec(cid, ("controller",), base / f"controller-{cid}", port, host,
                              {**common, **own, **extra}, log_level))
    for bid in range(n_brokers):
        port = ports[bid]
        listener = f"{BROKER_LISTENER}://{host}:{port}"
        own = {"process.roles": "broker", "listeners": listener, "advertised.listeners": listener}
        specs.append(NodeSpec(bid, ("broker",), base / f"broker-{bid}", port, host,
                              {**common, **own, **extra}, log_level))
    return specs


def single_node(base_dir: str | os.PathLike[str], *, port: int | None = None, host: str = HOST,
                settings: Mapping[str, Any] | None = None, node_id: int = 1) -> NodeSpec:
    """Today's single combined node (broker and controller in one process, the default
    ``process.roles``) as a :class:`NodeSpec`: data in ``<base_dir>/single-<id>``, its
    one listener on ``port`` (None: a free port). Run it with :class:`NodeProcess`."""
    return NodeSpec(node_id, ("broker", "controller"), Path(base_dir) / f"single-{node_id}",
                    port or free_ports(1, host)[0], host, {k: _setting(v) for k, v in (settings or {}).items()})


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


class LayoutMismatch(NodeFailed):
    """The data dirs hold a cluster with other controllers (voters) than the layout asks
    for: nothing is started (one line naming both)."""


def _ids(ids: Iterable[int]) -> str:
    return ",".join(map(str, sorted(ids)))


def inspect_dirs(specs: Iterable[NodeSpec]) -> tuple[str | None, list[str]]:
    """What :func:`format_dirs` will do with the layout's data dirs, without writing:
    (the cluster id they hold, or None for new dirs; one line per thing it will do).
    Raises :class:`LayoutMismatch` when the dirs belong to other controllers (a voter
    set other than the layout's, several cluster ids, or brokers' data without any
    controller dir)."""
    from .log.data_dir import read_meta_properties, recorded_voters
    specs = list(specs)
    base = specs[0].data_dir.parent if specs else Path(".")
    props = {s.node_id: read_meta_properties(str(s.data_dir)) for s in specs}
    have = {nid: p["cluster.id"] for nid, p in props.items() if p.get("cluster.id")}
    if not have:
        return None, [f"formatting new data dirs under {base}"]
    ids = sorted(set(have.values()))
    if len(ids) > 1:
        raise LayoutMismatch(f"the data dirs under {base} belong to {len(ids)} clusters ({', '.join(ids)}): "
                             "refusing to start (use another --data-dir)")
    cid = ids[0]
    wanted = [s.node_id for s in specs if s.is_controller]
    recorded = {s.node_id: recorded_voters(str(s.data_dir), s.node_id)[0] for s in specs
                if s.is_controller and s.node_id in have}
    for nid, voters in recorded.items():
        if voters is not None and sorted(voters) != sorted(wanted):
            raise LayoutMismatch(f"{base} holds cluster {cid} with controllers {_ids(voters)}; asked for "
                                 f"controllers {_ids(wanted)}: refusing to start (use --controllers {len(voters)}, "
                                 "or another --data-dir)")
    if not recorded:
        raise LayoutMismatch(f"{base} holds brokers of cluster {cid} but no controller data dir: refusing to start "
                             "(a new controller would start an empty metadata log; use another --data-dir)")
    lines = [f"reusing the data dirs under {base} (cluster {cid})"]
    for s in specs:
        if s.node_id in have:
            continue
        if s.is_controller:
            lines.append(f"  {s.name}: new data dir; it votes once it follows a leader the other voters elect")
        else:
            lines.append(f"  {s.name}: new data dir (a new broker)")
    return cid, lines


def format_dirs(specs: Iterable[NodeSpec], cluster_id: str | None = None) -> str:
    """Give every node's data dir the same cluster id (Kafka's ``kafka-storage format``):
    new dirs get ``meta.properties`` and each controller the voter set (its quorum-state,
    see :mod:`hightide.log.data_dir`), all formatted together. Existing dirs are reused
    as they are (a restarted dev cluster keeps its id); a dir missing from an existing
    cluster gets only ``meta.properties`` (a wiped controller votes again once it has
    followed a leader). Returns the cluster id. Raises :class:`LayoutMismatch` (see
    :func:`inspect_dirs`) before writing anything."""
    from .log.data_dir import format_dir, new_id, write_meta_properties
    specs = list(specs)
    found, _ = inspect_dirs(specs)
    cid = found or cluster_id or new_id()
    voters = [s.node_id for s in specs if s.is_controller]
    dynamic = [s for s in specs if is_dynamic_controller(s)]
    directories = {s.node_id: new_id() for s in dynamic}
    bootstrap = dynamic_bootstrap(dynamic, directories) if dynamic else None
    for spec in specs:
        if (spec.data_dir / "meta.properties").exists():
            continue
        if found is None and spec in dynamic:  # --initial-controllers: every controller of the layout
            format_dir(str(spec.data_dir), cluster_id=cid, node_id=spec.node_id, dynamic=True, bootstrap=bootstrap,
                       directory_id=directories[spec.node_id])
        elif found is None:  # a new cluster: every dir formatted together, controllers with their voter set
            format_dir(str(spec.data_dir), cluster_id=cid, node_id=spec.node_id,
                       voters=voters if spec.is_controller else None)
        elif spec in dynamic:  # --no-initial-controllers: it joins as an observer (add-controller)
            format_dir(str(spec.data_dir), cluster_id=cid, node_id=spec.node_id, dynamic=True)
        else:
            write_meta_properties(str(spec.data_dir), cid, spec.node_id)
    return cid


def is_dynamic_controller(spec: NodeSpec) -> bool:
    """A controller of a dynamic quorum (bootstrap servers, no static voters)."""
    return (spec.is_controller and not spec.is_broker and "controller.quorum.voters" not in spec.settings
            and bool(spec.settings.get("controller.quorum.bootstrap.servers")))


def dynamic_bootstrap(controllers: Iterable[NodeSpec], directories: Mapping[int, str]) -> bytes:
    """The bootstrap checkpoint of a dynamic quorum whose initial voters are
    ``controllers`` (``format --initial-controllers``)."""
    import time
    from .cluster.raft import VoterNode, VoterSet
    from .cluster.snapshot import encode_bootstrap_snapshot
    voters = VoterSet.of(VoterNode(s.node_id, directories[s.node_id], ((CONTROLLER_LISTENER, s.host, s.port),))
                         for s in controllers)
    return encode_bootstrap_snapshot(voters, int(time.time() * 1000))


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux/glibc: close() and atexit still stop children
        pass


def _die_with_parent_preexec() -> Callable[[], None] | None:
    """``_die_with_parent`` on Linux when called from the main thread, else None: Linux
    delivers PR_SET_PDEATHSIG when the *thread* that forked the child exits, so a node
    started from a worker thread (a test's fault injector) would be SIGKILLed when that
    thread ends. Such nodes are stopped by :meth:`DevCluster.close` and at exit instead."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    return _die_with_parent


class NodeProcess:
    """One node's ``hightide serve`` child process (start, stop, kill, pause, restart)."""

    def __init__(self, spec: NodeSpec, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.log_path = log_path
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0

    def __repr__(self) -> str:
        return f"NodeProcess({self.spec.name} {self.spec.address} pid={self.pid})"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def start(self) -> NodeProcess:
        """Start the process (no wait). Raises RuntimeError if it is already running."""
        if self.alive:
            raise RuntimeError(f"{self.spec.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts + 1}: {' '.join(self.spec.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.spec.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                                         preexec_fn=_die_with_parent_preexec())
        self.paused = False
        self.starts += 1
        return self

    def wait_listening(self, timeout: float = 30.0) -> None:
        """Return once the node accepts TCP connections on its port. Raises
        :class:`NodeFailed` (with its last output line) if it exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive:
                raise NodeFailed(f"{self.spec.name} exited with {self.returncode}: {self.last_line()}")
            try:
                with socket.create_connection((self.spec.host, self.spec.port), timeout=0.2):
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise NodeFailed(f"{self.spec.name} did not listen on {self.spec.address} within "
                                 f"{timeout:g} s: {self.last_line()}")
            time.sleep(0.05)

    def output(self) -> str:
        """Everything the node wrote (all its starts), or '' if there is no log yet."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def last_line(self) -> str:
        """The node's last non-empty output line that is not a traceback frame."""
        lines = [x.strip() for x in self.output().splitlines() if x.strip() and not x.startswith(" ")]
        return lines[-1] if lines else "(no output)"

    def send(self, sig: int) -> None:
        """Send ``sig`` if the process is running."""
        if self.alive and self.proc is not None:
            self.proc.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP: the process stays, silent (no heartbeats, no answers)."""
        self.send(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self.send(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 20.0, sig: int = signal.SIGTERM) -> int | None:
        """Ask the node to stop (``sig``, SIGTERM: a clean shutdown) and wait; SIGKILL
        after ``timeout``. Returns the exit code (None if it never ran)."""
        if self.proc is None:
            return None
        if self.alive:
            if self.paused:
                self.resume()
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (a crash: no clean shutdown) and reap. Returns the exit code."""
        return self.stop(timeout=10.0, sig=signal.SIGKILL)

    def restart(self, *, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop (or kill) the node, start it again with the same layout and wait until
        it listens."""
        self.kill() if kill else self.stop()
        self.start().wait_listening(timeout)


_LIVE: weakref.WeakSet[DevCluster] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for cluster in list(_LIVE):
        cluster.close(timeout=5.0)


class DevCluster:
    """Controllers and brokers of one :func:`plan` layout as child processes.

    ``with DevCluster(specs, base_dir) as c: c.start()`` — leaving the block (or the
    interpreter) stops every node; a node still running after ``close``'s timeout is
    killed. Not thread-safe; call from one thread."""

    def __init__(self, specs: Iterable[NodeSpec], base_dir: str | os.PathLike[str],
                 env: Mapping[str, str] | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.nodes: dict[int, NodeProcess] = {
            s.node_id: NodeProcess(s, self.base_dir / "logs" / f"{s.name}.log", env) for s in specs}
        self.cluster_id: str | None = None
        _LIVE.add(self)

    @classmethod
    def create(cls, n_brokers: int, base_dir: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
               **layout: Any) -> DevCluster:
        """:func:`plan` ``(n_brokers, base_dir, **layout)`` as a DevCluster (not started)."""
        return cls(plan(n_brokers, base_dir, **layout), base_dir, env)

    def __enter__(self) -> DevCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the layout ----------------------------------------------------------------------
    @property
    def brokers(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.spec.is_broker]

    @property
    def controllers(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.spec.is_controller]

    @property
    def broker_ids(self) -> list[int]:
        return [n.spec.node_id for n in self.brokers]

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of every broker (for ``--bootstrap-server``)."""
        return ",".join(n.spec.address for n in self.brokers)

    @property
    def bootstrap_controller(self) -> str:
        """``host:port,...`` of every controller (for ``--bootstrap-controller``)."""
        return ",".join(n.spec.address for n in self.controllers)

    def route_via(self, broker_id: int, host: str, port: int) -> None:
        """Make broker ``broker_id`` reach the controller at ``host:port`` (a proxy)
        instead of its real address. Takes effect at the broker's next (re)start."""
        spec = self.nodes[broker_id].spec
        ctrl = self.controllers[0].spec
        spec.settings["controller.quorum.voters"] = f"{ctrl.node_id}@{host}:{port}"

    # -- running -------------------------------------------------------------------------
    def check_ports(self) -> None:
        """Raise :class:`NodeFailed` naming the first layout port another process holds."""
        for node in self.nodes.values():
            if not node.alive and port_in_use(node.spec.port, node.spec.host):
                raise NodeFailed(f"cannot listen on {node.spec.address} ({node.spec.name}): address already "
                                 "in use (choose another --base-port)")

    def start(self, *, wait_unfenced: bool = True, timeout: float = 60.0) -> DevCluster:
        """Format the data dirs, start the controllers, then the brokers, and wait until
        each listens (and, with ``wait_unfenced``, until every broker is unfenced). On any
        failure every node is stopped and :class:`NodeFailed` raised."""
        try:
            self.check_ports()
            self.cluster_id = format_dirs(n.spec for n in self.nodes.values())
            for group in (self.controllers, self.brokers):
                for node in group:
                    node.start()
                for node in group:
                    node.wait_listening(timeout)
            if wait_unfenced:
                self.wait_unfenced(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> dict[int, int | None]:
        """Clean stop: brokers first (controlled shutdown needs the controller), then the
        controllers. Returns each node's exit code."""
        codes = {n.spec.node_id: n.stop(timeout) for n in self.brokers}
        codes.update({n.spec.node_id: n.stop(timeout) for n in self.controllers})
        return codes

    def close(self, timeout: float = 20.0) -> None:
        """Stop every node that still runs; idempotent and never raises for a node."""
        for group in (self.brokers, self.controllers):
            for node in group:
                try:
                    node.stop(timeout)
                except Exception:  # noqa: BLE001 - keep stopping the others
                    if node.proc is not None and node.alive:
                        node.proc.kill()
        _LIVE.discard(self)

    # -- observing -----------------------------------------------------------------------
    async def describe_broker(self, bid: int, timeout_s: float = 2.0) -> dict[int, str] | None:
        """Broker ``bid``'s view (``{broker id: "fenced" | "unfenced"}``, from its
        DescribeCluster v2 with fenced brokers), or None when it does not answer within
        ``timeout_s`` (connecting and asking each)."""
        from .client.cluster import connect_any, describe_cluster
        spec = self.nodes[bid].spec
        try:
            conn = await connect_any([(spec.host, spec.port)], timeout_s=timeout_s)
        except Exception:  # noqa: BLE001 - not up (yet): no view
            return None
        try:
            desc = await describe_cluster(conn, include_fenced=True)
        except Exception:  # noqa: BLE001 - no answer is no view
            return None
        finally:
            await conn.close()
        return {b.node_id: "fenced" if b.fenced else "unfenced" for b in desc.brokers}

    async def astates(self, ask: Iterable[int] | None = None) -> dict[int, dict[int, str]]:
        """Each asked broker's view (default: every running broker): ``{asking id:
        {broker id: "fenced" | "unfenced"}}``. A broker that does not answer is left out;
        below DescribeCluster v2 only unfenced brokers are listed."""
        ids = list(ask) if ask is not None else [n.spec.node_id for n in self.brokers if n.alive and not n.paused]
        got = await asyncio.gather(*(self.describe_broker(b) for b in ids))
        return {b: v for b, v in zip(ids, got) if v is not None}

    def states(self, ask: Iterable[int] | None = None) -> dict[int, dict[int, str]]:
        """:meth:`astates` from synchronous code (not inside a running event loop)."""
        return asyncio.run(self.astates(ask))

    def wait_until(self, cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
                   interval: float = 0.1) -> Any:
        """Poll ``cond`` until truthy and return its value; raise :class:`NodeFailed`
        (naming ``what``, the last value and any node that exited) after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = cond()
                if last:
                    return last
            except Exception as exc:  # noqa: BLE001 - reported below
                last = exc
            if time.monotonic() >= deadline:
                dead = [f"{n.spec.name} exited {n.returncode}: {n.last_line()}"
                        for n in self.nodes.values() if n.proc is not None and not n.alive]
                raise NodeFailed(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}"
                                 + "".join(f"\n  {d}" for d in dead))
            time.sleep(interval)

    def unfenced_everywhere(self, ids: Iterable[int] | None = None) -> bool:
        """True when every running broker answers DescribeCluster and lists every broker
        of ``ids`` (default: the running ones) as unfenced."""
        running = [n.spec.node_id for n in self.brokers if n.alive and not n.paused]
        want = set(ids) if ids is not None else set(running)
        views = self.states(running)
        return len(views) == len(running) and all(
            all(view.get(b) == "unfenced" for b in want) for view in views.values())

    def wait_unfenced(self, ids: Iterable[int] | None = None, timeout: float = 60.0) -> None:
        """Wait until :meth:`unfenced_everywhere` (``ids``). Raises :class:`NodeFailed`."""
        ids = list(ids) if ids is not None else None
        self.wait_until(lambda: self.unfenced_everywhere(ids), timeout,
                        what=f"brokers {ids if ids is not None else self.broker_ids} unfenced on every broker")

    def wait_fenced(self, broker_id: int, timeout: float = 30.0) -> None:
        """Wait until some running broker lists ``broker_id`` as fenced or not at all."""
        def fenced() -> bool:
            views = self.states([n.spec.node_id for n in self.brokers
                                 if n.alive and not n.paused and n.spec.node_id != broker_id])
            return bool(views) and all(v.get(broker_id) != "unfenced" for v in views.values())
        self.wait_until(fenced, timeout, what=f"broker {broker_id} fenced")


class StatusPoller:
    """Polls every broker's view on its own (``dev-cluster``'s status lines).

    ``describe(bid, timeout_s)`` asks one broker (:meth:`DevCluster.describe_broker`).
    Each :meth:`poll` starts a request to every listed broker that has none in flight and
    waits at most ``wait_s`` for answers; a broker's request has its own deadline
    (``timeout_s``, above the brokers' ``metadata.read.max.wait.ms`` of 2 s, which a
    DescribeCluster may be held for while another broker is paused), so a slow or silent
    broker never hides the others' views: a broker whose request is still out keeps its
    last view. A broker whose request failed, or has been out longer than ``silent_s``,
    is *not answering* (SIGSTOPped, stuck).
    """

    def __init__(self, describe: Callable[[int, float], Any], *, timeout_s: float = 10.0,
                 silent_s: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._describe = describe
        self.timeout_s = timeout_s
        self.silent_s = silent_s
        self._clock = clock
        self._inflight: dict[int, tuple[asyncio.Task[Any], float]] = {}
        self.views: dict[int, dict[int, str]] = {}
        self._failed: set[int] = set()

    async def poll(self, ids: Iterable[int], wait_s: float = 0.5) -> tuple[dict[int, dict[int, str]], set[int]]:
        """(the latest view of each answering broker of ``ids``, the brokers of ``ids``
        not answering). Brokers not in ``ids`` are forgotten (their requests cancelled)."""
        ids = list(ids)
        for bid in [b for b in self._inflight if b not in ids]:
            self._inflight.pop(bid)[0].cancel()
        for bid in [b for b in self.views if b not in ids]:
            del self.views[bid]
        self._failed &= set(ids)
        now = self._clock()
        for bid in ids:
            if bid not in self._inflight:
                task = asyncio.ensure_future(self._describe(bid, self.timeout_s))
                self._inflight[bid] = (task, now)
        pending = [t for t, _ in self._inflight.values() if not t.done()]
        if pending and wait_s > 0:
            await asyncio.wait(pending, timeout=wait_s)
        for bid, (task, _) in list(self._inflight.items()):
            if not task.done():
                continue
            del self._inflight[bid]
            view = None if task.cancelled() or task.exception() is not None else task.result()
            if view is None:
                self._failed.add(bid)
                self.views.pop(bid, None)
            else:
                self._failed.discard(bid)
                self.views[bid] = view
        now = self._clock()
        silent = {bid for bid, (_, since) in self._inflight.items() if now - since >= self.silent_s}
        silent |= self._failed
        return {b: v for b, v in self.views.items() if b not in silent}, silent

    def close(self) -> None:
        """Cancel the requests still out."""
        for task, _ in self._inflight.values():
            task.cancel()
        self._inflight.clear()
