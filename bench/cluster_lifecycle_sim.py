"""Thousands of seeded simulations of the controller's broker-lifecycle core
(tests/unit/cluster_lifecycle_simulator.py) for 1, 3 and 5 brokers, with acknowledgements
by heartbeat only and by metadata Fetch too; prints JSON.

Per configuration: seeds run, the failing seeds (each replays with
``simulate(seed, Params(...))``), fault counts, wall-clock cost, and — in *simulated*
milliseconds — how long after a metadata record is committed the controller's lowest
acknowledged offset covers it ("known") and a heartbeat answer carries that
("delivered"), p50/p99/max. Those two numbers are what the heartbeat-vs-Fetch choice of
issue 13 is about; they depend on the simulated intervals printed alongside, not on this
machine.

    .venv/bin/python bench/cluster_lifecycle_sim.py --seeds 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.unit.cluster_lifecycle_simulator import InvariantViolation, Params, Simulation  # noqa: E402


def _pct(values: list[int], q: float) -> int | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(brokers: int, fetch_acks: bool, seeds: int, first_seed: int) -> dict:
    params = Params(brokers=brokers, fetch_acks=fetch_acks)
    failures: list[dict] = []
    totals: dict[str, int] = {}
    known: list[int] = []
    delivered: list[int] = []
    start = time.perf_counter()
    for seed in range(first_seed, first_seed + seeds):
        sim = Simulation(seed, params)
        try:
            stats = sim.run()
        except InvariantViolation as exc:
            failures.append({"seed": seed, "error": str(exc)})
            continue
        for f in dataclasses.fields(stats):
            if f.name not in ("seed", "lowest_published", "max_committed", "max_lag_ms"):
                totals[f.name] = totals.get(f.name, 0) + getattr(stats, f.name)
        known += sim.known_ms
        delivered += sim.delivered_ms
    wall = time.perf_counter() - start
    return {
        "brokers": brokers, "acks": "heartbeat+fetch" if fetch_acks else "heartbeat",
        "seeds": seeds, "first_seed": first_seed, "failures": failures,
        "wall_s": round(wall, 2), "events_per_s": round(totals.get("events", 0) / wall) if wall else None,
        "totals": totals,
        "cover_known_ms": {"p50": _pct(known, .5), "p99": _pct(known, .99), "max": max(known, default=None)},
        "cover_delivered_ms": {"p50": _pct(delivered, .5), "p99": _pct(delivered, .99),
                               "max": max(delivered, default=None)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="seeds per configuration")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3, 5])
    args = ap.parse_args()
    p = Params()
    results = [run(n, fa, args.seeds, args.first_seed) for n in args.brokers for fa in (False, True)]
    print(json.dumps({
        "bench": "cluster_lifecycle_sim",
        "simulated": {"duration_ms": p.duration_ms, "heartbeat_ms": p.heartbeat_ms, "fetch_ms": p.fetch_ms,
                      "session_timeout_ms": p.session_timeout_ms, "idle_ms": p.idle_ms, "tick_ms": p.tick_ms,
                      "latency_ms": p.latency_ms, "drop_p": p.drop_p, "spike_p": p.spike_p},
        "results": results,
    }, indent=2))
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
