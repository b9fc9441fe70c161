"""``python -m hightide.sim``: run simulated seeds; print one line per seed, and for a
failing seed its trace and the one-line command that replays it.

    python -m hightide.sim --seeds 20             # seeds 1..20
    python -m hightide.sim --seed 1234 --trace    # replay one seed, print its trace
    python -m hightide.sim --seeds 200 --json out.json
    python -m hightide.sim --seeds 200 --jobs 2    # in two worker processes

Exit status: 0 when every seed held every invariant, 1 otherwise. ``PYTHONHASHSEED`` is
fixed (the process re-executes itself once if it is not), so a seed replays byte for
byte on the same Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter

from .batch import HASH_SEED, Job, Outcome, run_jobs
from .client_set import CLIENT_KINDS
from .faults import EXTRA_KINDS, FAULT_KINDS
from .planted import variants
from .run import PROBES, RunResult, simulate
from .shrink import shrink


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hightide.sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="run seeds FIRST..FIRST+N-1 (default 10)")
    p.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    p.add_argument("--seed", type=int, help="run this one seed only")
    p.add_argument("--duration", type=float, default=30.0, help="simulated seconds of faults per seed (default 30)")
    p.add_argument("--controllers", type=int, default=3)
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--faults", default=",".join(FAULT_KINDS),
                   help=f"fault kinds, comma-separated (default all: {','.join(FAULT_KINDS)}; "
                        f"also {','.join(EXTRA_KINDS)})")
    p.add_argument("--plant", choices=sorted(variants()),
                   help="run a deliberately broken variant (hightide.sim.planted, hightide.sim.regressions)")
    p.add_argument("--clients", default="",
                   help=f"optional clients to run too, comma-separated ({','.join(CLIENT_KINDS)}, or all; "
                        "default none)")
    p.add_argument("--probes", default="", help=f"optional clients, comma-separated ({','.join(PROBES)})")
    p.add_argument("--only-faults", metavar="I,J,...",
                   help="apply only these faults of the seeded schedule (indices from 0; 'none': no fault)")
    p.add_argument("--shrink", action="store_true",
                   help="shrink each failing seed (fewer faults, a shorter run) and print its replay command")
    p.add_argument("--trace", action="store_true", help="print the whole trace of every seed")
    p.add_argument("--logs", action="store_true", help="put the nodes' warnings in the trace")
    p.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE")
    p.add_argument("--jobs", type=int, default=1,
                   help="run seeds in this many worker processes (default 1: in this process); with more, "
                        "a trace is printed only as its last 40 lines")
    return p.parse_args(argv)


def _job(args: argparse.Namespace, seed: int, kinds: tuple[str, ...], clients: tuple[str, ...],
         probes: tuple[str, ...], only: frozenset[int] | None) -> Job:
    return Job(seed, args.duration, kinds=kinds, clients=clients, probes=probes, plant=args.plant,
               controllers=args.controllers, brokers=args.brokers, only=only, log_lines=args.logs)


def _shrink(args: argparse.Namespace, first: RunResult | None, seed: int, kinds: tuple[str, ...],
            probes: tuple[str, ...], only: frozenset[int] | None, clients: tuple[str, ...] = ()) -> None:
    """Shrink failing seed ``seed`` (:mod:`.shrink`; ``first``: its failing run, if it ran
    here) and print its minimal replay command."""
    if only is not None:
        print("    (not shrunk: --only-faults already names the faults)")
        return
    got = shrink(seed, duration_s=args.duration, first=first, progress=lambda line: print("   ", line, flush=True),
                 controllers=args.controllers, brokers=args.brokers, kinds=kinds, plant=args.plant, probes=probes,
                 clients=clients)
    if got is None:
        return
    extra = _job(args, seed, kinds, clients, probes, only).replay().split(
        f"--seed {seed}", 1)[1].replace(" --trace --logs", "")
    extra = re.sub(r" --duration \S+", "", extra)
    print(f"    shrunk in {got.runs} runs: {len(got.faults)} of {got.first_faults} faults, "
          f"{got.duration_s:g} s of faults; {got.result.anomaly}\n    minimal replay: {got.replay(extra)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED and argv is None:
        os.environ["PYTHONHASHSEED"] = HASH_SEED  # str hashes (set order) are part of the trace
        os.execv(sys.executable, [sys.executable, "-m", "hightide.sim", *sys.argv[1:]])
    args = _args(argv)
    kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = sorted(set(kinds) - set(FAULT_KINDS) - set(EXTRA_KINDS))
    if unknown:
        print(f"error: unknown fault kind(s) {', '.join(unknown)} (known: {', '.join(FAULT_KINDS + EXTRA_KINDS)})",
              file=sys.stderr)
        return 2
    probes = tuple(p for p in args.probes.split(",") if p)
    if set(probes) - set(PROBES):
        print(f"error: unknown probe(s) {', '.join(sorted(set(probes) - set(PROBES)))} (known: {', '.join(PROBES)})",
              file=sys.stderr)
        return 2
    try:
        only = None if args.only_faults is None else frozenset(
            int(i) for i in args.only_faults.split(",") if i and i != "none")
    except ValueError:
        print(f"error: --only-faults takes fault indices, comma-separated (got {args.only_faults!r})", file=sys.stderr)
        return 2
    clients = CLIENT_KINDS if args.clients == "all" else tuple(k for k in args.clients.split(",") if k)
    unknown = sorted(set(clients) - set(CLIENT_KINDS))
    if unknown:
        print(f"error: unknown client kind(s) {', '.join(unknown)} (known: {', '.join(CLIENT_KINDS)})",
              file=sys.stderr)
        return 2
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    results: list[RunResult | Outcome] = []
    started = time.monotonic()

    def report(r: RunResult | Outcome) -> None:
        results.append(r)
        faults = " ".join(f"{k}={v}" for k, v in sorted(r.faults.items()))
        status = "ok" if r.ok else "ANOMALY"
        print(f"seed {r.seed}: {status} {r.simulated_s:.0f} s simulated, {r.steps} steps, {r.real_s:.1f} s; "
              f"{faults}", flush=True)
        if args.trace or not r.ok:
            for line in r.trace if args.trace else r.trace[-40:]:
                print("   ", line)
        if not r.ok:
            print(f"    {r.anomaly}\n    replay: {_job(args, r.seed, kinds, clients, probes, only).replay()}",
                  flush=True)
            if args.shrink:
                _shrink(args, r if isinstance(r, RunResult) else None, r.seed, kinds, probes, only, clients)

    if args.jobs > 1:
        run_jobs([_job(args, seed, kinds, clients, probes, only) for seed in seeds], args.jobs, done=report)
    else:
        for seed in seeds:
            report(simulate(seed, duration_s=args.duration, controllers=args.controllers, brokers=args.brokers,
                            kinds=kinds, log_lines=args.logs, plant=args.plant, clients=clients,
                            probes=probes, only=only))
    results.sort(key=lambda r: r.seed)
    elapsed = time.monotonic() - started
    failed = [r.seed for r in results if not r.ok]
    simulated = sum(r.simulated_s for r in results)
    steps = sum(r.steps for r in results)
    print(f"{len(results)} seeds, {len(failed)} with anomalies{': ' + ' '.join(map(str, failed)) if failed else ''}; "
          f"{simulated / 3600:.2f} simulated hours in {elapsed:.0f} s, {steps / max(elapsed, 1e-9):.0f} steps/s")
    if args.json:
        faults_total: Counter[str] = Counter()
        for r in results:
            faults_total.update(r.faults)
        summary = {
            "seeds": len(results), "first": seeds[0], "anomalies": [{"seed": r.seed, "anomaly": r.anomaly}
                                                                    for r in results if not r.ok],
            "simulated_hours": simulated / 3600, "real_s": elapsed, "steps": steps,
            "steps_per_s": steps / max(elapsed, 1e-9), "faults": dict(faults_total),
            "controllers": args.controllers, "brokers": args.brokers, "duration_s": args.duration,
            "clients": list(clients),
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
