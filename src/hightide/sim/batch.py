"""Many simulated runs at once, in worker processes: the CI budget
(tests/unit/test_sim_seeds.py), ``python -m hightide.sim --jobs N`` and
``bench/cluster_sim.py --jobs N``.

A :class:`Job` is one run's whole description (seed, fault phase, fault kinds, clients,
probes, planted bug, cluster size, the faults kept by shrinking); :meth:`Job.replay` is
the one-line command that replays it, and :meth:`Job.run` runs it in this process.

:func:`run_jobs` runs jobs in ``workers`` processes, each a fresh interpreter
(``spawn``) started with ``PYTHONHASHSEED`` fixed to the command line's
(:data:`HASH_SEED`): str hashes (set order) are part of a run's trace, so a job gives in
a worker exactly what its replay command gives, whatever hash seed the calling process
(pytest does not fix it) was started with. A worker reports an :class:`Outcome` (the
anomaly, the trace's tail, the numbers), never the whole trace.

:func:`ci_job` draws a short CI seed's fault mix and optional clients from the seed
(:data:`CI_MIXES`, :data:`CI_CLIENTS`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field

from .faults import FAULT_KINDS

__all__ = ["CI_CLIENTS", "CI_MIXES", "HASH_SEED", "Job", "Outcome", "ci_job", "run_jobs"]

#: The ``PYTHONHASHSEED`` every run is made with (the command line re-executes itself
#: with it; workers are started with it).
HASH_SEED = "0"
#: Lines of a failing run's trace an :class:`Outcome` keeps.
TRACE_TAIL = 40


@dataclass(frozen=True)
class Job:
    """One simulated run (see :func:`~.run.simulate` for the fields)."""

    seed: int
    duration_s: float = 30.0
    kinds: tuple[str, ...] = FAULT_KINDS
    clients: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    plant: str | None = None
    controllers: int = 3
    brokers: int = 3
    only: frozenset[int] | None = None
    #: The nodes' warnings in the trace (what ``--logs`` does; not part of the run).
    log_lines: bool = False

    def replay(self) -> str:
        """The one-line command that replays this run, trace and node logs printed."""
        extra = "" if self.duration_s == 30.0 else f" --duration {self.duration_s:g}"
        if self.kinds != FAULT_KINDS:
            extra += f" --faults {','.join(self.kinds)}"
        if self.plant:
            extra += f" --plant {self.plant}"
        if self.clients:
            extra += f" --clients {','.join(self.clients)}"
        if self.probes:
            extra += f" --probes {','.join(self.probes)}"
        if self.only is not None:
            extra += f" --only-faults {','.join(map(str, sorted(self.only))) or 'none'}"
        if (self.controllers, self.brokers) != (3, 3):
            extra += f" --controllers {self.controllers} --brokers {self.brokers}"
        return f"python -m hightide.sim --seed {self.seed}{extra} --trace --logs"

    def run(self) -> Outcome:
        """Run it here (in this process, with this process's hash seed)."""
        from .run import simulate
        cpu = time.process_time()
        r = simulate(self.seed, duration_s=self.duration_s, kinds=self.kinds, clients=self.clients,
                     probes=self.probes, plant=self.plant, controllers=self.controllers, brokers=self.brokers,
                     only=self.only, log_lines=self.log_lines)
        return Outcome(self, r.anomaly, r.trace[-TRACE_TAIL:] if r.anomaly else [], r.simulated_s, r.steps,
                       dict(r.faults), dict(r.counts), r.real_s, r.digest, os.environ.get("PYTHONHASHSEED"),
                       time.process_time() - cpu)


@dataclass
class Outcome:
    """What a run of ``job`` found (``trace``: the last lines of a failing run's trace;
    ``hash_seed``: the ``PYTHONHASHSEED`` of the process that ran it; ``real_s`` depends
    on the machine's load, ``cpu_s`` much less)."""

    job: Job
    anomaly: str | None
    trace: list[str]
    simulated_s: float
    steps: int
    faults: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    real_s: float = 0.0
    digest: str = ""
    hash_seed: str | None = None
    #: CPU seconds the run took (its process's; what it costs on a machine of its own).
    cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.anomaly is None

    @property
    def seed(self) -> int:
        return self.job.seed

    def report(self) -> str:
        """A failing run's anomaly, its replay command and its trace's tail (one string)."""
        return "\n".join([f"seed {self.job.seed}: {self.anomaly}", f"replay: {self.job.replay()}",
                          *("    " + line for line in self.trace)])


def _run(index: int, job: Job) -> tuple[int, Outcome]:
    """Run ``job`` in a worker. A run that raises (a defect of the simulator, not an
    anomaly of the cluster) is a failing outcome too, with the traceback as its trace."""
    try:
        return index, job.run()
    except Exception as exc:  # noqa: BLE001 - reported as the seed's failure, with its replay command
        lines = traceback.format_exception(exc)
        return index, Outcome(job, f"the simulator raised {exc!r}", "".join(lines).splitlines()[-TRACE_TAIL:],
                              0.0, 0, hash_seed=os.environ.get("PYTHONHASHSEED"))


@contextlib.contextmanager
def _hash_seed_env() -> Iterator[None]:
    """``PYTHONHASHSEED`` = :data:`HASH_SEED` in this process's environment while workers
    are started (a spawned worker inherits it), as it was afterwards."""
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = HASH_SEED
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = saved


def default_workers() -> int:
    """Worker processes by default: one per core."""
    return max(1, os.cpu_count() or 1)


def run_jobs(jobs: Iterable[Job], workers: int | None = None, *,
             skip: Callable[[Job], bool] | None = None,
             done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run ``jobs`` in ``workers`` processes (default: one per core), at most ``workers``
    at a time, started in the order given; return their outcomes in that order.
    ``skip(job)`` is asked just before a job would start (True: it is not run, e.g. a
    search that already found what it looked for); ``done(outcome)`` is told of each
    outcome as it arrives. A job that raises is a failing outcome (see :func:`_run`); a
    worker that dies (the pool broken) raises here, after the jobs in flight finished."""
    pending = list(jobs)
    workers = workers or default_workers()
    outcomes: dict[int, Outcome] = {}
    failure: BaseException | None = None
    with _hash_seed_env(), ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        running: set[Future[tuple[int, Outcome]]] = set()
        index = 0
        while True:
            while failure is None and index < len(pending) and len(running) < workers:
                if skip is None or not skip(pending[index]):
                    running.add(pool.submit(_run, index, pending[index]))
                index += 1
            if not running:
                break
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                exc = fut.exception()
                if exc is not None:
                    failure = failure or exc
                    continue
                i, outcome = fut.result()
                outcomes[i] = outcome
                if done is not None:
                    done(outcome)
    if failure is not None:
        raise failure
    return [outcomes[i] for i in sorted(outcomes)]


# --- the CI budget's short seeds -----------------------------------------------------------------
#: Fault mixes a short CI seed draws from: every default kind, the node faults alone,
#: the network faults alone, the disk faults with kills, and the kinds taken only when
#: named (a paused controller leader, a lost quorum, a broker cut off from its peers).
CI_MIXES: tuple[tuple[str, ...], ...] = (
    FAULT_KINDS,
    FAULT_KINDS,
    ("kill", "stop", "pause"),
    ("partition", "one-way", "sever", "slow", "clock"),
    ("kill", "slow-disk", "fsync-fail"),
    ("kill", "pause", "partition", "one-way", "split"),
    ("pause-leader", "kill", "partition"),
    ("quorum-loss", "pause", "one-way"),
)
#: Optional clients a short CI seed draws from (most seeds run none: they are the cheapest).
CI_CLIENTS: tuple[tuple[str, ...], ...] = (
    (), (), (), (), ("classic", "consumer"), ("txn",), ("share",), ("admin",),
)


def ci_job(seed: int, duration_s: float) -> Job:
    """A short CI seed: its fault mix and optional clients drawn from the seed."""
    rng = random.Random(seed * 7919 + 28)
    return Job(seed, duration_s, kinds=rng.choice(CI_MIXES), clients=rng.choice(CI_CLIENTS))
