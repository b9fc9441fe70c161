"""The single node's metadata path: start-up time of ``hightide serve`` on a fresh and
on an existing data dir, and the latency of CreateTopics one topic per request (each is a
durable metadata write: append, fsync, apply, answer).

Each round starts ``python -m hightide serve`` on a fresh dir (exec -> first accepted TCP
connection, polled every 2 ms), creates ``--topics`` topics (1 partition each) one per
CreateTopics request and times each, stops the broker (SIGTERM), then starts it again on
the same dir (now holding those topics) and times that start too, and checks the topics
are all there (Metadata). ``--rounds`` rounds; a warm-up start first (the .pyc files).

    python bench/single_voter.py [--rounds 5] [--topics 200]

Prints JSON (medians, p99 of the writes, the machine's load). Wall-clock numbers on a
shared 2-core machine: compare runs made in one sitting. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from startup import _cpu_s, _env, _free_port  # noqa: E402
from tests.rawkafka import RawClient  # noqa: E402

from _limits import git_revision, log, machine  # noqa: E402


def start(data_dir: str, port: int, timeout: float = 30.0) -> tuple[subprocess.Popen, float, float | None]:
    """(process, seconds from exec to the first accepted connection, its CPU seconds)."""
    import socket
    cmd = [sys.executable, "-m", "hightide", "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}",
           "--log-level", "WARNING"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, time.perf_counter() - t0, _cpu_s(proc.pid)
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                raise RuntimeError("serve did not accept connections in time") from None
            time.sleep(0.002)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def create_topics(port: int, n: int) -> list[float]:
    lat = []
    tag = uuid.uuid4().hex[:6]
    with RawClient(f"127.0.0.1:{port}", timeout=30) as c:
        for i in range(n):
            t0 = time.perf_counter()
            r = c.request(19, 7, {"topics": [{"name": f"bench-{tag}-{i}", "num_partitions": 1,
                                              "replication_factor": 1, "assignments": [], "configs": []}],
                                  "timeout": 30000, "validate_only": False})
            lat.append((time.perf_counter() - t0) * 1000)
            if r.topics[0].error_code != 0:
                raise RuntimeError(f"CreateTopics failed: {r}")
    return lat


def topic_count(port: int) -> int:
    with RawClient(f"127.0.0.1:{port}", timeout=30) as c:
        r = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        return len(r.topics)


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--topics", type=int, default=200)
    args = ap.parse_args()
    fresh, existing, cpu_fresh, cpu_existing, writes = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="single-voter-") as d:
        port = _free_port()
        stop(start(os.path.join(d, "warm"), port)[0])
        for r in range(args.rounds):
            data = os.path.join(d, f"data-{r}")
            port = _free_port()
            proc, took, cpu = start(data, port)
            fresh.append(took * 1000)
            if cpu is not None:
                cpu_fresh.append(cpu * 1000)
            try:
                lat = create_topics(port, args.topics)
            finally:
                stop(proc)
            writes += lat
            proc, took, cpu = start(data, port)
            existing.append(took * 1000)
            if cpu is not None:
                cpu_existing.append(cpu * 1000)
            try:
                have = topic_count(port)
            finally:
                stop(proc)
            if have != args.topics:
                raise RuntimeError(f"{have} topics after the restart, {args.topics} created")
            log(f"round {r + 1}/{args.rounds}: fresh {fresh[-1]:.0f} ms, existing {existing[-1]:.0f} ms, "
                f"CreateTopics p50 {_pct(lat, 0.5):.2f} ms")
    med = lambda xs: round(statistics.median(xs), 1)  # noqa: E731
    print(json.dumps({"benchmark": "single_voter", "results": {
        "start_fresh_ms": {"median": med(fresh), "min": round(min(fresh), 1), "max": round(max(fresh), 1)},
        "start_existing_ms": {"median": med(existing), "min": round(min(existing), 1),
                              "max": round(max(existing), 1), "topics": args.topics},
        "cpu_to_accepting_ms": {"fresh_median": med(cpu_fresh) if cpu_fresh else None,
                                "existing_median": med(cpu_existing) if cpu_existing else None},
        "create_topics_ms": {"writes": len(writes), "p50": _pct(writes, 0.5), "p99": _pct(writes, 0.99),
                             "mean": round(statistics.mean(writes), 3)},
    }, "loadavg": os.getloadavg(), "machine": machine(), "git_revision": git_revision()}, indent=2))


if __name__ == "__main__":
    main()
