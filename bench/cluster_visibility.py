"""Write → visible on every broker: how long a metadata write takes to show up on all
brokers of a local cluster, with ``metadata.read.consistency`` acknowledged and local.

For each size (``single``: today's one combined process, as a baseline; ``N``: one
controller and N brokers from hightide.devcluster) and each consistency, ``--samples``
trials of two writes, each sent through broker ``i mod N`` in turn:

- ``create_topic``: CreateTopics of a new 1-partition topic; then Metadata of that topic
  on every broker until it lists the topic without error;
- ``alter_config``: IncrementalAlterConfigs of ``retention.ms`` on a topic; then
  DescribeConfigs on every broker until it shows the new value.

Every broker is polled back to back (no sleep) from the moment the write is answered.
Reported per (size, consistency, write): ``ack_ms`` (send → answer), ``all_visible_ms``
(send → the last broker's first read that sees it), ``first_read_misses`` (reads, one
per broker and trial, made right after the answer that did not see the write yet: with
``acknowledged`` the seed-004 guarantee says 0) — p50/p99/max over the trials. The
machine's load average and the commit are recorded; nothing is asserted.

    .venv/bin/python bench/cluster_visibility.py [--sizes single,1,3,5] [--samples 50]

Prints JSON and writes it to bench/results/<date>-cluster_visibility.json (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _limits import git_revision, log, machine  # noqa: E402

from hightide.client.cluster import connect_any  # noqa: E402
from hightide.client.connection import BrokerConnection  # noqa: E402
from hightide.devcluster import DevCluster, NodeProcess, plan, single_node  # noqa: E402

TOPIC = 2  # ConfigResource type
POLL_TIMEOUT_S = 20.0


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    if not xs:
        return {}
    return {"p50": round(statistics.median(xs), 2), "p99": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 2),
            "max": round(xs[-1], 2), "min": round(xs[0], 2)}


async def _metadata_has(conn: BrokerConnection, topic: str) -> bool:
    v = conn.pick_version(3, 12, 1)
    resp = await conn.request(3, v, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False,
                                     "include_cluster_authorized_operations": False})
    return any(t.name == topic and t.error_code == 0 and t.partitions for t in resp.topics)


async def _config_is(conn: BrokerConnection, topic: str, name: str, value: str) -> bool:
    v = conn.pick_version(32, 4, 1)
    resp = await conn.request(32, v, {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                                                     "configuration_keys": [name]}],
                                      "include_synonyms": False, "include_documentation": False})
    return any(r.error_code == 0 and any(c.name == name and c.value == value for c in r.configs) for r in resp.results)


async def _create(conn: BrokerConnection, topic: str) -> None:
    v = conn.pick_version(19, 7, 2)
    resp = await conn.request(19, v, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                                  "assignments": [], "configs": []}],
                                      "timeout": 30000, "validate_only": False})
    for t in resp.topics:
        if t.error_code != 0:
            raise RuntimeError(f"CreateTopics {topic}: error {t.error_code} {t.error_message}")


async def _first_create(conn: BrokerConnection, topic: str) -> None:
    """CreateTopics, retried while the controller has no unfenced broker yet (a lone
    broker may describe itself as unfenced before it has applied its own registration)."""
    deadline = time.perf_counter() + 30
    while True:
        try:
            return await _create(conn, topic)
        except RuntimeError as exc:
            if "error 38" not in str(exc) or time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _alter(conn: BrokerConnection, topic: str, name: str, value: str) -> None:
    v = conn.pick_version(44, 1, 0)
    resp = await conn.request(44, v, {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configs": [
        {"name": name, "config_operation": 0, "value": value}]}], "validate_only": False})
    for r in resp.responses:
        if r.error_code != 0:
            raise RuntimeError(f"IncrementalAlterConfigs {topic}: error {r.error_code} {r.error_message}")


async def _until_visible(conn: BrokerConnection, check: Any, t0: float) -> tuple[float, bool]:
    """(ms from ``t0`` to the first read that sees the write, whether the first read did)."""
    first = True
    deadline = time.perf_counter() + POLL_TIMEOUT_S
    while True:
        if await check(conn):
            return (time.perf_counter() - t0) * 1000, first
        first = False
        if time.perf_counter() > deadline:
            raise RuntimeError(f"write not visible on {conn.host}:{conn.port} after {POLL_TIMEOUT_S} s")


async def _trial(conns: list[BrokerConnection], writer: int, write: Any, check: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    await write(conns[writer])
    ack = (time.perf_counter() - t0) * 1000
    seen = await asyncio.gather(*(_until_visible(c, check, t0) for c in conns))
    return {"ack_ms": ack, "all_visible_ms": max(s[0] for s in seen), "misses": sum(not s[1] for s in seen)}


async def measure(addresses: list[tuple[str, int]], samples: int, tag: str) -> dict[str, Any]:
    conns = [await connect_any([a], timeout_s=30.0) for a in addresses]
    try:
        out: dict[str, Any] = {}
        base = f"vis-{tag}-{os.getpid()}"
        await _first_create(conns[0], f"{base}-cfg")
        for c in conns:  # the config topic exists everywhere before the alter trials
            await _until_visible(c, lambda conn: _metadata_has(conn, f"{base}-cfg"), time.perf_counter())
        for op in ("create_topic", "alter_config"):
            trials = []
            for i in range(samples):
                if op == "create_topic":
                    topic = f"{base}-{i}"
                    write = (lambda conn, t=topic: _create(conn, t))
                    check = (lambda conn, t=topic: _metadata_has(conn, t))
                else:
                    value = str(3_600_000 + i)
                    write = (lambda conn, v=value: _alter(conn, f"{base}-cfg", "retention.ms", v))
                    check = (lambda conn, v=value: _config_is(conn, f"{base}-cfg", "retention.ms", v))
                trials.append(await _trial(conns, i % len(conns), write, check))
            out[op] = {"samples": samples, "ack_ms": _pct([t["ack_ms"] for t in trials]),
                       "all_visible_ms": _pct([t["all_visible_ms"] for t in trials]),
                       "first_read_misses": sum(t["misses"] for t in trials),
                       "first_reads": samples * len(conns),
                       "trials_with_a_miss": sum(1 for t in trials if t["misses"])}
            log(f"{tag} {op}: ack p50 {out[op]['ack_ms']['p50']} ms, all visible p50 "
                f"{out[op]['all_visible_ms']['p50']} p99 {out[op]['all_visible_ms']['p99']} ms, "
                f"misses {out[op]['first_read_misses']}/{out[op]['first_reads']}")
        return out
    finally:
        await asyncio.gather(*(c.close() for c in conns))


def run_single(base: Path, samples: int) -> dict[str, Any]:
    """Today's single combined node: one process is broker and controller."""
    spec = single_node(base)
    node = NodeProcess(spec, base / "single.log")
    port = spec.port
    node.start()
    try:
        node.wait_listening(30)
        return asyncio.run(measure([(spec.host, port)], samples, "single"))
    finally:
        node.stop()


