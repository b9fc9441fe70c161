"""The whole-cluster simulation (hightide.sim) at length; JSON on stdout.

Three parts, in simulated time (the numbers of faults and steps do not depend on this
machine; steps per second do):

* ``safety``: ``--seeds`` seeds of the default run (3 controllers, 3 brokers, 2 idempotent
  producers, a committer, a reader, and the optional clients ``--clients`` names —
  default all: transactions, classic and KIP-848 group members, share consumers, an
  admin; every fault kind for ``--duration`` simulated seconds, then healing, liveness
  and the final check): seeds, anomalies (each with its replay command), simulated
  hours, faults by kind, steps and steps per second (over all ``--jobs`` worker
  processes), the clients' counts.
* ``planted``: each deliberately broken variant (hightide.sim.planted, and
  hightide.sim.planted_clients with the clients that find it) run on seeds from 1 until
  one finds it (at most ``--planted-seeds``): the first failing seed, the simulated time
  of the run, and the anomaly.
* ``scaling``: steps per second (and real seconds per simulated second) as the number of
  nodes and clients grows, on the same fault schedule kinds; the last rows add the
  optional clients.

    .venv/bin/python bench/cluster_sim.py --seeds 500 > bench/results/DATE-cluster_sim.json
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
sys.path.insert(0, str(ROOT / "src"))

from hightide.sim.batch import Job, Outcome, default_workers, run_jobs  # noqa: E402
from hightide.sim.client_set import CLIENT_KINDS  # noqa: E402
from hightide.sim.planted import PLANTED  # noqa: E402
from hightide.sim.planted_clients import PLANTED_CLIENTS  # noqa: E402
from hightide.sim.run import simulate  # noqa: E402

SCALES = [  # (controllers, brokers, producers, optional clients)
    (1, 1, 1, ()), (3, 3, 2, ()), (3, 5, 2, ()), (5, 5, 2, ()), (3, 3, 6, ()),
    (3, 3, 2, ("txn",)), (3, 3, 2, ("classic", "consumer")), (3, 3, 2, ("share",)), (3, 3, 2, ("admin",)),
    (3, 3, 2, CLIENT_KINDS),
]


def safety(seeds: int, first: int, duration_s: float, clients: tuple[str, ...], jobs: int,
           budget_s: float | None = None) -> dict[str, Any]:
    """``seeds`` seeds from ``first``; with ``budget_s``, no seed starts after that many
    real seconds (the seeds run are counted and are the first ones, in order, but for
    those in flight)."""
    faults: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    anomalies = []
    simulated = steps = 0.0
    started = time.perf_counter()

    def done(o: Outcome) -> None:
        nonlocal simulated, steps
        faults.update(o.faults)
        counts.update(o.counts)
        simulated += o.simulated_s
        steps += o.steps
        if not o.ok:
            anomalies.append({"seed": o.seed, "anomaly": o.anomaly, "replay": o.job.replay()})
        print(f"safety seed {o.seed}: {'ok' if o.ok else 'ANOMALY ' + str(o.anomaly)}", file=sys.stderr, flush=True)
    ran = run_jobs([Job(seed, duration_s, clients=clients) for seed in range(first, first + seeds)], jobs, done=done,
                   skip=None if budget_s is None else lambda _job: time.perf_counter() - started > budget_s)
    real = time.perf_counter() - started
    anomalies.sort(key=lambda a: a["seed"])
    return {"seeds": len(ran), "seeds_asked": seeds, "budget_s": budget_s, "first": first, "duration_s": duration_s, "clients": list(clients), "jobs": jobs,
            "anomalies": anomalies, "simulated_hours": round(simulated / 3600, 3), "faults": dict(faults),
            "steps": int(steps), "real_s": round(real, 1), "steps_per_s": round(steps / real),
            "sim_s_per_real_s": round(simulated / real, 2), "counts": dict(counts)}


def planted(max_seeds: int, duration_s: float, jobs: int) -> dict[str, Any]:
    """Each variant on seeds 1, 2, ... until one finds it (in ``jobs`` workers: a few
    seeds past the first finding may run; the first finding is reported)."""
    variants = [(name, ()) for name in sorted(PLANTED)] + [
        (name, kinds) for name, (_patch, kinds) in sorted(PLANTED_CLIENTS.items())]
    started = time.perf_counter()
    found: dict[str, Outcome] = {}
    tried: Counter[str] = Counter()

    def done(o: Outcome) -> None:
        assert o.job.plant is not None
        tried[o.job.plant] += 1
        if not o.ok and (o.job.plant not in found or o.seed < found[o.job.plant].seed):
            found[o.job.plant] = o
    run_jobs([Job(seed, duration_s, clients=kinds, plant=name) for seed in range(1, max_seeds + 1)
              for name, kinds in variants], jobs, skip=lambda job: job.plant in found, done=done)
    out: dict[str, Any] = {}
    for name, _kinds in variants:
        o = found.get(name)
        out[name] = {"found": None if o is None else {
            "seed": o.seed, "simulated_s": round(o.simulated_s, 1), "anomaly": o.anomaly, "replay": o.job.replay()},
            "seeds_tried": tried[name]}
        print(f"planted {name}: {'seed ' + str(o.seed) if o else 'NOT FOUND'}", file=sys.stderr, flush=True)
    out["real_s"] = round(time.perf_counter() - started, 1)
    return out


def scaling(seeds: int, duration_s: float) -> list[dict[str, Any]]:
    rows = []
    for controllers, brokers, producers, clients in SCALES:
        steps = simulated = 0.0
        started = time.perf_counter()
        for seed in range(1, seeds + 1):
            r = simulate(seed, duration_s=duration_s, controllers=controllers, brokers=brokers, producers=producers,
                         partitions=max(3, brokers), clients=clients)
            steps += r.steps
            simulated += r.simulated_s
        real = time.perf_counter() - started
        rows.append({"controllers": controllers, "brokers": brokers, "producers": producers,
                     "clients": list(clients), "seeds": seeds,
                     "steps_per_s": round(steps / real), "steps_per_sim_s": round(steps / simulated),
                     "real_s_per_sim_s": round(real / simulated, 3)})
        print(f"scaling {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--first", type=int, default=1)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--planted-seeds", type=int, default=40)
    p.add_argument("--scaling-seeds", type=int, default=3)
    p.add_argument("--parts", default="safety,planted,scaling")
    p.add_argument("--budget-s", type=float, help="safety part: start no seed after this many real seconds")
    p.add_argument("--jobs", type=int, default=default_workers(),
                   help="worker processes of the safety and planted parts (default: one per core)")
    p.add_argument("--clients", default="all",
                   help=f"optional clients of the safety part ({','.join(CLIENT_KINDS)}, all or none)")
    args = p.parse_args()
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"bench": "cluster_sim", "date": time.strftime("%Y-%m-%d"),
                           "python": sys.version.split()[0]}
    if "safety" in parts:
        clients = CLIENT_KINDS if args.clients == "all" else tuple(
            k for k in args.clients.split(",") if k and k != "none")
        out["safety"] = safety(args.seeds, args.first, args.duration, clients, args.jobs, args.budget_s)
    if "planted" in parts:
        out["planted"] = planted(args.planted_seeds, 15.0, args.jobs)
    if "scaling" in parts:
        out["scaling"] = scaling(args.scaling_seeds, 10.0)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
