"""``hightide groups describe`` of a group committed on many partitions (issue 33: ≤ 2 s at
10,000 partitions), on one ``hightide serve``.

The broker gets ``--partitions`` partitions (topics of ``--per-topic``), one record in
each, and a group (no members) commits an offset on every partition (OffsetCommit of
1,000 partitions per request). Then the CLI ``hightide groups describe GROUP`` (its own
process, as a user runs it: interpreter start, imports, the requests, the table) is timed
``--runs`` times with ``-o json``, plus ``--offsets`` default table, and the lines it
printed are counted (one per partition), with the CLI process's CPU time (user +
system: on a loaded machine the wall time is mostly waiting for a core). ``--src`` picks
the code measured; ``--bootstrap`` measures against a broker already set up (so two
trees' CLIs are compared on one broker).

    python bench/groups_describe.py [--partitions 10000] [--per-topic 100] [--runs 3]
    python bench/groups_describe.py --bootstrap HOST:PORT --src OTHER/src --runs 5

Prints JSON (and writes it to ``--out``). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _limits import git_revision, log, machine  # noqa: E402
from partitions_scale import Server, _create  # noqa: E402
from hightide.protocol.records import build_batch  # noqa: E402
from tests.rawkafka import RawClient  # noqa: E402

GROUP = "bench-describe"


def _commit(c: RawClient, parts: list[tuple[str, int]]) -> int:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    r = c.request(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                         "group_instance_id": None, "topics": [
                             {"name": t, "partitions": [{"partition_index": p, "committed_offset": 1,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}
                                                        for p in ps]} for t, ps in by_topic.items()]})
    return sum(1 for t in r.topics for p in t.partitions if p.error_code)


def _produce_now(c: RawClient, topic: str, per_topic: int) -> list[int]:
    """One record (timestamped now: an old one is deleted by retention at once, and the
    broker busy deleting would be measured instead) to each partition of ``topic``."""
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 60_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": batch} for p in range(per_topic)]}]})
    return [p.error_code for p in r.responses[0].partition_responses]


def _describe(src: str, bootstrap: str, args: list[str]) -> tuple[float, float, int, int]:
    """(wall s, CPU s of the CLI process: user + system, exit code, lines printed)."""
    env = dict(os.environ, PYTHONPATH=src)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hightide", "groups", "describe", GROUP, "-b", bootstrap, *args],
                       env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu, p.returncode, len(p.stdout.splitlines())


def _measure(src: str, bootstrap: str, n: int) -> tuple[dict[str, list[float]], dict[str, list[float]], dict]:
    runs: dict[str, list[float]] = {"json": [], "table": []}
    cpu: dict[str, list[float]] = {"json": [], "table": []}
    lines = {}
    for _ in range(n):
        for view, extra in (("json", ["-o", "json"]), ("table", [])):
            took, used, rc, count = _describe(src, bootstrap, extra)
            if rc != 0:
                raise RuntimeError(f"groups describe exited {rc}")
            runs[view].append(took)
            cpu[view].append(used)
            lines[view] = count
    return runs, cpu, lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--src", default=str(ROOT / "src"))
    ap.add_argument("--bootstrap", default=None,
                    help="measure the CLI against this running broker (already holding the group's commits)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.bootstrap:
        runs, cpu, lines = _measure(args.src, args.bootstrap, args.runs)
        _print({"machine": machine(), "revision": git_revision(), "src": args.src, "bootstrap": args.bootstrap,
                "describe_s": {view: {"median": round(statistics.median(v), 3), "max": round(max(v), 3)}
                               for view, v in runs.items()},
                "describe_cpu_s": {view: round(statistics.median(v), 3) for view, v in cpu.items()},
                "table_lines": lines.get("table")}, args.out)
        return
    topics = [f"g{i:04d}" for i in range(args.partitions // args.per_topic)]
    with tempfile.TemporaryDirectory() as d:
        srv = Server(args.src, os.path.join(d, "data"), 0, [])
        srv.start()
        try:
            with RawClient(srv.bootstrap, timeout=600) as c:
                t0 = time.monotonic()
                for i in range(0, len(topics), 10):
                    bad = [e for e in _create(c, topics[i:i + 10], args.per_topic) if e]
                    if bad:
                        raise RuntimeError(f"CreateTopics: {bad}")
                log(f"{args.partitions} partitions created in {time.monotonic() - t0:.1f} s")
                for t in topics:
                    if any(_produce_now(c, t, args.per_topic)):
                        raise RuntimeError(f"Produce to {t} failed")
                parts = [(t, p) for t in topics for p in range(args.per_topic)]
                t0 = time.monotonic()
                failed = sum(_commit(c, parts[i:i + 1000]) for i in range(0, len(parts), 1000))
                commit_s = time.monotonic() - t0
            runs, cpu, lines = _measure(args.src, srv.bootstrap, args.runs)
            # the interpreter and imports alone: the same CLI on --help
            env = dict(os.environ, PYTHONPATH=args.src)
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "hightide", "groups", "describe", "--help"], env=env,
                           capture_output=True, timeout=120)
            startup_s = time.monotonic() - t0
        finally:
            srv.stop()
    out = {"machine": machine(), "revision": git_revision(), "partitions": args.partitions,
           "per_topic": args.per_topic, "commit_s": round(commit_s, 2), "commit_errors": failed,
           "describe_s": {view: {"median": round(statistics.median(v), 3), "max": round(max(v), 3)}
                          for view, v in runs.items()},
           "describe_cpu_s": {view: round(statistics.median(v), 3) for view, v in cpu.items()},
           "table_lines": lines.get("table"), "cli_start_help_s": round(startup_s, 3)}
    _print(out, args.out)


def _print(out: dict, path: str | None) -> None:
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        Path(path).write_text(text + "\n")


if __name__ == "__main__":
    main()
