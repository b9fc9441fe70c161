"""The cluster page's data: brokers (Metadata), DescribeCluster (API 60) and
DescribeQuorum (API 55), each asked of the cluster as it is, never assumed.

The admin client has no call for the last two, so they are sent here on a short-lived
:class:`~hightide.client.BrokerConnection` to a broker of the metadata (its public
``pick_version``/``request``). A broker that does not advertise an API gets an answer
saying so (``served=False`` and the reason), which the page shows as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..client import AdminClient, BrokerConnection, KafkaError, UnsupportedVersionError

__all__ = ["ClusterView", "QuorumView", "VoterView", "describe"]

DESCRIBE_CLUSTER = 60
DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class VoterView:
    """One replica of the metadata log as DescribeQuorum reports it (-1: unknown)."""

    replica_id: int
    role: str  # "voter" or "observer"
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumView:
    """DescribeQuorum's answer for ``__cluster_metadata`` partition 0, or why there is none."""

    served: bool
    reason: str | None = None
    leader_id: int | None = None
    leader_epoch: int | None = None
    high_watermark: int | None = None
    replicas: tuple[VoterView, ...] = ()

    @property
    def lowest_voter_offset(self) -> int | None:
        """The lowest log end offset among the voters (None without voters)."""
        offs = [r.log_end_offset for r in self.replicas if r.role == "voter" and r.log_end_offset >= 0]
        return min(offs) if offs else None

    @property
    def lowest_replica_offset(self) -> int | None:
        """The lowest log end offset of every replica the leader reports, voters and
        observers (brokers): the metadata offset every one of them has reached."""
        offs = [r.log_end_offset for r in self.replicas if r.log_end_offset >= 0]
        return min(offs) if offs else None


@dataclass(frozen=True, slots=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[dict[str, Any], ...]
    """One dict per broker: node_id, host, port, rack, fenced (None when unknown)."""
    describe_cluster: str
    """"served" or the reason DescribeCluster was not used."""
    quorum: QuorumView
    topics: int = 0
    partitions: int = 0
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)


async def describe(admin: AdminClient) -> ClusterView:
    """Everything the cluster page shows. Raises :class:`KafkaError` when the cluster
    cannot be reached (the page shows the banner then)."""
    md = await admin.metadata()
    brokers = {b.node_id: {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "fenced": None}
               for b in md.brokers.values()}
    cluster_id, controller = md.cluster_id, md.controller_id
    target = next(iter(sorted(md.brokers.values(), key=lambda b: b.node_id)), None)
    dc_state = "no broker in the metadata"
    quorum = QuorumView(False, "no broker in the metadata")
    versions: dict[int, tuple[int, int]] = {}
    if target is not None:
        conn = BrokerConnection(target.host, target.port, admin.client_id,
                                request_timeout_s=admin.request_timeout_s, node_id=target.node_id,
                                security=admin.security, transport=admin.transport)
        await conn.connect()
        try:
            versions = dict(conn.api_versions)
            dc_state, dc = await _describe_cluster(conn)
            if dc is not None:
                cluster_id, controller = dc.cluster_id, dc.controller_id
                for b in dc.brokers:
                    brokers[b.broker_id] = {"node_id": b.broker_id, "host": b.host, "port": b.port,
                                            "rack": b.rack, "fenced": getattr(b, "is_fenced", None)}
            quorum = await _describe_quorum(conn)
        finally:
            await conn.close()
    parts = sum(len(t.partitions) for t in md.topics.values())
    return ClusterView(cluster_id, controller, tuple(brokers[k] for k in sorted(brokers)), dc_state, quorum,
                       len(md.topics), parts, versions)


async def _describe_cluster(conn: BrokerConnection) -> tuple[str, Any]:
    try:
        v = conn.pick_version(DESCRIBE_CLUSTER, 2)
    except UnsupportedVersionError as exc:
        return f"not served: {exc.message}", None
    resp = await conn.request(DESCRIBE_CLUSTER, v, {"include_cluster_authorized_operations": False,
                                                    "endpoint_type": 1, "include_fenced_brokers": True})
    if resp.error_code != 0:
        return f"error {KafkaError(resp.error_code, resp.error_message or '')}", None
    return "served", resp


async def _describe_quorum(conn: BrokerConnection) -> QuorumView:
    try:
        v = conn.pick_version(DESCRIBE_QUORUM, 2)
    except UnsupportedVersionError:
        return QuorumView(False, f"DescribeQuorum (API 55) is not served by this cluster: broker {conn.host}:"
                                 f"{conn.port} does not advertise it in ApiVersions")
    resp = await conn.request(DESCRIBE_QUORUM, v, {
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    if resp.error_code != 0:
        return QuorumView(False, f"DescribeQuorum answered {KafkaError(resp.error_code, resp.error_message or '')}")
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code != 0:
                return QuorumView(False, f"DescribeQuorum answered {KafkaError(p.error_code, '')} "
                                         f"for {t.topic_name}-{p.partition_index}")
            reps = tuple(VoterView(r.replica_id, role, r.log_end_offset, getattr(r, "last_fetch_timestamp", -1),
                                   getattr(r, "last_caught_up_timestamp", -1))
                         for role, rs in (("voter", p.current_voters), ("observer", p.observers)) for r in rs)
            return QuorumView(True, None, p.leader_id, p.leader_epoch, p.high_watermark, reps)
    return QuorumView(False, "DescribeQuorum answered without the metadata partition")
