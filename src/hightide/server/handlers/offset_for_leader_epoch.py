"""OffsetForLeaderEpoch (key 23): a single node has one leader epoch (0) for every
partition, so epoch 0 ends at the log end offset and any other epoch is undefined."""

from __future__ import annotations

from typing import Any

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize_cluster, refused_names
from ..context import RequestContext
from ..leadership import leader_epoch
from ..registry import handles
from .common import LEADER_EPOCH, check_leader_epoch, resolve_partition


@handles(23, 2, 4)
def handle(ctx: RequestContext, req: Any) -> Any:
    """Authorization as Kafka: a follower's request (replica id >= 0) needs CLUSTER_ACTION
    (else every partition answers CLUSTER_AUTHORIZATION_FAILED), then DESCRIBE per topic."""
    if getattr(req, "replica_id", -1) >= 0 and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        denied, code = frozenset(t.topic for t in req.topics), ErrorCode.cluster_authorization_failed
    else:
        denied = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in req.topics))
        code = ErrorCode.topic_authorization_failed
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            plog, err = (None, code) if t.topic in denied else resolve_partition(ctx, t.topic, p.partition)
            if err == ErrorCode.none:
                err = check_leader_epoch(getattr(p, "current_leader_epoch", -1),
                                         leader_epoch(ctx.image, t.topic, p.partition))
            if plog is not None and err == ErrorCode.none and 0 <= p.leader_epoch:
                # Requested epoch >= ours: the largest epoch <= requested is ours.
                entry.update(leader_epoch=LEADER_EPOCH, end_offset=plog.log_end_offset)
            entry["error_code"] = err
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return materialize(response_schema(23, ctx.version), {"throttle_time": 0, "topics": topics})
