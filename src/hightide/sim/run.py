"""One simulated run from a seed: :func:`simulate`.

Phases (all on simulated time): start the cluster (3 controllers, 3 brokers by default);
create the topic; start the clients (producers, a committer, a reader); run the fault
schedule for ``duration_s``; heal every fault; **liveness**: every producer and the
committer must acknowledge something new within ``liveness_s``; **final check**: every
partition read in full from its leader (no acknowledged record lost, changed, duplicated
or reordered), every group's committed offsets fetched (no acknowledged commit lost);
**shutdown**: every node stops within its bound.

Determinism: everything random comes from ``random.Random(seed)``; while the run goes
the process's ``uuid.uuid4``, ``random`` module functions and ``time.time`` /
``time.time_ns`` / ``time.monotonic`` are replaced by seeded / simulated ones (:func:`deterministic`), so two
runs of one seed give the same trace, byte for byte (within one Python build and with
the same ``PYTHONHASHSEED``: ``python -m hightide.sim`` fixes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import sys
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..aio import halt as _halt_module
from ..client import AdminClient, NewTopic
from ..client.errors import KafkaError
from .checker import Anomaly, Checker
from .client_set import ClientSet
from .clients import Committer, Producer, Reader, append_values
from .clock import EPOCH_MS
from .faults import FAULT_KINDS, FaultSchedule
from .forward_probe import ForwardProbe
from .loop import NODE, SimLoop, SimulationStuck
from .planted import planted
from .whitebox import MetadataWatch
from .txn_probe import TxnProbe
from .world import World

__all__ = ["RunResult", "simulate", "deterministic"]

TOPIC = "sim"
#: Optional clients (``probes=``): forwarded metadata writes (.forward_probe) and
#: transactional offset commits (.txn_probe).
PROBES = ("forward", "txn")
#: How long after healing the cluster has to settle before the quiet phase's checks.
QUIET_S = 5.0


@dataclass
class RunResult:
    seed: int
    anomaly: str | None
    trace: list[str]
    simulated_s: float
    steps: int
    faults: Counter[str] = field(default_factory=Counter)
    counts: dict[str, int] = field(default_factory=dict)
    real_s: float = 0.0
    #: Digest of every byte the network carried (with times and ends): the determinism check.
    digest: str = ""
    #: The indices of the seeded schedule's faults that were applied (see ``only``).
    applied: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.anomaly is None


@contextlib.contextmanager
def deterministic(seed: int, loop: SimLoop) -> Iterator[None]:
    """Seeded ``uuid.uuid4`` and ``random``, simulated ``time.time`` (see the module doc)."""
    rng = random.Random(seed ^ 0x5EED)
    saved_state = random.getstate()
    saved = (uuid.uuid4, time.time, time.time_ns, time.monotonic)
    random.seed(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    time.time = lambda: EPOCH_MS / 1000 + loop.time()
    time.time_ns = lambda: int((EPOCH_MS / 1000 + loop.time()) * 1e9)
    time.monotonic = loop.time  # a component on the system clock
    try:
        yield
    finally:
        uuid.uuid4, time.time, time.time_ns, time.monotonic = saved
        random.setstate(saved_state)


class _Trace(list[str]):
    """A trace that also hands each line to ``echo``."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        super().__init__()
        self.echo = echo

    def append(self, line: str) -> None:
        super().append(line)
        self.echo(line)


