"""Metadata writes per second through the brokers (issue 33): 3 controllers (a Raft
quorum) and 3 brokers (``hightide dev-cluster`` layout, defaults: heartbeats every 2 s,
``metadata.read.consistency=acknowledged``), ``--topics`` RF=3 topics of one partition
created through the brokers (each request goes to broker ``i mod 3``, which forwards it
to the active controller in an Envelope and answers once every unfenced broker has
applied it: seed 004's read-after-write):

* ``batched``: ``--batches`` CreateTopics requests of ``topics / batches`` topics each,
  one after the other;
* ``pipelined``: one topic per CreateTopics, ``--in-flight`` requests outstanding at a
  time (one blocking connection per worker thread, workers spread over the brokers);
* ``direct-batched``, ``direct-pipelined``: the same sent to the active controller
  itself (KIP-919's ``--bootstrap-controller``): no read gate, so the controller's own
  rate while the brokers follow its log; ``visible_on_every_broker_after_s`` is when
  every broker's Metadata showed all of them;
* ``quorum-batched``, ``quorum-pipelined``: the same with no broker process (3 brokers
  registered by hand): the 3-voter quorum alone.

Per case: topics/s, the request latency p50/p99/max, the CPU the controller and the
broker processes used per topic (``cpu_ms_per_topic``, all threads, from ``/proc``, to the
last answer or, for ``direct-*``, to every broker showing every topic: the wall-clock rate
moves with the machine's load, this much less), and how many answers took longer
than 1 s (the read gate's ``metadata.read.max.wait.ms`` is 2 s: a slow answer means the
lowest acknowledged offset did not cover the write in time), plus the number of
``read_gate`` warnings the brokers logged (answers given without read-after-write).
Each case runs on a fresh cluster. After each case every broker is asked for the
topics (Metadata): all must be there.

    .venv/bin/python bench/controller_throughput.py [--topics 1000] [--batches 8] [--in-flight 8] [--out FILE]

Prints JSON (and writes it to ``--out``). Wall-clock on this machine (2 shared cores:
the 6 processes and the client share them). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hightide.devcluster import DevCluster  # noqa: E402
from tests.rawkafka import RawClient  # noqa: E402

from _limits import emit, git_revision, log, machine, process_cpu_s  # noqa: E402
from controller_quorum import leader_address, wait_leader  # noqa: E402
from controller_writes import _pct, _register_fake_broker  # noqa: E402


def _create(c: RawClient, names: list[str]) -> float:
    t0 = time.perf_counter()
    r = c.request(19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 3,
                                      "assignments": [], "configs": []} for n in names],
                          "timeout": 60000, "validate_only": False})
    took = time.perf_counter() - t0
    bad = [(t.name, t.error_code, t.error_message) for t in r.topics if t.error_code != 0]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad[:3]}")
    return took


def _visible(address: str, names: set[str]) -> int:
    with RawClient(address, timeout=60) as c:
        r = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
    return len(names & {t.name for t in r.topics})


def _wait_visible(addresses: list[str], names: set[str], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(_visible(a, names) < len(names) for a in addresses):
        if time.monotonic() > deadline:
            raise RuntimeError("the topics did not reach every broker")
        time.sleep(0.02)


def _gate_warnings(cluster: DevCluster) -> int:
    n = 0
    for node in cluster.brokers:
        try:
            n += node.log_path.read_text(errors="replace").count("without read-after-write")
        except OSError:
            pass
    return n


def run_case(case: str, topics: int, batches: int, in_flight: int, logs: str | None = None) -> dict:
    tag = uuid.uuid4().hex[:6]
    names = [f"t{tag}-{i}" for i in range(topics)]
    quorum_only = case.startswith("quorum")
    layout: dict = {"session_timeout_ms": 600_000} if quorum_only else {}
    with tempfile.TemporaryDirectory() as d, DevCluster.create(0 if quorum_only else 3, d, n_controllers=3,
                                                               **layout) as cluster:
        cluster.start(timeout=90, wait_unfenced=not quorum_only)
        brokers = [n.spec.address for n in cluster.brokers]
        # "direct-*": to the active controller itself (KIP-919), no read gate: the
        # controller's own rate while the 3 brokers follow the log. "quorum-*": the same
        # with no broker process at all (3 brokers registered by hand, never heartbeating
        # again): the controller quorum alone.
        if quorum_only:
            wait_leader(cluster, None)
        addresses = [leader_address(cluster)[1]] if case.startswith(("direct", "quorum")) else brokers
        if quorum_only:
            with RawClient(addresses[0]) as c:
                for b in range(3):
                    _register_fake_broker(c, cluster.cluster_id or "", 900 + b)
        lat: list[float] = []
        controller_pids = [n.pid for n in cluster.controllers]
        broker_pids = [n.pid for n in cluster.brokers]
        cpu0 = (process_cpu_s(controller_pids), process_cpu_s(broker_pids))
        t0 = time.perf_counter()
        if case.endswith("batched"):
            size = -(-topics // batches)
            with RawClient(addresses[0], timeout=120) as c:
                for i in range(0, topics, size):
                    lat.append(_create(c, names[i:i + size]))
        else:
            work: queue.SimpleQueue[str] = queue.SimpleQueue()
            for n in names:
                work.put(n)
            errors: list[BaseException] = []

            def worker(w: int) -> None:
                try:
                    with RawClient(addresses[w % len(addresses)], timeout=120) as c:
                        while True:
                            try:
                                name = work.get_nowait()
                            except queue.Empty:
                                return
                            lat.append(_create(c, [name]))
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
            threads = [threading.Thread(target=worker, args=(w,)) for w in range(in_flight)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        elapsed = time.perf_counter() - t0
        if case.startswith("direct"):
            _wait_visible(brokers, set(names))
        elapsed_visible = time.perf_counter() - t0
        cpu_ms = {"controllers": round((process_cpu_s(controller_pids) - cpu0[0]) * 1000 / topics, 3),
                  "brokers": round((process_cpu_s(broker_pids) - cpu0[1]) * 1000 / topics, 3)}
        visible = [_visible(a, set(names)) for a in brokers]
        warnings = _gate_warnings(cluster)
        if logs:
            cluster.stop()
            shutil.copytree(Path(d) / "logs", Path(logs) / case, dirs_exist_ok=True)
    lat_ms = [x * 1000 for x in lat]
    return {"case": case, "topics": topics, "requests": len(lat),
            "topics_per_request": topics // len(lat), "in_flight": 1 if case.endswith("batched") else in_flight,
            "seconds": round(elapsed, 3), "topics_per_s": round(topics / elapsed, 1),
            "visible_on_every_broker_after_s": round(elapsed_visible, 3),
            "request_ms": {"p50": _pct(lat_ms, 0.5), "p99": _pct(lat_ms, 0.99), "max": round(max(lat_ms), 1)},
            "answers_over_1s": sum(1 for x in lat_ms if x > 1000),
            "read_gate_warnings": warnings, "visible_on_each_broker": visible,
            "cpu_ms_per_topic": cpu_ms}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--cases", default="batched,pipelined,direct-batched,direct-pipelined")
    ap.add_argument("--out", default=None)
    ap.add_argument("--logs", default=None, help="copy the nodes' logs under this directory")
    args = ap.parse_args()
    results = []
    for case in args.cases.split(","):
        log(f"{case}: {args.topics} RF=3 topics")
        results.append(run_case(case, args.topics, args.batches, args.in_flight, args.logs))
        log(json.dumps(results[-1]))
    out = {"machine": machine(), "revision": git_revision(), "controllers": 3, "brokers": 3,
           "results": results}
    emit(out, args.out)


if __name__ == "__main__":
    main()
