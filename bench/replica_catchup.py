"""Follower catch-up: how fast a replica that was down copies its leader's log.

A local cluster (one controller, two brokers from hightide.devcluster) with an RF=2
topic of one partition (min.insync.replicas=1). The follower is stopped (SIGTERM), the
leader gets ``--mb`` MB of records (acks=1, confluent-kafka, ``--value-bytes`` values),
then the follower is started again and the partition directories are polled until the
follower's ``.log`` bytes equal the leader's. Reported: the bytes copied, the time from the
follower's restart (process start, registration and first fetch included) and from its
first new byte on disk to the end, and the MB/s of each, next to the same run's physical
limits (loopback TCP, page-cache write). Nothing is asserted.

    .venv/bin/python bench/replica_catchup.py [--mb 200] [--value-bytes 1000]

Prints JSON and writes it to bench/results/<date>-replica_catchup.json (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _limits import MB, git_revision, log, machine, measure  # noqa: E402

from hightide.client.connection import BrokerConnection  # noqa: E402
from hightide.devcluster import DevCluster, plan  # noqa: E402

TOPIC = "catchup"


def log_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in (data_dir / f"{TOPIC}-0").glob("*.log"))


async def request(address: str, api: int, version: int, body: dict[str, Any]) -> Any:
    host, port = address.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), "bench-catchup", request_timeout_s=60)
    await conn.connect()
    try:
        return await conn.request(api, version, body)
    finally:
        await conn.close()


def leader_of(address: str) -> int:
    resp = asyncio.run(request(address, 3, 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                                "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False}))
    parts = resp.topics[0].partitions
    return int(parts[0].leader_id) if parts and not parts[0].error_code else -1


def wait(cond: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def produce(bootstrap: str, total: int, value_bytes: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 1 << 20})
    value = b"x" * value_bytes
    t0 = time.monotonic()
    for _ in range(total // value_bytes):
        while True:
            try:
                p.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    return time.monotonic() - t0


def run(mb: int, value_bytes: int, base: Path) -> dict[str, Any]:
    cluster = DevCluster(plan(2, base, heartbeat_interval_ms=250, session_timeout_ms=3000), base)
    try:
        cluster.start(timeout=60)
        a0 = cluster.nodes[0].spec.address
        resp = asyncio.run(request(a0, 19, 7, {"topics": [
            {"name": TOPIC, "num_partitions": 1, "replication_factor": 2, "assignments": [],
             "configs": [{"name": "min.insync.replicas", "value": "1"}]}], "timeout": 30_000,
            "validate_only": False}))
        assert resp.topics[0].error_code == 0, resp.topics[0].error_message
        leader = wait(lambda: (leader_of(a0),) if leader_of(a0) >= 0 else None, 30, "a leader")[0]
        follower = 1 - leader
        lead_dir = cluster.nodes[leader].spec.data_dir
        follow_dir = cluster.nodes[follower].spec.data_dir
        cluster.nodes[follower].stop()
        log(f"producing {mb} MB to broker {leader} with broker {follower} down")
        produce_s = produce(cluster.nodes[leader].spec.address, mb * MB, value_bytes)
        total = log_bytes(lead_dir)
        before = log_bytes(follow_dir)
        log(f"leader has {total / MB:.1f} MB; restarting broker {follower}")
        t0 = time.monotonic()
        cluster.nodes[follower].start()
        first = wait(lambda: time.monotonic() if log_bytes(follow_dir) > before else None, 120, "the first byte",
                     0.005)
        wait(lambda: log_bytes(follow_dir) >= total, 600, "the follower to catch up", 0.01)
        end = time.monotonic()
        copied = total - before
        return {"copied_mb": round(copied / MB, 1), "produce_mb_s": round(total / MB / produce_s, 1),
                "from_restart_s": round(end - t0, 2), "from_restart_mb_s": round(copied / MB / (end - t0), 1),
                "from_first_byte_s": round(end - first, 2),
                "catchup_mb_s": round(copied / MB / max(end - first, 1e-6), 1)}
    finally:
        cluster.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hightide-catchup-") as tmp:
        limits = measure(tmp)
        result = run(args.mb, args.value_bytes, Path(tmp) / "cluster")
    out = {"benchmark": "replica_catchup", "mb": args.mb, "value_bytes": args.value_bytes, "result": result,
           "limits": limits, "machine": machine(), "commit": git_revision()}
    text = json.dumps(out, indent=2)
    print(text)
    path = Path(args.out) if args.out else (Path(__file__).parent / "results" /
                                            f"{time.strftime('%Y-%m-%d')}-replica_catchup.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


if __name__ == "__main__":
    main()
