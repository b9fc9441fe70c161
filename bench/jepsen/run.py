"""A Jepsen-style run against a real multi-process hightide cluster (issue 15).

Run:  .venv/bin/python bench/jepsen/run.py --brokers 3 --duration 120 \\
          --faults kill,pause,partition,controller --seed 1 [--broken]

Starts one controller and ``--brokers`` brokers behind fault proxies
(:mod:`nemesis`), creates one topic, runs the clients of :mod:`workload` (idempotent
acks=all producers, two consumer groups — classic and KIP-848 — polling and committing,
a share group, a committed-offset reader) while the nemesis injects faults for
``--duration`` seconds; then heals everything, lets the clients settle, stops them,
reads every partition in full and checks the history (:mod:`checker`).

``--broken`` runs the configuration that must lose writes, to show the checker can fail:
``acks=1`` without idempotence, ``min.insync.replicas=1``,
``unclean.leader.election.enable=true``.

``--replication-factor`` defaults to 3 when the cluster accepts it (capped at
``--brokers``), else 1 (reported in the result). With RF=1, ``flush.messages=1`` is set
on the topic (each acknowledged write fsynced: only a lost disk could lose it).

Writes one JSON result (``bench/results/<date>-jepsen-<name>.json``: the checker's report
with a few examples of each anomaly, and how long writes stalled around each kind of
fault, :mod:`availability`) and, with ``--history PATH``, the whole history as
JSON lines (about 200 bytes an operation: 20 MB for a 5-minute run); prints the result;
exits 1 if the checker found an anomaly (0 with ``--broken`` only if it did: the point of
that mode). ``--data-dir`` keeps the nodes' data and logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.jepsen import workload  # noqa: E402
from bench.jepsen.availability import write_gaps  # noqa: E402
from bench.jepsen.checker import check  # noqa: E402
from bench.jepsen.history import History  # noqa: E402
from bench.jepsen.nemesis import FAULTS, Nemesis, ProxiedCluster  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TOPIC = "jepsen"


async def _create_topic(bootstrap: str, partitions: int, rf: int, configs: dict[str, str]) -> int:
    """Create the topic with ``rf`` replicas (0: 3 capped at the brokers, falling back to
    1 if refused); returns the replication factor used."""
    from hightide.client import AdminClient, NewTopic
    from hightide.client.errors import KafkaError
    async with AdminClient(bootstrap, request_timeout_s=20.0) as admin:
        brokers = len((await admin.metadata([])).brokers)
        tries = [rf] if rf > 0 else [min(3, brokers), 1]
        last: Exception | None = None
        for n in dict.fromkeys(tries):
            try:
                await admin.create_topics([NewTopic(TOPIC, partitions, n, dict(configs))])
                return n
            except KafkaError as exc:
                last = exc
        raise RuntimeError(f"cannot create the topic: {last}")


def _settle(cluster: ProxiedCluster, timeout: float) -> None:
    """Every node running, every broker unfenced on every broker (raises NodeFailed)."""
    dead = [n.spec.name for n in cluster.dev.nodes.values() if not n.alive]
    if dead:
        raise RuntimeError(f"nodes not running after healing: {dead}")
    cluster.dev.wait_unfenced(ids=cluster.dev.broker_ids, timeout=timeout)


def run(*, brokers: int = 3, controllers: int = 1, duration: float = 60.0, faults: list[str], seed: int = 1, partitions: int = 6,
        replication_factor: int = 0, producers: int = 3, rate: float = 100.0, broken: bool = False,
        share: bool = True, base_dir: Path | None = None, history_path: Path | None = None,
        progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """One run; returns the JSON-ready result (``result["check"]["valid"]``)."""
    tmp = None
    if base_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="jepsen-")
        base_dir = Path(tmp.name)
    settings: dict[str, Any] = {"unclean.leader.election.enable": "true"} if broken else {}
    cluster = ProxiedCluster(base_dir, brokers, settings, controllers)
    history = History()
    t_start = time.monotonic()
    try:
        cluster.start()
        progress(f"cluster up: {cluster.bootstrap}")
        configs = {"min.insync.replicas": "1"} if broken else {}
        rf = asyncio.run(_create_topic(cluster.bootstrap, partitions, replication_factor, configs))
        if rf == 1 and not broken:
            asyncio.run(_alter_topic(cluster.bootstrap, {"flush.messages": "1"}))
        elif rf > 1 and not broken:
            asyncio.run(_alter_topic(cluster.bootstrap, {"min.insync.replicas": str(min(2, rf))}))
        progress(f"topic {TOPIC}: {partitions} partitions, replication factor {rf}")
        clients = _clients(history, cluster.bootstrap, partitions, producers, rate, broken, share)
        for c in clients:
            c.start()
        nemesis = Nemesis(cluster, history, faults, seed)
        nemesis.run(duration)
        progress(f"{nemesis.injected} faults injected; healing")
        _settle(cluster, 90)
        time.sleep(5)  # clients catch up after the last fault
        for c in clients:
            c.join()
        problems = workload.final_read(history, cluster.bootstrap, TOPIC, partitions)
        report = check(history.events())
    finally:
        cluster.close()
        if history_path is not None:
            history_path.parent.mkdir(parents=True, exist_ok=True)
            history.dump(history_path)
        if tmp is not None:
            tmp.cleanup()
    lost = report["checks"]["lost-write"]
    return {
        "mode": "broken (acks=1, min.insync.replicas=1, unclean.leader.election.enable=true)" if broken
        else "safe (idempotent acks=all)",
        "brokers": brokers, "controllers": controllers, "partitions": partitions, "replication_factor": rf, "producers": producers,
        "faults": faults, "seed": seed, "duration_s": duration,
        "run_s": round(time.monotonic() - t_start, 1),
        "faults_injected": nemesis.injected, "nemesis_errors": nemesis.errors,
        "history_events": len(history), "final_read_problems": problems,
        "first_lost_write_acked_at_s": lost["examples"][0]["t"] if lost["examples"] else None,
        "write_gaps_ms": write_gaps(history.events()),
        "anomalies": {k: v["count"] for k, v in report["checks"].items() if v["count"]},
        "check": report,
    }


async def _alter_topic(bootstrap: str, configs: dict[str, str]) -> None:
    from hightide.client import AdminClient
    from hightide.client.configs import AlterOp, ConfigResource, ResourceType
    async with AdminClient(bootstrap, request_timeout_s=20.0) as admin:
        await admin.incremental_alter_configs(ConfigResource(ResourceType.TOPIC, TOPIC),
                                              [(k, AlterOp.SET, v) for k, v in configs.items()])


def _clients(history: History, bootstrap: str, partitions: int, producers: int, rate: float, broken: bool,
             share: bool) -> list[Any]:
    """Producers, two group members (classic) and one KIP-848 member, the committed
    reader, and a share-group member; in start order (joined in the same order)."""
    prod = workload.Producers(history, bootstrap, TOPIC, partitions, producers, rate=rate,
                              acks="1" if broken else "all", idempotent=not broken)
    members = [workload.GroupMember(history, bootstrap, TOPIC, "classic", f"classic-{i}") for i in range(2)]
    members.append(workload.GroupMember(history, bootstrap, TOPIC, "kip848", "kip848-0", protocol="consumer"))
    out: list[Any] = [prod, *members,
                      workload.CommittedReader(history, bootstrap, TOPIC, partitions, ["classic", "kip848"])]
    if share:
        workload.set_share_reset(bootstrap, "share")
        out.append(workload.ShareMember(history, bootstrap, TOPIC, "share", "share-0"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--controllers", type=int, default=1, help="controller quorum voters")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    ap.add_argument("--faults", default="kill,pause,partition,controller",
                    help=f"comma-separated, from {','.join(FAULTS)}")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--replication-factor", type=int, default=0, help="0: 3 if the cluster accepts it, else 1")
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100.0, help="sends per second per producer")
    ap.add_argument("--broken", action="store_true", help="acks=1, min ISR 1, unclean election: must lose writes")
    ap.add_argument("--no-share", action="store_true")
    ap.add_argument("--name", default=None, help="result file name (default from the mode and seed)")
    ap.add_argument("--data-dir", type=Path, default=None, help="keep the cluster's data and logs here")
    ap.add_argument("--history", type=Path, default=None, help="write the history (JSON lines) here")
    args = ap.parse_args()
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    name = args.name or f"{'broken' if args.broken else 'safe'}-{'-'.join(faults)}-seed{args.seed}"
    result = run(brokers=args.brokers, controllers=args.controllers, duration=args.duration, faults=faults, seed=args.seed,
                 partitions=args.partitions, replication_factor=args.replication_factor, producers=args.producers,
                 rate=args.rate, broken=args.broken, share=not args.no_share, base_dir=args.data_dir,
                 history_path=args.history,
                 progress=lambda s: print(s, file=sys.stderr, flush=True))
    out = RESULTS / f"{time.strftime('%Y-%m-%d')}-jepsen-{name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "check"} | {"stats": result["check"]["stats"]},
                     indent=2))
    print(f"result: {out}", file=sys.stderr)
    valid = result["check"]["valid"]
    sys.exit(0 if (not valid if args.broken else valid) else 1)


if __name__ == "__main__":
    main()