def run_cluster(base: Path, n: int, consistency: str, samples: int) -> dict[str, Any]:
    with DevCluster(plan(n, base, read_consistency=consistency), base) as c:
        c.start(timeout=120)
        return asyncio.run(measure([(b.spec.host, b.spec.port) for b in c.brokers], samples, f"{n}-{consistency}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="single,1,3,5", help="comma-separated: single and/or broker counts")
    ap.add_argument("--consistency", default="acknowledged,local")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/<date>-cluster_visibility.json)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="vis-") as d:
        for size in args.sizes.split(","):
            if size == "single":
                log("single node")
                results.append({"brokers": "single", "consistency": "-", **run_single(Path(d), args.samples)})
                continue
            for consistency in args.consistency.split(","):
                log(f"{size} brokers, {consistency}")
                base = Path(d) / f"c{size}-{consistency}"
                results.append({"brokers": int(size), "consistency": consistency,
                                **run_cluster(base, int(size), consistency, args.samples)})
    doc = {"benchmark": "cluster_visibility", "results": results, "loadavg": os.getloadavg(),
           "machine": machine(), "git_revision": git_revision()}
    text = json.dumps(doc, indent=2)
    print(text)
    out = Path(args.out) if args.out else \
        Path(__file__).resolve().parent / "results" / f"{time.strftime('%Y-%m-%d')}-cluster_visibility.json"
    out.write_text(text + "\n")
    log(f"written to {out}")


if __name__ == "__main__":
    main()
