"""DescribeLogDirs (35), DescribeTopicPartitions (75) and UnregisterBroker (64) with real
clients against ``hightide serve`` (issue 29 items 5, 6, 8): kafka-python's
``describe_log_dirs`` / ``describe_topic_partitions`` and hightide's admin client.
Before this, the broker did not advertise the APIs: kafka-python raised
IncompatibleBrokerVersion / UnsupportedVersion."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import AdminClient
from hightide.client.errors import KafkaError

from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration


def _log_bytes(data_dir: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (data_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.fixture
def loaded(server, topic_name):
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic_name, 3, 1)])
    finally:
        admin.close()
    now = int(time.time() * 1000)
    confluent_produce(server.bootstrap, topic_name, [Rec(i % 2, b"k", b"v" * 200, (), now) for i in range(30)])
    return topic_name


def test_kafka_python_describe_log_dirs_reports_each_partition_size(server, loaded) -> None:
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    try:
        every = admin.describe_log_dirs()
        mine = admin.describe_log_dirs(topic_partitions={loaded: [0, 2]})
    finally:
        admin.close()
    assert [b["broker"] for b in every] == [1] and len(every[0]["log_dirs"]) == 1
    d = every[0]["log_dirs"][0]
    assert (d["error_code"], d["log_dir"]) == (0, str(server.data_dir.resolve()))
    assert 0 < d["usable_bytes"] <= d["total_bytes"]
    parts = {p["partition_index"]: p for t in d["topics"] if t["name"] == loaded for p in t["partitions"]}
    assert sorted(parts) == [0, 1, 2]
    for pid, p in parts.items():
        assert (p["partition_size"], p["offset_lag"], p["is_future_key"]) == (
            _log_bytes(server.data_dir, loaded, pid), 0, False)
    assert parts[0]["partition_size"] > 3000 and parts[2]["partition_size"] == 0  # nothing produced to 2
    topics = mine[0]["log_dirs"][0]["topics"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in topics] == [(loaded, [0, 2])]


def test_kafka_python_describe_topic_partitions_pages(server, loaded) -> None:
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    try:
        first = admin.describe_topic_partitions([loaded], response_partition_limit=2)
        rest = admin.describe_topic_partitions([loaded], response_partition_limit=2, cursor=first["next_cursor"])
        unknown = admin.describe_topic_partitions([loaded + "-nope"])
    finally:
        admin.close()
    assert first["next_cursor"] == {"topic_name": loaded, "partition_index": 2}
    assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
    assert rest["next_cursor"] is None and [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
    t = first["topics"][0]
    assert (t["error_code"], t["name"], t["is_internal"]) == (0, loaded, False) and t["topic_id"] is not None
    p = t["partitions"][0]
    assert (p["leader_id"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"]) == (1, [1], [1], [])
    assert unknown["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_hightide_admin_log_dirs_and_single_node_unregister(server, loaded) -> None:
    async def go() -> tuple[list, KafkaError]:
        async with AdminClient(server.bootstrap) as admin:
            dirs = await admin.describe_log_dirs(topics={loaded: [0, 1, 2]})
            try:
                await admin.unregister_broker(7)
            except KafkaError as exc:
                return dirs, exc
        raise AssertionError("unregistering an unknown broker succeeded")
    dirs, err = asyncio.run(go())
    assert [(d.broker, d.path) for d in dirs] == [(1, str(server.data_dir.resolve()))]
    assert {(r.partition, r.size) for r in dirs[0].replicas} == {
        (p, _log_bytes(server.data_dir, loaded, p)) for p in range(3)}
    assert err.code == 102  # BROKER_ID_NOT_REGISTERED
    r = CliRunner().invoke(main, ["brokers", "unregister", "-b", server.bootstrap, "--id", "7"])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert lines[0].endswith("[BROKER_ID_NOT_REGISTERED] Broker ID 7 is not currently registered")
