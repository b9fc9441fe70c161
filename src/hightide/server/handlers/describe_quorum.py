"""DescribeQuorum (55) and the controller's DescribeCluster (60, KIP-919).

DescribeQuorum answers with Kafka's fields for ``__cluster_metadata-0``: the leader (this
node, the one voter) and its epoch, the high watermark (the committed end of the
metadata log), the voters and the observers, each with LogEndOffset,
LastFetchTimestamp and LastCaughtUpTimestamp (v1+), and (v2) the voters' endpoints.
The single node (combined mode) answers it too — one voter, no observers — so
``kafka-metadata-quorum --bootstrap-server`` and ``hightide metadata-quorum`` work
against ``hightide serve``. On a controller the observers are the brokers that fetched
the metadata log in the last five minutes (Kafka's observer session), with their fetch
offset as LogEndOffset.

A request for another topic-partition gets UNKNOWN_TOPIC_OR_PARTITION for that
partition (Kafka: the top-level error is NONE, the partition's names it).

With a controller quorum the answer comes from the leader's Raft state: every voter
with the offset it last fetched from (the leader: its flushed end) and the times of its
last fetch and of its last fetch at the leader's end (-1: never, e.g. a voter that is
down), the epoch, the high watermark, and (v2) every voter's controller endpoint and
ReplicaDirectoryId. A dynamic quorum's (KIP-853) voters, their directory ids and
endpoints are the voter set in the leader's log, and its observers include the
controllers that fetch through Raft without being voters (a controller being added). A
controller that is not the leader answers NOT_LEADER_OR_FOLLOWER for the partition
(Kafka's answer; a broker forwards DescribeQuorum to the active controller).

DescribeCluster on a controller listener answers ``EndpointType`` 2 (controllers) with
the controller endpoints (Kafka's ``ControllerApis``); a request for brokers (type 1,
and every v0/v1 request) gets UNSUPPORTED_ENDPOINT_TYPE.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ...cluster.metadata_log import METADATA_TOPIC
from ...cluster.raft.batches import uuid_bytes
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ...node.controller_service import LEADER_EPOCH, ReplicaProgress

Nodes = list[tuple[int, list[tuple[str, str, int]]]]  # (voter id, its listeners as (name, host, port))
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.describe_cluster import DescribeClusterRequest
    from ...protocol.views.describe_quorum import DescribeQuorumRequest
    from ...node.controller_service import ControllerService

ENDPOINT_TYPE_BROKERS, ENDPOINT_TYPE_CONTROLLERS = 1, 2


def _replica(p: ReplicaProgress) -> dict:
    directory = uuid.UUID(bytes=uuid_bytes(p.directory_id)) if p.directory_id else uuid.UUID(int=0)
    return {"replica_id": p.replica_id, "replica_directory_id": directory, "log_end_offset": p.log_end_offset,
            "last_fetch_timestamp": p.last_fetch_ms, "last_caught_up_timestamp": p.last_caught_up_ms}


def _answer(ctx: RequestContext, req: DescribeQuorumRequest, node_id: int, high_watermark: int, voters: list[ReplicaProgress],
            observers: list[ReplicaProgress], nodes: Nodes, leader_epoch: int = LEADER_EPOCH,
            error: ErrorCode = ErrorCode.none) -> Any:
    """The answer; DescribeQuorum needs DESCRIBE on the cluster (Kafka's ControllerApis),
    else a top-level CLUSTER_AUTHORIZATION_FAILED."""
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return materialize(response_schema(55, ctx.version), {
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": MESSAGES[ErrorCode.cluster_authorization_failed], "topics": [], "nodes": []})
    topics = []
    for t in req.topics:
        parts: list[dict[str, Any]] = []
        for p in t.partitions:
            if t.topic_name == METADATA_TOPIC and p.partition_index == 0 and error != ErrorCode.none:
                parts.append({"partition_index": 0, "error_code": error, "error_message": None,
                              "leader_id": node_id, "leader_epoch": leader_epoch, "high_watermark": -1,
                              "current_voters": [], "observers": []})
            elif t.topic_name == METADATA_TOPIC and p.partition_index == 0:
                parts.append({"partition_index": 0, "error_code": ErrorCode.none, "error_message": None,
                              "leader_id": node_id, "leader_epoch": leader_epoch, "high_watermark": high_watermark,
                              "current_voters": [_replica(v) for v in voters],
                              "observers": [_replica(o) for o in observers]})
            else:
                parts.append({"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
                              "error_message": "The topic or partition is not the cluster metadata partition.",
                              "leader_id": -1, "leader_epoch": -1, "high_watermark": -1,
                              "current_voters": [], "observers": []})
        topics.append({"topic_name": t.topic_name, "partitions": parts})
    return materialize(response_schema(55, ctx.version), {
        "error_code": ErrorCode.none, "error_message": None, "topics": topics,
        "nodes": [{"node_id": n, "listeners": [{"name": x, "host": h, "port": port} for x, h, port in listeners]}
                  for n, listeners in nodes]})


@handles(55, 0, 2)
def describe_quorum(ctx: RequestContext, req: DescribeQuorumRequest) -> Any:
    """The single node's answer: it is the one voter, always caught up; no observers.
    The leader epoch stays the one the single node always reported (0), though its Raft
    shell's epoch grows at every start (docs/cluster.md)."""
    end = ctx.metadata.metadata_committed_end
    node_id = ctx.identity.node_id
    host, port = ctx.identity.advertised
    voter = ReplicaProgress(node_id, end, ctx.now_ms, ctx.now_ms)
    return _answer(ctx, req, node_id, end, [voter], [], [(node_id, [("PLAINTEXT", host, port)])])


def controller_describe_quorum(service: ControllerService, ctx: RequestContext, req: DescribeQuorumRequest) -> Any:
    """A controller's answer: the voters (itself alone, or the quorum as its leader sees
    it), the fetching brokers as observers; NOT_LEADER_OR_FOLLOWER on a non-leader."""
    quorum = service.quorum(ctx.now_ms)
    nodes = _voter_nodes(service)
    if quorum is None:
        return _answer(ctx, req, service.leader_id, -1, [], [], nodes, service.leader_epoch,
                       ErrorCode.not_leader_or_follower)
    voters, observers = quorum
    return _answer(ctx, req, service.node_id, service.committed_end(), voters, observers, nodes,
                   service.leader_epoch)


def _voter_nodes(service: ControllerService) -> Nodes:
    """Each voter's controller endpoints (:meth:`ControllerService.voter_listeners`)."""
    return service.voter_listeners()


def controller_describe_cluster(service: ControllerService, ctx: RequestContext, req: DescribeClusterRequest) -> Any:
    """KIP-919: a controller describes the controllers (itself, the one voter)."""
    endpoint_type = int(opt(req, "endpoint_type", ENDPOINT_TYPE_BROKERS))
    base: dict[str, Any] = {"throttle_time": 0, "endpoint_type": endpoint_type, "cluster_id": ctx.identity.cluster_id or "",
            "controller_id": service.leader_id, "cluster_authorized_operations": -2147483648}
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka: on a controller, ALTER on the cluster
        return materialize(response_schema(60, ctx.version), {
            **base, "error_code": ErrorCode.cluster_authorization_failed, "controller_id": -1,
            "error_message": MESSAGES[ErrorCode.cluster_authorization_failed], "brokers": []})
    if endpoint_type != ENDPOINT_TYPE_CONTROLLERS:
        return materialize(response_schema(60, ctx.version), {
            **base, "error_code": ErrorCode.unsupported_endpoint_type, "controller_id": -1,
            "error_message": "The controller can only describe controllers (EndpointType 2).", "brokers": []})
    brokers = [{"broker_id": n, "host": listeners[0][1], "port": listeners[0][2], "rack": None, "is_fenced": False}
               for n, listeners in _voter_nodes(service) if listeners]
    return materialize(response_schema(60, ctx.version), {**base, "error_code": ErrorCode.none,
                                                          "error_message": None, "brokers": brokers})
