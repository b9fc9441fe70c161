"""DescribeLogDirs on each broker of a cluster and UnregisterBroker of a stopped broker
(issue 29 items 5, 8), with kafka-python and hightide's CLI against a controller and three
brokers: every broker answers for its own logs (leader and follower replicas), and a
decommissioned broker's registration is removed through any broker (forwarded to the
controller) so ``hightide brokers`` no longer lists it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import NewTopic

from .harness import SESSION_MS

pytestmark = pytest.mark.integration


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def _log_bytes(data_dir: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (data_dir / f"{topic}-{partition}").glob("*.log"))


def test_log_dirs_per_broker_and_unregistering_a_stopped_broker(cluster) -> None:
    from kafka.admin import KafkaAdminClient

    from tests.integration.clients import Rec, confluent_produce
    c = cluster(3)

    async def create() -> dict[int, tuple[int, ...]]:
        async with c.admin(0) as admin:
            await admin.create_topics([NewTopic("sized", 6, 2)])
            md = await admin.metadata(["sized"])
            return {p: tuple(pm.replicas) for p, pm in md.topics["sized"].partitions.items()}
    replicas = asyncio.run(create())
    now = int(time.time() * 1000)
    confluent_produce(c.bootstrap, "sized", [Rec(i % 6, b"k", b"v" * 300, (), now) for i in range(60)])

    # every broker answers DescribeLogDirs for the replicas it holds, with their on-disk size
    def hosted() -> dict[int, dict[int, int]]:
        admin = KafkaAdminClient(bootstrap_servers=c.address(1), request_timeout_ms=15000)
        try:
            answers = admin.describe_log_dirs(topic_partitions=["sized"])
        finally:
            admin.close()
        out = {}
        for a in answers:
            (d,) = a["log_dirs"]
            assert d["error_code"] == 0 and d["log_dir"] == str(c.node(a["broker"]).spec.data_dir.resolve())
            out[a["broker"]] = {p["partition_index"]: p["partition_size"] for t in d["topics"] for p in t["partitions"]
                                if t["name"] == "sized"}
        return out

    def replicated() -> dict[int, dict[int, int]] | None:  # followers' copies caught up with their leaders
        got = hosted()
        sizes = {p: {got[b].get(p) for b in rs} for p, rs in replicas.items()}
        return got if all(len(s) == 1 and None not in s for s in sizes.values()) else None
    got = c.wait_until(replicated, 30, what="every replica's size reported equal")
    assert sorted(got) == [0, 1, 2]
    for b, parts in got.items():
        assert sorted(parts) == sorted(p for p, rs in replicas.items() if b in rs)  # its own replicas only
        for p, size in parts.items():
            assert size == _log_bytes(c.node(b).spec.data_dir, "sized", p) > 0

    # the same sizes in `hightide topics describe` (the leader's copy per partition)
    code, out = _cli("topics", "describe", "sized", "-b", c.address(2), "-o", "json")
    assert code == 0, out
    doc = json.loads(out)[0]
    assert {r["partition"]: r["size_bytes"] for r in doc["partitions"]} == {
        r["partition"]: got[r["leader"]][r["partition"]] for r in doc["partitions"]}
    assert doc["size_bytes"] == sum(r["size_bytes"] for r in doc["partitions"])

    # a decommissioned broker: stopped, fenced, then unregistered through another broker
    code, out = _cli("brokers", "unregister", "2", "-b", c.address(0))  # Kafka: an active broker may be too;
    assert code == 0, out                                                 # it registers again at once
    c.wait_until(lambda: c.unfenced_everywhere(), 30, what="broker 2 registered again")
    assert c.terminate(2) == 0
    c.wait_fenced(2, timeout=SESSION_MS / 1000 + 15)
    code, out = _cli("brokers", "unregister", "--id", "2", "-b", c.address(0))
    assert (code, out.strip()) == (0, "Broker 2 is no longer registered.")

    def listed() -> list[int] | None:
        code, out = _cli("brokers", "-b", c.address(1), "-o", "json")
        ids = [r["id"] for r in json.loads(out)] if code == 0 else None
        return ids if ids == [0, 1] else None
    c.wait_until(listed, 15, what="broker 2 gone from `hightide brokers`")
    code, out = _cli("brokers", "unregister", "2", "-b", c.address(1))
    assert code == 1 and "[BROKER_ID_NOT_REGISTERED] Broker ID 2 is not currently registered" in out

    # DescribeTopicPartitions (read-gated like Metadata): broker 2's replicas are offline now
    admin = KafkaAdminClient(bootstrap_servers=c.address(1), request_timeout_ms=15000)
    try:
        page = admin.describe_topic_partitions(["sized"], response_partition_limit=4)
        rest = admin.describe_topic_partitions(["sized"], cursor=page["next_cursor"])
    finally:
        admin.close()
    assert page["next_cursor"] == {"topic_name": "sized", "partition_index": 4}
    parts = page["topics"][0]["partitions"] + rest["topics"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == list(range(6)) and rest["next_cursor"] is None
    for p in parts:
        assert p["replica_nodes"] == list(replicas[p["partition_index"]])
        assert p["offline_replicas"] == ([2] if 2 in replicas[p["partition_index"]] else [])
        assert p["leader_id"] in (0, 1)
