"""``hightide topics describe`` (cli/topic_describe.py) and the exporter's partition
replication series (monitoring/partitions.py) from hand-made Metadata: kafka-topics.sh's
layout and report flags, kafka_exporter's names and values."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from hightide.client import ClusterMetadata, TopicMetadata
from hightide.client.cluster import ClusterBroker, ClusterDescription
from hightide.client.configs import ConfigEntry, ConfigResource, ConfigSource, ResourceType
from hightide.client.errors import ErrorCode
from hightide.client.log_dirs import LogDirDescription, ReplicaLogInfo
from hightide.client.types import BrokerMetadata, PartitionMetadata
from hightide.cli.topic_describe import describe_topics, kafka_topics_text, selected
from hightide.monitoring.partitions import partition_families, partition_snapshot

TID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _md() -> ClusterMetadata:
    parts = {
        0: PartitionMetadata(0, 1, 3, (1, 2, 3), (1, 2, 3)),       # healthy, preferred leader
        1: PartitionMetadata(1, 3, 4, (2, 3, 1), (3, 1)),          # under-replicated, not preferred
        2: PartitionMetadata(2, -1, 5, (3, 1, 2), (3,)),           # no leader (last ISR member kept)
        3: PartitionMetadata(3, 2, 1, (1, 2, 3), (2, 3)),          # leader 2 is fenced
    }
    brokers = {b: BrokerMetadata(b, "127.0.0.1", 9090 + b, None) for b in (1, 2, 3)}
    return ClusterMetadata(brokers, {"orders": TopicMetadata("orders", parts, TID),
                                     "__consumer_offsets": TopicMetadata(
                                         "__consumer_offsets", {0: PartitionMetadata(0, 1, 0, (1,), (1,))},
                                         None, True)})


class _Admin:
    """The few AdminClient calls describe_topics and partition_snapshot make."""

    async def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        return _md()

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n, t in _md().topics.items() if include_internal or not t.is_internal)

    async def describe_topics(self, names: list[str]) -> dict[str, TopicMetadata]:
        return {n: _md().topics[n] for n in names}

    async def describe_configs(self, resources: list[ConfigResource], **kw: Any) -> dict[ConfigResource, Any]:
        entries = [ConfigEntry("cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
                   ConfigEntry("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                   ConfigEntry("segment.bytes", "1048576", ConfigSource.STATIC_BROKER_CONFIG)]
        return {r: entries for r in resources}

    async def describe_cluster(self, include_fenced: bool = True) -> Any:
        nodes = tuple(ClusterBroker(b, "127.0.0.1", 9090 + b, None, b == 2) for b in (1, 2, 3))
        return ClusterDescription("cid", 1, nodes, True)

    async def describe_log_dirs(self, brokers: Any = None, topics: Any = None) -> list[LogDirDescription]:
        """Every broker holds every partition of orders; broker b's copy of p has 1000 * b + p bytes."""
        def replicas(b: int) -> tuple[ReplicaLogInfo, ...]:
            return tuple(ReplicaLogInfo("orders", p, 1000 * b + p, 0, False) for p in range(4))
        return [LogDirDescription(b, f"/data{b}", ErrorCode.none, replicas(b), -1, -1) for b in (1, 2, 3)]


def test_topics_describe_text_is_kafka_topics_layout() -> None:
    topics = asyncio.run(describe_topics(_Admin(), ["orders"]))
    assert kafka_topics_text(topics, []).splitlines() == [
        "Topic: orders\tTopicId: ABEiM0RVZneImaq7zN3u_w\tPartitionCount: 4\tReplicationFactor: 3\t"
        "Configs: min.insync.replicas=2,segment.bytes=1048576",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: N/A\tLastKnownElr: N/A\tSize: 1000",
        "\tTopic: orders\tPartition: 1\tLeader: 3\tReplicas: 2,3,1\tIsr: 3,1\tElr: N/A\tLastKnownElr: N/A\tSize: 3001",
        "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 3,1,2\tIsr: 3\tElr: N/A\tLastKnownElr: N/A\tSize: 3002",
        "\tTopic: orders\tPartition: 3\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3\tElr: N/A\tLastKnownElr: N/A\tSize: 2003",
    ]
    assert topics[0]["size_bytes"] == 1000 + 3001 + 3002 + 2003  # the leaders' copies (no leader: the largest)


def test_report_flags_select_partitions_as_kafka() -> None:
    topics = asyncio.run(describe_topics(_Admin(), []))  # every topic, internal ones too
    assert [t["topic"] for t in topics] == ["__consumer_offsets", "orders"]

    def parts(*reports: str) -> list[tuple[str, int]]:
        return [(t["topic"], p["partition"]) for t in topics for p in t["partitions"] if selected(p, list(reports))]
    assert parts("under_replicated") == [("orders", 1), ("orders", 2), ("orders", 3)]
    assert parts("unavailable") == [("orders", 2), ("orders", 3)]          # no leader; leader 2 fenced
    assert parts("under_min_isr") == [("__consumer_offsets", 0), ("orders", 2)]  # min ISR 2 (config)
    assert parts("at_min_isr") == [("orders", 1), ("orders", 3)]
    assert parts("under_replicated", "unavailable") == parts("under_replicated")
    text = kafka_topics_text(topics, ["unavailable"]).splitlines()
    assert [line.split("\t")[2] for line in text] == ["Partition: 2", "Partition: 3"]  # no topic lines
    no_internal = asyncio.run(describe_topics(_Admin(), [], include_internal=False))
    assert [t["topic"] for t in no_internal] == ["orders"]


class _Collector:
    def __init__(self, parts: Any) -> None:
        self.parts = parts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from partition_families(self.parts)


def _render(parts: Any) -> dict[str, float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(parts))
    out = {}
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_partition_series_have_kafka_exporter_names_and_values() -> None:
    got = _render(asyncio.run(partition_snapshot(_Admin())))

    def at(name: str, p: int, topic: str = "orders") -> float | None:
        return got.get(f'{name}{{partition="{p}",topic="{topic}"}}')
    assert [at("kafka_topic_partition_replicas", p) for p in range(4)] == [3, 3, 3, 3]
    assert [at("kafka_topic_partition_in_sync_replica", p) for p in range(4)] == [3, 2, 1, 2]
    assert [at("kafka_topic_partition_leader", p) for p in range(4)] == [1, 3, None, 2]  # none: left out
    assert [at("kafka_topic_partition_leader_is_preferred", p) for p in range(4)] == [1, 0, 0, 0]
    assert [at("kafka_topic_partition_under_replicated_partition", p) for p in range(4)] == [0, 1, 1, 1]
    assert [at("hightide_topic_partition_offline", p) for p in range(4)] == [0, 0, 1, 0]
    assert at("kafka_topic_partition_replicas", 0, "__consumer_offsets") == 1  # internal topics too
    assert got["hightide_under_replicated_partitions"] == 3 and got["hightide_offline_partitions"] == 1


def test_no_metadata_no_series() -> None:
    assert _render(None) == {}
