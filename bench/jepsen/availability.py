"""How long writes stalled around each fault of a history (pure; see :mod:`history`).

For each fault the nemesis started at time ``t``, and each partition, the *write gap* is
the time between the last acknowledged send on that partition before ``t`` and the first
one after it: for a partition whose leader the fault hit, the failover time as a producer
sees it (fault → fenced after the session timeout → a new leader → the producer finds it
and its retry is acknowledged); for the others, about the time between two sends. The
fault's gap is the largest over the partitions. :func:`write_gaps` reports p50, p99 and
max of those per fault kind, in milliseconds (a fault before the first acknowledgement of
every partition is not measured: ``not_measured``).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .history import Event

__all__ = ["write_gaps"]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def write_gaps(events: Iterable[Event]) -> dict[str, dict[str, Any]]:
    """``{fault kind: {"faults", "p50_ms", "p99_ms", "max_ms", "not_measured"}}`` (see the
    module doc)."""
    acks: dict[int, list[float]] = defaultdict(list)
    starts: list[tuple[float, str]] = []
    for ev in events:
        if ev["f"] == "send" and ev["type"] == "ok":
            acks[int(ev["partition"])].append(float(ev["t"]))
        elif ev["f"] == "nemesis" and ev.get("phase") == "start":
            starts.append((float(ev["t"]), str(ev["fault"])))
    for times in acks.values():
        times.sort()
    gaps: dict[str, list[float]] = defaultdict(list)
    not_measured: dict[str, int] = defaultdict(int)
    for t, kind in starts:
        worst = None
        for times in acks.values():
            i = bisect.bisect_right(times, t)
            if 0 < i < len(times):
                gap = times[i] - times[i - 1]
                worst = gap if worst is None else max(worst, gap)
        if worst is None:
            not_measured[kind] += 1
        else:
            gaps[kind].append(worst)
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted(set(gaps) | set(not_measured)):
        xs = gaps[kind]
        out[kind] = {"faults": len(xs), "p50_ms": round(_pct(xs, 0.5) * 1000), "p99_ms": round(_pct(xs, 0.99) * 1000),
                     "max_ms": round(max(xs, default=0.0) * 1000), "not_measured": not_measured[kind]}
    return out
