"""The controller quorum on real processes (issue 14):

* **commit latency** with 1, 3 and 5 controller voters: CreateTopics (one partition)
  sent straight to the active controller (KIP-919 path) — with a quorum the write
  commits once a majority has fetched and fsynced it — p50/p99 over ``--writes``;
* **election time**: processes started → a leader that answers DescribeQuorum, per
  voter count;
* **failover**: 3 voters and 3 brokers; the leader is killed (-9) ``--kills`` times;
  each time: kill → a new leader answers DescribeQuorum (elected), and kill → the first
  CreateTopics through a broker that succeeds (what a client sees); the killed voter is
  restarted and caught up before the next kill. p50/p99 of both.

    .venv/bin/python bench/controller_quorum.py [--writes 200] [--kills 20] [--out FILE]

Prints JSON (and writes it to ``--out``). Wall-clock on this machine (2 shared cores);
the same run measures a small write + fdatasync (the floor of one durable commit). Not
a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hightide.client import AdminClient  # noqa: E402
from hightide.client.cluster import active_controller  # noqa: E402
from hightide.devcluster import DevCluster  # noqa: E402
from tests.rawkafka import RawClient  # noqa: E402

from _limits import emit, git_revision, log, machine  # noqa: E402
from controller_writes import _pct, _register_fake_broker, small_fsync_ms  # noqa: E402

HEARTBEAT_MS, SESSION_MS = 250, 3000


def leader_address(cluster: DevCluster, timeout_s: float = 30.0) -> tuple[int, str]:
    """(id, host:port) of the active controller among the running controllers."""
    servers = [(n.spec.host, n.spec.port) for n in cluster.controllers if n.alive]

    async def go() -> tuple[int, str]:
        conn, quorum = await active_controller(servers, timeout_s=timeout_s)
        await conn.close()
        return quorum.leader_id, cluster.nodes[quorum.leader_id].spec.address
    return asyncio.run(go())


def wait_leader(cluster: DevCluster, other_than: int | None, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            leader, _ = leader_address(cluster, timeout_s=2.0)
            if leader != other_than and cluster.nodes[leader].alive:
                return leader
        except Exception:  # noqa: BLE001 - no leader yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader other than {other_than} within {timeout_s} s")
        time.sleep(0.02)


def commit_latency(voters: int, writes: int) -> dict:
    """Start ``voters`` controllers (no broker), time the election, then ``writes``
    CreateTopics to the leader."""
    with tempfile.TemporaryDirectory() as d, DevCluster.create(
            0, d, n_controllers=voters, heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=60_000,
            settings={"metadata.max.idle.interval.ms": 0}) as cluster:
        started = time.monotonic()
        cluster.start(wait_unfenced=False, timeout=60)
        wait_leader(cluster, None)
        elected_s = time.monotonic() - started
        _, address = leader_address(cluster)
        lat = []
        with RawClient(address) as c:
            _register_fake_broker(c, cluster.cluster_id or "")
            tag = uuid.uuid4().hex[:6]
            for i in range(writes):
                t0 = time.perf_counter()
                r = c.request(19, 7, {"topics": [{"name": f"bench-{tag}-{i}", "num_partitions": 1,
                                                  "replication_factor": 1, "assignments": [], "configs": []}],
                                      "timeout": 30000, "validate_only": False})
                lat.append((time.perf_counter() - t0) * 1000)
                if r.topics[0].error_code != 0:
                    raise RuntimeError(f"CreateTopics failed: {r}")
    return {"voters": voters, "writes": writes, "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99),
            "mean_ms": round(statistics.mean(lat), 3), "election_from_start_ms": round(elapsed_ms(elected_s))}


def elapsed_ms(seconds: float) -> float:
    return seconds * 1000


def create_through_brokers(bootstrap: str, name: str, timeout_s: float = 2.0) -> bool:
    async def go() -> bool:
        async with AdminClient(bootstrap, request_timeout_s=timeout_s) as admin:
            res = await admin.create_topics([name], timeout_s=timeout_s, raise_on_error=False)
        return res.get(name) is None
    try:
        return asyncio.run(go())
    except Exception:  # noqa: BLE001 - any failure is "not yet"
        return False


def caught_up(cluster: DevCluster, voter: int, since_ms: int) -> bool:
    servers = [(n.spec.host, n.spec.port) for n in cluster.controllers if n.alive]

    async def go() -> bool:
        conn, quorum = await active_controller(servers, timeout_s=2.0)
        await conn.close()
        v = next((v for v in quorum.voters if v.node_id == voter), None)
        return v is not None and v.last_caught_up_timestamp >= since_ms
    try:
        return asyncio.run(go())
    except Exception:  # noqa: BLE001
        return False


def failover(kills: int) -> dict:
    elected, resumed, fenced_events = [], [], 0
    with tempfile.TemporaryDirectory() as d, DevCluster.create(
            3, d, n_controllers=3, heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS) as cluster:
        cluster.start(timeout=90)
        for k in range(kills):
            leader = wait_leader(cluster, None)
            t0 = time.monotonic()
            cluster.nodes[leader].kill()
            n, elected_at, resumed_at = 0, None, None
            while resumed_at is None or elected_at is None:
                if elected_at is None:
                    try:
                        new, _ = leader_address(cluster, timeout_s=0.5)
                        if new != leader:
                            elected_at = time.monotonic()
                    except Exception:  # noqa: BLE001 - not yet
                        pass
                if resumed_at is None:
                    n += 1
                    if create_through_brokers(cluster.bootstrap, f"kill{k}-{n}"):
                        resumed_at = time.monotonic()
                if time.monotonic() - t0 > 60:
                    raise RuntimeError(f"kill {k}: no failover within 60 s")
            elected.append(elapsed_ms(elected_at - t0))
            resumed.append(elapsed_ms(resumed_at - t0))
            if not cluster.unfenced_everywhere():
                fenced_events += 1
            log(f"kill {k + 1}/{kills} of {leader}: elected {elected[-1]:.0f} ms, CreateTopics {resumed[-1]:.0f} ms")
            restarted_ms = int(time.time() * 1000)
            cluster.nodes[leader].start().wait_listening(30)
            deadline = time.monotonic() + 30
            while not caught_up(cluster, leader, restarted_ms):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"voter {leader} did not catch up")
                time.sleep(0.1)
    return {"voters": 3, "brokers": 3, "kills": kills,
            "kill_to_elected_ms": {"p50": _pct(elected, 0.5), "p99": _pct(elected, 0.99), "max": round(max(elected))},
            "kill_to_first_create_topics_ms": {"p50": _pct(resumed, 0.5), "p99": _pct(resumed, 0.99),
                                               "max": round(max(resumed))},
            "checks_with_a_fenced_broker_after_failover": fenced_events}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    commits = []
    for voters in (1, 3, 5):
        log(f"{args.writes} writes with {voters} voter(s)")
        commits.append(commit_latency(voters, args.writes))
    log(f"{args.kills} leader kills")
    fo = failover(args.kills)
    with tempfile.TemporaryDirectory() as d:
        fsync = small_fsync_ms(d)
    out = {"machine": machine(), "revision": git_revision(), "small_write_fdatasync": fsync,
           "commit_latency": commits, "failover": fo}
    emit(out, args.out)


if __name__ == "__main__":
    main()
