"""Partition replication series for the exporter, with kafka_exporter's names and labels.

From one Metadata answer (every topic, internal ones included, as kafka_exporter's
sarama client lists them), per ``{topic, partition}``:

- ``kafka_topic_partition_replicas``: the number of replicas;
- ``kafka_topic_partition_in_sync_replica``: the number of in-sync replicas;
- ``kafka_topic_partition_leader``: the leader's broker id (left out while the
  partition has no leader, as kafka_exporter leaves it out when the leader is unknown);
- ``kafka_topic_partition_leader_is_preferred``: 1 when the leader is the first
  replica (the preferred leader), else 0;
- ``kafka_topic_partition_under_replicated_partition``: 1 when the ISR is smaller than
  the replica list, else 0.

hightide adds ``hightide_topic_partition_offline`` (1 while the partition has no leader)
and the cluster totals ``hightide_under_replicated_partitions`` and
``hightide_offline_partitions`` (Kafka's ``UnderReplicatedPartitions`` and
``OfflinePartitionsCount``), so an alert needs no ``sum``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from ..client.errors import KafkaError

log = logging.getLogger("hightide.exporter")

__all__ = ["PartitionState", "partition_families", "partition_snapshot"]

_LABELS = ["topic", "partition"]


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as Metadata describes it (``leader`` -1: no leader)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def leader_is_preferred(self) -> bool:
        return bool(self.replicas) and self.leader == self.replicas[0]


async def partition_snapshot(admin: Any) -> list[PartitionState] | None:
    """Every partition of every topic from one Metadata request through ``admin``, sorted
    by (topic, partition); None (logged at WARNING) when Metadata fails. Topics whose
    Metadata carries a topic-level error are left out."""
    try:
        md = await admin.metadata()
    except KafkaError as exc:
        log.warning("Metadata failed: %s", exc)
        return None
    return [PartitionState(t.name, p.partition, p.leader, tuple(p.replicas), tuple(p.isr))
            for t in sorted(md.topics.values(), key=lambda t: t.name) if not t.error
            for p in sorted(t.partitions.values(), key=lambda p: p.partition)]


def partition_families(parts: list[PartitionState] | None) -> Iterator[GaugeMetricFamily]:
    """The series of the module doc; nothing when ``parts`` is None."""
    if parts is None:
        return
    replicas = GaugeMetricFamily("kafka_topic_partition_replicas", "Number of replicas of a partition",
                                 labels=_LABELS)
    isr = GaugeMetricFamily("kafka_topic_partition_in_sync_replica", "Number of in-sync replicas of a partition",
                            labels=_LABELS)
    leader = GaugeMetricFamily("kafka_topic_partition_leader", "Leader broker id of a partition", labels=_LABELS)
    preferred = GaugeMetricFamily("kafka_topic_partition_leader_is_preferred",
                                  "1 if the partition's leader is its preferred (first) replica", labels=_LABELS)
    under = GaugeMetricFamily("kafka_topic_partition_under_replicated_partition",
                              "1 if the partition's ISR is smaller than its replica list", labels=_LABELS)
    offline = GaugeMetricFamily("hightide_topic_partition_offline", "1 if the partition has no leader",
                                labels=_LABELS)
    for p in parts:
        lbl = [p.topic, str(p.partition)]
        replicas.add_metric(lbl, len(p.replicas))
        isr.add_metric(lbl, len(p.isr))
        if not p.offline:
            leader.add_metric(lbl, p.leader)
        preferred.add_metric(lbl, 1.0 if p.leader_is_preferred else 0.0)
        under.add_metric(lbl, 1.0 if p.under_replicated else 0.0)
        offline.add_metric(lbl, 1.0 if p.offline else 0.0)
    yield from (replicas, isr, leader, preferred, under, offline)
    total_under = GaugeMetricFamily("hightide_under_replicated_partitions",
                                    "Partitions whose ISR is smaller than their replica list (Kafka's "
                                    "UnderReplicatedPartitions)")
    total_under.add_metric([], sum(p.under_replicated for p in parts))
    total_offline = GaugeMetricFamily("hightide_offline_partitions",
                                      "Partitions without a leader (Kafka's OfflinePartitionsCount)")
    total_offline.add_metric([], sum(p.offline for p in parts))
    yield from (total_under, total_offline)
