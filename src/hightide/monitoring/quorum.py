"""Metadata-quorum and broker-state series for the exporter (issue 13, seed 004).

:func:`quorum_snapshot` reads DescribeQuorum (55) of ``__cluster_metadata-0`` and
DescribeCluster (60, fenced brokers included) through the exporter's admin client;
:func:`quorum_families` renders them. Names follow Kafka's KRaft metrics where one exists
(``kafka.server:type=raft-metrics`` high-watermark, current-leader, current-epoch;
``kafka.controller:type=KafkaController`` ActiveBrokerCount and FencedBrokerCount;
``broker-metadata-metrics`` last-applied-record-offset) under a ``hightide_metadata_``
prefix. A broker's applied offset is its fetch position minus one and the lowest
acknowledged offset the lowest of those among unfenced brokers (see
:mod:`hightide.cli.metadata_quorum`). Against a cluster that answers neither RPC (an
older Kafka broker) the snapshot is None and no series are written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from ..client.cluster import applied_offset, lowest_acknowledged
from ..client.errors import KafkaError, UnsupportedVersionError

log = logging.getLogger("hightide.exporter")

__all__ = ["QuorumSnapshot", "quorum_families", "quorum_snapshot"]


@dataclass(frozen=True, slots=True)
class QuorumSnapshot:
    """One read of the quorum (``quorum``: a :class:`hightide.client.cluster.QuorumInfo`)
    and the brokers' fenced states (``fenced`` None when the broker cannot say)."""

    quorum: Any
    fenced: dict[int, bool] | None


async def quorum_snapshot(admin: Any) -> QuorumSnapshot | None:
    """DescribeQuorum and DescribeCluster through ``admin``; None when the cluster does not
    offer DescribeQuorum (logged at WARNING for any other failure)."""
    try:
        quorum = await admin.describe_metadata_quorum()
    except UnsupportedVersionError:
        return None
    except KafkaError as exc:
        log.warning("DescribeQuorum failed: %s", exc)
        return None
    try:
        desc = await admin.describe_cluster(include_fenced=True)
        fenced = {b.node_id: bool(b.fenced) for b in desc.brokers} if desc.includes_fenced else None
    except KafkaError as exc:
        log.warning("DescribeCluster failed: %s", exc)
        fenced = None
    return QuorumSnapshot(quorum, fenced)


def quorum_families(snap: QuorumSnapshot | None) -> Iterator[GaugeMetricFamily]:
    """The ``hightide_metadata_*`` families of ``snap`` (nothing when None)."""
    if snap is None:
        return
    q = snap.quorum

    def gauge(name: str, doc: str, value: float | None = None, labels: list[str] | None = None) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=labels)
        if value is not None:
            g.add_metric([], value)
        return g
    yield gauge("hightide_metadata_high_watermark", "High watermark of __cluster_metadata-0 (raft high-watermark)",
                q.high_watermark)
    yield gauge("hightide_metadata_current_leader", "Node id of the metadata quorum leader (raft current-leader)",
                q.leader_id)
    yield gauge("hightide_metadata_current_epoch", "Leader epoch of the metadata quorum (raft current-epoch)",
                q.leader_epoch)
    leader = next((v for v in q.voters if v.node_id == q.leader_id), None)
    leo = GaugeMetricFamily("hightide_metadata_replica_log_end_offset",
                            "Log end offset of each voter and observer as the leader knows it",
                            labels=["node_id", "role"])
    lag = GaugeMetricFamily("hightide_metadata_replica_lag", "Leader log end offset minus the replica's",
                            labels=["node_id", "role"])
    fetch = GaugeMetricFamily("hightide_metadata_replica_last_fetch_timestamp_seconds",
                              "When the leader last got a fetch from the replica", labels=["node_id", "role"])
    for role, replicas in (("voter", q.voters), ("observer", q.observers)):
        for r in replicas:
            lbl = [str(r.node_id), role]
            leo.add_metric(lbl, r.log_end_offset)
            if leader is not None:
                lag.add_metric(lbl, leader.log_end_offset - r.log_end_offset)
            if r.last_fetch_timestamp >= 0:
                fetch.add_metric(lbl, r.last_fetch_timestamp / 1000)
    yield from (leo, lag, fetch)
    applied_f = GaugeMetricFamily("hightide_metadata_broker_applied_offset",
                                  "Last metadata offset a broker has applied (broker last-applied-record-offset)",
                                  labels=["broker"])
    for o in q.observers:
        a = applied_offset(o)
        if a is not None:
            applied_f.add_metric([str(o.node_id)], a)
    yield applied_f
    lao = lowest_acknowledged(q, snap.fenced)
    if lao is not None:
        yield gauge("hightide_metadata_lowest_acknowledged_offset",
                    "Lowest metadata offset applied by every unfenced broker (seed 004)", lao)
    if snap.fenced is not None:
        yield gauge("hightide_metadata_fenced_brokers", "Number of fenced brokers (FencedBrokerCount)",
                    sum(snap.fenced.values()))
        yield gauge("hightide_metadata_active_brokers", "Number of unfenced brokers (ActiveBrokerCount)",
                    sum(not f for f in snap.fenced.values()))
        per = GaugeMetricFamily("hightide_broker_fenced", "1 if the broker is fenced, 0 if unfenced",
                                labels=["broker"])
        for bid, f in sorted(snap.fenced.items()):
            per.add_metric([str(bid)], 1.0 if f else 0.0)
        yield per
