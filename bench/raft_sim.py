"""Thousands of seeded simulations of the Raft core (tests/unit/raft_simulator.py); JSON.

Three parts, all in *simulated* milliseconds (they depend on Kafka's default timeouts
and the simulated network printed alongside, not on this machine):

* ``safety``: 1, 3 and 5 voters (with observers) under every fault (drops, long delays,
  kills with unflushed writes lost, pauses, partitions), a heavy-kill profile and a
  crash-point profile (no pre-vote, a crash right after granting a vote, one entry per
  Fetch), and a voter-change profile (KIP-853: every 600 ms a voter is added or removed,
  the leader too, on top of the faults of the default and heavy profiles); the failing
  seeds (each with its replay command) — expected: none.
* ``timing``: a quiet network whose leader is killed every 5 s: the first election from
  a cold start, failover (leader killed -> next leader elected) and commit latency
  (append on the leader -> committed), p50/p90/p99/max, for 1/3/5 voters.
* ``broken``: each deliberately broken rule (config.UNSAFE_RULES) and how fast the
  invariants catch it: seeds tried, seeds failing, the first failing seed and the
  simulated time spent until its violation, and the first invariant each broke.

    .venv/bin/python bench/raft_sim.py --seeds 1000 > bench/results/DATE-raft_sim.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hightide.cluster.raft import UNSAFE_RULES  # noqa: E402
from tests.unit.raft_simulator import InvariantViolation, SimConfig, Simulation  # noqa: E402

HEAVY = {"fault_interval_ms": 300, "kill_prob": 0.4, "partition_prob": 0.3, "snapshot_every": 10}
# A crash point (die right after granting a vote) and Kafka 3's elections without
# pre-vote: the profile under which two candidates in one epoch meet a voter that forgot
# its vote, so "vote_without_persist" can show.
CRASHY = {**HEAVY, "crash_after_vote_prob": 0.3, "pre_vote": False, "fetch_max_entries": 1}
# KIP-853: dynamic voters, one added or removed through the leader every 600 ms.
RECONFIG = {"kraft_version": 1, "reconfig_interval_ms": 600}
QUIET = {"drop_rate": 0.0, "long_delay_rate": 0.0, "kill_prob": 0.0, "pause_prob": 0.0,
         "partition_prob": 0.0, "kill_leader_every_ms": 5000}


def _dist(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    v = sorted(values)

    def pct(q: float) -> int:
        return v[min(len(v) - 1, int(q * len(v)))]
    return {"n": len(v), "p50": pct(.5), "p90": pct(.9), "p99": pct(.99), "max": v[-1]}


def safety(voters: int, observers: int, profile: dict[str, Any], seeds: int) -> dict[str, Any]:
    failures: list[str] = []
    totals: Counter[str] = Counter()
    start = time.perf_counter()
    for seed in range(seeds):
        sim = Simulation(seed, SimConfig(voters=voters, observers=observers, **profile))
        try:
            sim.run()
        except InvariantViolation as e:
            failures.append(str(e))
            continue
        s = sim.stats
        totals.update(steps=s.steps, committed=s.committed, appends=s.appends, kills=s.kills,
                      leaders=s.leaders, snapshots_installed=s.snapshots_installed,
                      truncations=s.truncations, voter_changes=s.voter_changes,
                      leader_removals_asked=s.leader_removals,
                      voter_changes_refused=sum(s.voter_refusals.values()))
    return {"voters": voters, "observers": observers, "profile": profile, "seeds": seeds,
            "simulated_s": seeds * SimConfig().duration_ms // 1000,
            "wall_s": round(time.perf_counter() - start, 2), "failures": failures,
            "totals": dict(totals)}


def timing(voters: int, seeds: int) -> dict[str, Any]:
    first: list[int] = []
    failover: list[int] = []
    commit: list[int] = []
    for seed in range(seeds):
        sim = Simulation(seed, SimConfig(voters=voters, **QUIET))
        sim.run()
        elections = sim.stats.elections
        if elections:
            first.append(elections[0])
            failover += elections[1:]
        commit += sim.stats.commit_latency
    return {"voters": voters, "seeds": seeds, "first_election_ms": _dist(first),
            "failover_ms": _dist(failover), "commit_latency_ms": _dist(commit)}


def broken(rule: str, profile: dict[str, Any], seeds: int) -> dict[str, Any]:
    failing = 0
    first_seed: int | None = None
    simulated_until_first = 0
    at_ms: list[int] = []
    kinds: Counter[str] = Counter()
    start = time.perf_counter()
    for seed in range(seeds):
        sim = Simulation(seed, SimConfig(voters=3, unsafe=frozenset({rule}), **profile))
        try:
            sim.run()
            if first_seed is None:
                simulated_until_first += sim.cfg.duration_ms
        except InvariantViolation as e:
            failing += 1
            at_ms.append(sim.now)
            what = str(e).split(": ", 1)[1].splitlines()[0]
            kinds[_kind(what)] += 1
            if first_seed is None:
                first_seed = seed
                simulated_until_first += sim.now
    return {"rule": rule, "voters": 3, "profile": profile, "seeds": seeds, "failing_seeds": failing,
            "first_failing_seed": first_seed,
            "simulated_ms_until_first_violation": simulated_until_first if first_seed is not None else None,
            "violation_at_ms": _dist(at_ms), "invariants_broken": dict(kinds),
            "wall_s": round(time.perf_counter() - start, 2)}


def _kind(what: str) -> str:
    for marker, name in (("two leaders", "one leader per epoch"),
                         ("durable on", "committed on a majority"),
                         ("truncates", "committed never truncated"),
                         ("more than one change", "one voter change at a time"),
                         ("not in its voter set", "a leader is a voter"),
                         ("committed", "identical committed prefix"),
                         ("went back", "monotonic epoch/HW"),
                         ("snapshot", "snapshot is the committed prefix")):
        if marker in what:
            return name
    return what[:60]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="seeds per safety configuration")
    ap.add_argument("--timing-seeds", type=int, default=300)
    ap.add_argument("--broken-seeds", type=int, default=500)
    args = ap.parse_args()
    start = time.perf_counter()
    shapes = [(1, 1), (3, 2), (5, 3)]
    out = {
        "bench": "raft_sim",
        "simulated": {"duration_ms": SimConfig().duration_ms, "network_ms": [1, 15],
                      "long_delay": "1% up to 3000 ms", "fsync_ms": [1, 6],
                      "append_interval_ms": 40, "raft": "Kafka defaults: election 1000, "
                      "fetch timeout 2000, long-poll 500, backoff max 1000"},
        "safety": [safety(v, o, p, args.seeds) for v, o in shapes for p in ({}, HEAVY, CRASHY)]
        + [safety(v, o, {**p, **RECONFIG}, args.seeds) for v, o in shapes for p in ({}, HEAVY)],
        "timing": [timing(v, args.timing_seeds) for v in (1, 3, 5)],
        "broken": [broken(r, p, args.broken_seeds) for r in sorted(UNSAFE_RULES)
                   for p in (HEAVY, CRASHY)],
    }
    out["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out, indent=2))
    return 1 if any(r["failures"] for r in out["safety"]) else 0


if __name__ == "__main__":
    sys.exit(main())