class _TraceLog(logging.Handler):
    """Node log lines (WARNING and up) into the trace, tagged with the node and time."""

    def __init__(self, loop: SimLoop, lines: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.loop, self.lines = loop, lines

    def emit(self, record: logging.LogRecord) -> None:
        run = NODE.get()
        who = f"node {run.node_id}#{run.incarnation}" if run is not None else "client"
        self.lines.append(f"[{self.loop.time() - 1000:9.3f}] {who} {record.levelname} {record.name}: "
                          f"{record.getMessage()}")


async def _create_topic(world: World, partitions: int, name: str = TOPIC) -> None:
    admin = AdminClient(world.bootstrap, client_id="sim-admin", request_timeout_s=10.0, transport=world.net)
    try:
        deadline = asyncio.get_running_loop().time() + 120
        while True:
            try:
                await admin.start()
                await admin.create_topics([NewTopic(name, partitions, min(3, len(world.brokers)))])
                return
            except KafkaError as exc:
                if exc.code == 36:  # TOPIC_ALREADY_EXISTS: an earlier attempt's answer was lost
                    return
                if asyncio.get_running_loop().time() > deadline:
                    raise Anomaly(f"the topic could not be created in 120 s: {exc}") from exc
                await asyncio.sleep(1.0)
    finally:
        await admin.close()


async def _run(seed: int, loop: SimLoop, trace: list[str], *, duration_s: float, liveness_s: float,
               controllers: int, brokers: int, partitions: int, producers: int,
               kinds: tuple[str, ...], fault_counts: Counter[str], client_kinds: tuple[str, ...] = (),
               probes: tuple[str, ...] = (), only: frozenset[int] | None = None,
               applied: list[int] | None = None) -> tuple[dict[str, int], str]:
    rng = random.Random(seed)

    def note(text: str) -> None:
        trace.append(f"[{loop.time() - 1000:9.3f}] {text}")

    world = World(loop, random.Random(rng.getrandbits(64)), controllers=controllers, brokers=brokers,
                  settings=ClientSet.settings(client_kinds))
    saved_halt = _halt_module.halt_process
    _halt_module.halt_process = world.halt  # type: ignore[assignment]  # a halting node is killed, not the process
    checker = Checker()
    watch = loop.step_hook = MetadataWatch(world)
    faults = FaultSchedule(world, random.Random(rng.getrandbits(64)), note, kinds=kinds, counts=fault_counts,
                           only=only, applied=applied if applied is not None else [])
    clients: list[Any] = []
    tasks: list[asyncio.Task[None]] = []
    extra = ClientSet(client_kinds, (TOPIC, partitions), world)
    try:
        await world.start()
        note("cluster started")
        await _create_topic(world, partitions)
        note(f"topic {TOPIC} created")
        for name, count in extra.topics():
            await _create_topic(world, count, name)
            note(f"topic {name} created")
        def base(name: str) -> tuple[Any, ...]:
            return name, world.bootstrap, world.net, checker, random.Random(rng.getrandbits(64)), note, loop.time
        for i in range(producers):
            clients.append(Producer(*base(f"p{i}"), topic=TOPIC, partitions=partitions))
        # three groups, one per __consumer_offsets partition (offsets.topic.num.partitions=3)
        committer = Committer(*base("c0"), groups=("g0", "g1", "g2"), topic=TOPIC, partitions=partitions)
        clients.append(committer)
        reader = Reader(*base("r0"), topic=TOPIC, partitions=partitions)
        clients.append(reader)
        clients += extra.make(base)
        healed: list[float] = []
        if "forward" in probes:
            clients.append(ForwardProbe("f0", world, faults, random.Random(rng.getrandbits(64)), note, loop.time))
        if "txn" in probes:
            clients.append(TxnProbe(*base("t0"), topic=TOPIC,
                                    quiet=lambda: bool(healed) and loop.time() >= healed[0] + QUIET_S))
        tasks = [asyncio.ensure_future(c.run()) for c in clients]
        fault_task = asyncio.ensure_future(faults.run(duration_s))
        while not fault_task.done():
            await asyncio.wait([fault_task, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for t in (fault_task, *tasks):
                if t.done() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        await faults.heal()
        if faults.failures:
            raise Anomaly("; ".join(faults.failures))
        healed_at = loop.time()
        healed.append(healed_at)
        note("liveness check")
        workers = [c for c in clients if not isinstance(c, Reader)]
        deadline = healed_at + liveness_s
        while any(c.progress_at <= healed_at for c in workers):
            for t in tasks:
                if t.done() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if loop.time() > deadline:
                stuck = ", ".join(c.name for c in workers if c.progress_at <= healed_at)
                raise Anomaly(f"liveness: {stuck} made no progress in {liveness_s:.0f} s after the faults stopped")
            await asyncio.sleep(0.5)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        tasks = []
        note("final check")
        final_deadline = loop.time() + liveness_s
        for part in range(partitions):
            # A new leader's high watermark may still be below what its predecessor
            # acknowledged (its followers have not fetched since): what counts is whether
            # every acknowledged record shows within the liveness bound.
            while True:
                try:
                    values, hw = await reader.read_all(part)
                except (KafkaError, OSError, TimeoutError) as exc:
                    if loop.time() > final_deadline:
                        raise Anomaly(f"final read of {TOPIC}-{part} failed: {exc}") from exc
                    await reader._failed(exc)
                    continue
                checker.read((TOPIC, part), 0, values, hw)
                lost = checker.lost_acked((TOPIC, part), hw)
                if not lost:
                    break
                if loop.time() > final_deadline:
                    raise Anomaly(f"{TOPIC}-{part}: acknowledged offsets {lost[:10]} lost (final end {hw})")
                await asyncio.sleep(0.5)
        await committer.final_check(final_deadline)
        await extra.final_check(final_deadline)
        await _replicas_agree(world, partitions, liveness_s)
        note("replicas agree")
        for c in clients:
            await c.close()
        for node in world.brokers + world.controllers:
            took = await world.stop(node)
            note(f"{node} stopped in {took:.2f}s")
        counts = dict(checker.counts)
        counts["white-box checks"] = watch.checks
        counts.update(extra.counts())
        counts.update({f"net {k}": v for k, v in world.net.stats.items()})
        return counts, world.net.digest.hexdigest()
    except TimeoutError as exc:
        raise Anomaly(f"a bound was exceeded: {exc!r}") from exc
    finally:
        for t in tasks:
            t.cancel()
        for c in clients:
            with contextlib.suppress(Exception):
                await c.close()
        loop.step_hook = None
        await world.close()
        _halt_module.halt_process = saved_halt


async def _replicas_agree(world: World, partitions: int, within_s: float) -> None:
    """White-box, after healing: every replica of each partition catches up with its
    leader (within ``within_s``) and then holds the same records as the leader below the
    leader's high watermark (replicas that diverged and were never reconciled differ)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    for part in range(partitions):
        while True:
            logs = {n.node_id: n.broker.hosted.partition_log(TOPIC, part) for n in world.brokers
                    if n.broker is not None and n.broker.logs is not None}
            image = next(n.broker.image for n in world.brokers if n.broker is not None)
            p_img = image.topics[TOPIC].partitions[part]
            leader = logs.get(p_img.leader)
            replicas = {r: logs.get(r) for r in p_img.replicas}
            if leader is not None and all(log is not None and log.log_end_offset >= leader.high_watermark
                                          for log in replicas.values()):
                break
            if loop.time() > deadline:
                behind = {r: None if log is None else log.log_end_offset for r, log in replicas.items()}
                raise Anomaly(f"{TOPIC}-{part}: replicas {behind} did not catch up with leader {p_img.leader} "
                              f"in {within_s:.0f} s after the faults stopped")
            await asyncio.sleep(0.5)
        end = leader.high_watermark
        want = _log_values(leader, end, f"{TOPIC}-{part} on leader {p_img.leader}")
        for r, log in replicas.items():
            assert log is not None
            got = _log_values(log, end, f"{TOPIC}-{part} on replica {r}")
            if got != want:
                at = next(i for i, (a, b) in enumerate(zip(got + [b"<end>"], want + [b"<end>"])) if a != b)
                raise Anomaly(f"{TOPIC}-{part}: replica {r} holds {got[at] if at < len(got) else None!r} at offset "
                              f"{at}, leader {p_img.leader} holds {want[at] if at < len(want) else None!r} "
                              f"(below the high watermark {end})")


def _log_values(log: Any, end: int, where: str) -> list[bytes]:
    values: list[bytes] = []
    while len(values) < end:
        before = len(values)
        got = log.read(len(values), 1 << 20, max_offset=end)
        append_values(values, bytes(got.data), end, where)
        if len(values) == before:
            raise Anomaly(f"{where}: no record at offset {before} below {end}")
    return values


def _bury(loop: SimLoop) -> None:
    """Close the loop after a run: the coroutines of tasks that never finished (killed
    nodes' zombies, timers of nodes that were up at the end) are closed first, while the
    loop is open, so their ``finally`` blocks (run now, after the verdict) do not fail
    on a closed loop later when garbage collection reaches them. What they raise or warn
    then is dropped."""
    saved_hook = sys.unraisablehook
    sys.unraisablehook = lambda _unraisable: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "coroutine ... was never awaited"
            for task in asyncio.all_tasks(loop):
                with contextlib.suppress(BaseException):
                    task.get_coro().close()
            loop.zombies.clear()
            loop.close()
            gc.collect()
    finally:
        sys.unraisablehook = saved_hook


def simulate(seed: int, *, duration_s: float = 30.0, liveness_s: float = 60.0, controllers: int = 3,
             brokers: int = 3, partitions: int = 3, producers: int = 2,
             kinds: tuple[str, ...] = FAULT_KINDS, log_lines: bool = False,
             echo: Callable[[str], None] | None = None, plant: str | None = None,
             clients: tuple[str, ...] = (), probes: tuple[str, ...] = (),
             only: frozenset[int] | None = None) -> RunResult:
    """Run seed ``seed`` (see the module doc). Never raises for an anomaly: the result
    carries it. ``log_lines``: the nodes' WARNING+ log lines go into the trace too;
    ``echo`` gets each trace line as it is written (progress of a long run); ``plant``
    names a deliberately broken variant (:mod:`.planted`, :mod:`.regressions`) to run
    instead of the real code; ``probes`` adds optional clients (:data:`PROBES`); ``only``:
    the indices of the seeded schedule's faults to apply (None: all; see :mod:`.shrink`);
    ``clients`` names the optional clients to run too (:mod:`.client_set`)."""
    loop = SimLoop(disk_delay=None)
    loop.set_exception_handler(lambda _loop, _ctx: None)  # zombie tasks of killed nodes
    trace: list[str] = _Trace(echo) if echo is not None else []
    handler = _TraceLog(loop, trace)
    hightide_log = logging.getLogger("hightide")
    saved_level, saved_propagate = hightide_log.level, hightide_log.propagate
    handler_used: logging.Handler = handler if log_lines else logging.NullHandler()
    hightide_log.addHandler(handler_used)
    hightide_log.setLevel(logging.WARNING)
    hightide_log.propagate = False
    started = time.monotonic()
    anomaly: str | None = None
    faults: Counter[str] = Counter()
    counts: dict[str, int] = {}
    digest = ""
    applied: list[int] = []
    with deterministic(seed, loop), planted(plant):
        try:
            counts, digest = loop.run_until_complete(_run(
                seed, loop, trace, duration_s=duration_s, liveness_s=liveness_s, controllers=controllers,
                brokers=brokers, partitions=partitions, producers=producers, kinds=kinds, fault_counts=faults,
                client_kinds=clients, probes=probes, only=only, applied=applied))
        except Anomaly as exc:
            anomaly = str(exc)
        except SimulationStuck as exc:
            anomaly = f"deadlock: {exc}"
        finally:
            simulated = loop.time() - 1000
            steps = loop.steps
            hightide_log.removeHandler(handler_used)
            hightide_log.setLevel(saved_level)
            hightide_log.propagate = saved_propagate
            _bury(loop)
    if anomaly is not None:
        trace.append(f"[{simulated:9.3f}] ANOMALY {anomaly}")
    return RunResult(seed, anomaly, trace, simulated, steps, faults, counts, time.monotonic() - started, digest,
                     applied)
