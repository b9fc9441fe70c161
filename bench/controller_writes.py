"""Controller metadata writes: latency of a direct write to a controller-only process
(KIP-919 path, CreateTopics of one partition: validate, append, fsync, apply, answer) with
no real brokers (one raw-registered broker so placement succeeds) and with N real brokers
following the log (heartbeats every 250 ms, long-polling metadata Fetches woken by every
commit); plus the NoOp cadence of an idle log (the gaps between NoOp batches' timestamps).
The two configurations run interleaved (``--rounds`` each, alternating), and the same run
measures a small write + fdatasync in the same temp dir: the floor of a durable metadata
write on this disk.

    .venv/bin/python bench/controller_writes.py [--writes 200] [--brokers 3] [--rounds 2]

Prints JSON. Numbers are wall-clock on this machine (2 shared cores): ratios between the
rows matter more than the values. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kio.index import load_request_schema  # noqa: E402

from hightide.cluster import records as R  # noqa: E402
from hightide.cluster.broker_records import NoOpRecord  # noqa: E402
from hightide.devcluster import DevCluster  # noqa: E402
from hightide.protocol.broker_heartbeat_response import decode_broker_heartbeat_response  # noqa: E402
from hightide.protocol.build import materialize  # noqa: E402
from hightide.protocol.codec import encode_request  # noqa: E402
from hightide.protocol.records import decode_records, validate_batches  # noqa: E402
from tests.rawkafka import RawClient  # noqa: E402

from _limits import git_revision, log, machine  # noqa: E402

METADATA_TOPIC_ID = uuid.UUID(int=1)


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 3)


def _fetch(c: RawClient, cluster_id: str, offset: int) -> object:
    return c.request(1, 17, {
        "cluster_id": cluster_id, "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0,
        "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic_id": METADATA_TOPIC_ID, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 24, "replica_directory_id": None}]}]})


def _register_fake_broker(c: RawClient, cluster_id: str, broker_id: int = 900) -> None:
    reply = c.request(62, 4, {
        "broker_id": broker_id, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 25}],
        "rack": None})
    req = materialize(load_request_schema(63, 2), {"broker_id": broker_id, "broker_epoch": reply.broker_epoch,
                                                    "current_metadata_offset": reply.broker_epoch,
                                                    "want_fence": False, "want_shut_down": False})
    c.corr += 1
    c.send_bytes(encode_request(63, 2, c.corr, "bench", req))
    decode_broker_heartbeat_response(2, c.recv_frame())


def small_fsync_ms(directory: str, n: int = 200) -> dict:
    """p50/p99 of a 200-byte ``os.write`` + ``os.fdatasync`` (what one metadata commit pays)."""
    import os
    fd, path = tempfile.mkstemp(dir=directory)
    lat = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, b"x" * 200)
            os.fdatasync(fd)
            lat.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99)}


def write_latencies(n_brokers: int, writes: int) -> list[float]:
    with tempfile.TemporaryDirectory() as d, DevCluster.create(
            n_brokers, d, heartbeat_interval_ms=250, session_timeout_ms=60_000,
            settings={"metadata.max.idle.interval.ms": 0}) as cluster:
        cluster.start(wait_unfenced=n_brokers > 0, timeout=60)
        cid = cluster.cluster_id or ""
        with RawClient(cluster.bootstrap_controller) as c:
            if n_brokers == 0:
                _register_fake_broker(c, cid)
            lat = []
            tag = uuid.uuid4().hex[:6]
            for i in range(writes):
                t0 = time.perf_counter()
                r = c.request(19, 7, {"topics": [{"name": f"bench-{tag}-{i}", "num_partitions": 1, "replication_factor": 1,
                                                  "assignments": [], "configs": []}],
                                      "timeout": 30000, "validate_only": False})
                lat.append((time.perf_counter() - t0) * 1000)
                if r.topics[0].error_code != 0:
                    raise RuntimeError(f"CreateTopics failed: {r}")
        return lat


def summary(n_brokers: int, lat: list[float]) -> dict:
    return {"brokers": n_brokers, "writes": len(lat), "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99),
            "mean_ms": round(statistics.mean(lat), 3)}


def noop_cadence(idle_ms: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as d, DevCluster.create(
            0, d, settings={"metadata.max.idle.interval.ms": idle_ms}) as cluster:
        cluster.start(wait_unfenced=False, timeout=60)
        time.sleep(seconds)
        with RawClient(cluster.bootstrap_controller) as c:
            part = _fetch(c, cluster.cluster_id or "", 0).responses[0].partitions[0]  # type: ignore[attr-defined]
            data = bytes(part.records or b"")
            stamps = []
            for h in validate_batches(data, client_origin=False):
                if h.is_control:  # Raft's LeaderChange / voter batches: not metadata records
                    continue
                for rec in decode_records(memoryview(data)[h.position:h.position + h.size]):
                    if rec.value is not None and isinstance(R.decode(rec.value), NoOpRecord):
                        stamps.append(rec.timestamp)
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        return {"idle_interval_ms": idle_ms, "seconds": seconds, "noops": len(stamps),
                "gap_p50_ms": _pct(gaps, 0.5) if gaps else None, "gap_max_ms": max(gaps) if gaps else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    lat: dict[int, list[float]] = {0: [], args.brokers: []}
    for r in range(args.rounds):
        for n in (0, args.brokers):
            log(f"round {r + 1}: {args.writes // args.rounds} writes with {n} broker(s) following")
            lat[n] += write_latencies(n, args.writes // args.rounds)
    with tempfile.TemporaryDirectory() as d:
        fsync = small_fsync_ms(d)
    out = {"machine": machine(), "revision": git_revision(), "small_write_fdatasync": fsync,
           "write_latency": [summary(n, xs) for n, xs in lat.items()],
           "noop_cadence": [noop_cadence(500, 10.0)]}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
