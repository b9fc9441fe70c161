"""``hightide topics describe`` and the exporter's partition series against a real
three-broker cluster with a replicated topic: all in sync, then a broker killed — the
partitions it was in show a smaller ISR (under-replicated), the ones it led a new
leader, and the report flags select them as kafka-topics.sh does."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from hightide.cli import main
from hightide.client import NewTopic
from hightide.monitoring.partitions import partition_snapshot

from .harness import SESSION_MS


def _describe(c, *args: str) -> str:
    r = CliRunner().invoke(main, ["topics", "describe", *args, "-b", c.address(0)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_describe_and_partition_series_follow_a_killed_broker(cluster) -> None:
    c = cluster(3)

    async def create() -> None:
        async with c.admin(0) as admin:
            await admin.create_topics([NewTopic("replicated", 3, 3, {"min.insync.replicas": "2"})])
    asyncio.run(create())

    lines = _describe(c, "replicated").splitlines()
    assert lines[0].startswith("Topic: replicated\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=2" in lines[0]
    rows = json.loads(_describe(c, "replicated", "-o", "json"))[0]["partitions"]
    assert [sorted(r["replicas"]) for r in rows] == [[0, 1, 2]] * 3
    assert all(sorted(r["isr"]) == [0, 1, 2] and r["leader"] == r["replicas"][0] for r in rows), rows
    assert _describe(c, "replicated", "--under-replicated-partitions") == ""

    c.kill(2)
    c.wait_fenced(2, timeout=SESSION_MS / 1000 + 15)

    def shrunk() -> list[dict]:
        got = json.loads(_describe(c, "replicated", "-o", "json"))[0]["partitions"]
        return got if all(2 not in r["isr"] for r in got) else []
    rows = c.wait_until(shrunk, 30, what="broker 2 out of every ISR")
    assert all(r["leader"] in (0, 1) and r["under_replicated"] and r["at_min_isr"] for r in rows), rows
    under = _describe(c, "replicated", "--under-replicated-partitions").splitlines()
    assert [line.split("\t")[2] for line in under] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert all("\tIsr: " in line and "2" not in line.split("\tIsr: ")[1].split("\t")[0] for line in under)
    assert _describe(c, "replicated", "--unavailable-partitions") == ""

    async def series() -> list:
        async with c.admin(0) as admin:
            return await partition_snapshot(admin)
    parts = [p for p in asyncio.run(series()) if p.topic == "replicated"]
    assert [(len(p.replicas), len(p.isr), p.under_replicated, p.offline) for p in parts] == [(3, 2, True, False)] * 3
