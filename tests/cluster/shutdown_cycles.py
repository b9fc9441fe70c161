"""SIGTERM brokers during metadata churn, again and again (issue 26 item 3).

A broker SIGTERMed after metadata churn sometimes never exited (the metadata follower's
fetch loop swallowed its cancellation in ``asyncio.wait_for``, and the stop waited for it
without limit), and one died of a ``CancelledError`` inside ``Broker.stop``. Each cycle
here: topics are created and deleted (RF 3, several rounds) and, while more churn is in
flight, one broker (round robin) gets SIGTERM; it must exit with code 0 within
:data:`EXIT_BOUND_S`, log ``stopped cleanly`` and no traceback; then it is restarted and
the cluster waits until it is unfenced again.

Used by ``tests/cluster/test_shutdown.py`` (a short run in CI) and
``bench/shutdown_cycles.py`` (20 cycles, JSON).
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from hightide.client import NewTopic

from .harness import ClusterHarness

#: A SIGTERMed broker must have exited by then (its controlled shutdown is bounded by the
#: session timeout, 3 s here; each later step by 5 s; a normal stop takes well under 5 s).
EXIT_BOUND_S = 30.0


@dataclass
class Stop:
    """One SIGTERM: which broker, how long until it exited (None: it had not within the
    bound and was killed), its exit code, and what its log says about the stop."""

    cycle: int
    node_id: int
    exit_s: float | None
    returncode: int | None
    stopped_cleanly: bool
    traceback: bool
    #: the broker's log lines about its stop steps (failed, overran, or slow: "took N s")
    step_lines: list[str] = field(default_factory=list)
    #: "shutdown requested" -> "stopped" by the broker's own log (the rest of ``exit_s`` is
    #: signal delivery and the interpreter's exit)
    logged_stop_s: float | None = None

    @property
    def ok(self) -> bool:
        return (self.exit_s is not None and self.returncode == 0 and self.stopped_cleanly
                and not self.traceback)


async def _churn_round(c: ClusterHarness, prefix: str, topics: int) -> None:
    async with c.admin(request_timeout_s=10.0) as admin:
        names = [f"{prefix}-{i}" for i in range(topics)]
        await admin.create_topics([NewTopic(n, 3, 3) for n in names], timeout_s=10, raise_on_error=False)
        await admin.delete_topics(names[: topics // 2], timeout_s=10, raise_on_error=False)


def churn(c: ClusterHarness, cycle: int, rounds: int = 3, topics: int = 4) -> None:
    """``rounds`` of: create ``topics`` topics (3 partitions, RF 3), delete half of them."""
    for r in range(rounds):
        c.run(_churn_round(c, f"churn-{cycle}-{r}", topics))


class _Background:
    """Metadata churn in a thread until :meth:`stop` (errors ignored: a broker is going down)."""

    def __init__(self, c: ClusterHarness, cycle: int) -> None:
        self._c, self._cycle = c, cycle
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(60)

    def _run(self) -> None:
        r = 0
        while not self._done.is_set():
            try:
                asyncio.run(_churn_round(self._c, f"bg-{self._cycle}-{r}", 2))
            except Exception:  # noqa: BLE001 - the stopping broker may be the one asked
                time.sleep(0.1)
            r += 1


def sigterm(c: ClusterHarness, node_id: int, cycle: int, bound_s: float = EXIT_BOUND_S) -> Stop:
    """SIGTERM broker ``node_id`` and wait up to ``bound_s`` for it to exit (killed after)."""
    node = c.node(node_id)
    assert node.proc is not None and node.alive
    before = len(node.output())
    t0 = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    try:
        node.proc.wait(bound_s)
        exit_s: float | None = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        exit_s = None
        node.proc.kill()
        node.proc.wait()
    out = node.output()[before:]
    return Stop(cycle, node_id, exit_s, node.proc.returncode, "stopped cleanly" in out, "Traceback" in out,
                [line.strip()[24:] for line in out.splitlines() if "stop step" in line or "did not stop" in line],
                _logged_stop_s(out))


def _logged_stop_s(out: str) -> float | None:
    """Seconds from the "shutdown requested" line to the "stopped" line (log timestamps)."""
    def at(marker: str) -> datetime | None:
        for line in out.splitlines():
            if marker in line:
                try:
                    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                except ValueError:
                    return None
        return None
    begin, end = at("shutdown requested"), at(" stopped")
    return None if begin is None or end is None else round((end - begin).total_seconds(), 3)


def run_cycles(c: ClusterHarness, cycles: int, *, log: Any = None) -> list[Stop]:
    """``cycles`` cycles on the running cluster ``c`` (see the module doc)."""
    stops: list[Stop] = []
    ids = c.broker_ids
    for cycle in range(cycles):
        node_id = ids[cycle % len(ids)]
        churn(c, cycle)
        with _Background(c, cycle):
            time.sleep(0.2 * (cycle % 4))  # the SIGTERM lands at different points of the churn
            stop = sigterm(c, node_id, cycle)
        stops.append(stop)
        if log is not None:
            log(f"cycle {cycle}: broker {node_id} exit {stop.exit_s} s rc {stop.returncode} ok {stop.ok}")
        c.node(node_id).start().wait_listening(60)
        c.wait_unfenced(timeout=90)
    return stops


def summary(stops: list[Stop]) -> dict[str, Any]:
    """The JSON summary: stops, exit times (max/p50), hangs and unclean stops."""
    times = sorted(s.exit_s for s in stops if s.exit_s is not None)
    return {
        "stops": len(stops),
        "exit_s_max": round(max(times), 3) if times else None,
        "exit_s_p50": round(statistics.median(times), 3) if times else None,
        "exit_s_all": [None if s.exit_s is None else round(s.exit_s, 3) for s in stops],
        "logged_stop_s_all": [s.logged_stop_s for s in stops],
        "hangs": sum(1 for s in stops if s.exit_s is None),
        "unclean": sum(1 for s in stops if not s.ok),
        "bound_s": EXIT_BOUND_S,
        "slow_steps": [f"cycle {s.cycle}: {line}" for s in stops for line in s.step_lines],
        "failures": [asdict(s) for s in stops if not s.ok],
    }
