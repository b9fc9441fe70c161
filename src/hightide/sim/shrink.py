"""Shrinking a failing seed (issue 28 item 5): fewer faults, a shorter run, the same
kind of anomaly.

A run's faults are indexed in its seeded schedule (:meth:`.faults.FaultSchedule.run`:
fault ``i`` draws the same gap, kind, node and hold time whichever others are applied),
so a smaller schedule is a set of indices, ``--only-faults 3,7`` on the command line.
:func:`shrink` starts from the faults the failing run applied and

1. leaves out halves, then quarters, ... then single faults (delta debugging's
   complement steps), keeping each removal after which the run still ends with an
   anomaly of the same kind (:func:`anomaly_kind`);
2. then cuts the fault phase to just after the last fault left has ended (the faults'
   start times do not move), keeping it if the anomaly's kind is still the same.

Every step is a whole simulated run, so shrinking is as deterministic as a run: one
failing seed shrinks to one answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .run import RunResult, simulate

__all__ = ["Shrunk", "anomaly_kind", "shrink"]

#: Anomaly kinds, by what their message says (the first that matches).
_KINDS = (
    ("deadline", r"^deadline:"),
    ("controller-failover", r"^controller failover:"),
    ("txn-offset-commit", r"TxnOffsetCommit .* COORDINATOR_NOT_AVAILABLE"),
    ("commit-lost", r"offset fetch answered"),
    ("producer-refused", r"produce failed for good"),
    ("hw-back", r"high watermark went back|read an end of .* after a high watermark"),
    ("record-lost", r"acknowledged offsets .* lost|acknowledged .*, read|missing below|no record at"),
    ("duplicate-or-reorder", r"duplicate|reordered|acknowledged twice"),
    ("replicas-differ", r"replica \d+ holds|did not catch up"),
    ("liveness", r"^liveness:"),
    ("bound", r"a bound was exceeded|TimeoutError"),
    ("deadlock", r"^deadlock:"),
)


def anomaly_kind(anomaly: str | None) -> str | None:
    """The kind of an anomaly message (None: no anomaly; ``other`` if none matches)."""
    if anomaly is None:
        return None
    for kind, pattern in _KINDS:
        if re.search(pattern, anomaly):
            return kind
    return "other"


@dataclass
class Shrunk:
    """The smallest failing run :func:`shrink` found."""

    seed: int
    kind: str
    faults: list[int]  # indices into the seeded schedule
    duration_s: float
    result: RunResult
    runs: int  # simulated runs it took
    first_faults: int = 0  # faults the failing run applied before shrinking

    def replay(self, extra: str = "") -> str:
        """The one-line command that replays it (``extra``: the run's other options)."""
        return (f"python -m hightide.sim --seed {self.seed} --duration {self.duration_s:g}{extra} "
                f"--only-faults {','.join(map(str, self.faults)) or 'none'} --trace --logs")


def shrink(seed: int, *, duration_s: float, first: RunResult | None = None,
           progress: Callable[[str], None] | None = None, **kw: Any) -> Shrunk | None:
    """Shrink failing seed ``seed`` (``kw``: :func:`.run.simulate`'s other options;
    ``first``: its failing result if already run). None if the seed does not fail."""
    runs = 0

    def run(faults: list[int], duration: float) -> RunResult:
        nonlocal runs
        runs += 1
        return simulate(seed, duration_s=duration, only=frozenset(faults), **kw)

    if first is None:
        runs += 1
        first = simulate(seed, duration_s=duration_s, **kw)
    kind = anomaly_kind(first.anomaly)
    if kind is None:
        return None
    say = progress or (lambda _line: None)
    best, best_result = list(first.applied), first
    say(f"seed {seed}: {kind} with faults {best}")
    chunks = 2
    while best and chunks <= 2 * len(best):
        size = math.ceil(len(best) / chunks)
        removed = False
        for at in range(0, len(best), size):
            candidate = best[:at] + best[at + size:]
            r = run(candidate, duration_s)
            if anomaly_kind(r.anomaly) == kind:
                say(f"  without {best[at:at + size]}: still {kind}")
                best, best_result, removed = [i for i in candidate if i in r.applied], r, True
                chunks = max(chunks - 1, 2)
                break
            say(f"  without {best[at:at + size]}: {anomaly_kind(r.anomaly) or 'ok'}")
        if not removed:
            if size == 1:
                break
            chunks = min(chunks * 2, len(best))
    shortest = duration_s
    ends = _fault_ends(best_result)
    if best and len(ends) == len(best):
        cut = math.ceil(max(ends) + 0.5)
        if cut < duration_s:
            r = run(best, cut)
            if anomaly_kind(r.anomaly) == kind:
                say(f"  duration {cut:g}: still {kind}")
                shortest, best_result = float(cut), r
            else:
                say(f"  duration {cut:g}: {anomaly_kind(r.anomaly) or 'ok'}")
    elif not best and duration_s > 1:
        r = run(best, 1.0)
        if anomaly_kind(r.anomaly) == kind:
            shortest, best_result = 1.0, r
    return Shrunk(seed, kind, best, shortest, best_result, runs, len(first.applied))


def _fault_ends(result: RunResult) -> list[float]:
    """When (seconds into the fault phase) each fault the run applied ends — its start
    plus its hold time, from its trace line (``[   t] fault #i KIND ... for H.HHs``; the
    fault phase starts as the topic is created): a run cut before a fault's end would
    heal it early."""
    origin = next((float(line[1:10]) for line in result.trace if line.endswith("topic sim created")), 0.0)
    ends = []
    for line in result.trace:
        if "] fault #" in line:
            hold = re.search(r" for ([0-9.]+)s$", line)
            ends.append(float(line[1:10]) - origin + (float(hold.group(1)) if hold else 0.0))
    return ends
