"""``hightide groups describe`` of a group committed on many partitions (issue 33: ≤ 2 s at
10,000 partitions), on one ``hightide serve``.

The broker gets ``--partitions`` partitions (topics of ``--per-topic``), one record in
each, and a group (no members) commits an offset on every partition (OffsetCommit of
1,000 partitions per request). Then the CLI ``hightide groups describe GROUP`` (its own
process, as a user runs it: interpreter start, imports, the requests, the table) is timed
``--runs`` times with ``-o json``, plus ``--offsets`` default table, and the lines it
printed are counted (one per partition). ``--src`` picks the code measured.

    python bench/groups_describe.py [--partitions 10000] [--per-topic 100] [--runs 3]

Prints JSON (and writes it to ``--out``). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
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
from partitions_scale import Server, _create, _produce_topic  # noqa: E402
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


def _describe(src: str, bootstrap: str, args: list[str]) -> tuple[float, int, int]:
    env = dict(os.environ, PYTHONPATH=src)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hightide", "groups", "describe", GROUP, "-b", bootstrap, *args],
                       env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    return took, p.returncode, len(p.stdout.splitlines())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--src", default=str(ROOT / "src"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
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
                    if any(_produce_topic(c, t, args.per_topic)):
                        raise RuntimeError(f"Produce to {t} failed")
                parts = [(t, p) for t in topics for p in range(args.per_topic)]
                t0 = time.monotonic()
                failed = sum(_commit(c, parts[i:i + 1000]) for i in range(0, len(parts), 1000))
                commit_s = time.monotonic() - t0
            runs: dict[str, list[float]] = {"json": [], "table": []}
            lines = {}
            for _ in range(args.runs):
                for view, extra in (("json", ["-o", "json"]), ("table", [])):
                    took, rc, n = _describe(args.src, srv.bootstrap, extra)
                    if rc != 0:
                        raise RuntimeError(f"groups describe exited {rc}")
                    runs[view].append(took)
                    lines[view] = n
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
           "table_lines": lines.get("table"), "cli_start_help_s": round(startup_s, 3)}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
