"""OffsetForLeaderEpoch (key 23), answered from the partition log's leader-epoch cache
(:mod:`hightide.log.leader_epochs`), as Kafka's ``Partition.lastOffsetForLeaderEpoch``:
for each requested LeaderEpoch, the largest epoch <= it that the leader's log knows and
where that epoch ends (the start of the next epoch, or the log end offset for the latest
one); -1/-1 with no error when the log knows none (an empty log, or an epoch newer than
the latest). Consumers use it to detect truncation after a leader change (KIP-320),
followers to find where their log diverges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize_cluster, refused_names
from ..context import RequestContext
from ..leadership import leader_epoch
from ..registry import handles
from .common import check_leader_epoch, resolve_partition

if TYPE_CHECKING:
    from ...protocol.views.offset_for_leader_epoch import OffsetForLeaderEpochRequest


@handles(23, 2, 4)
def handle(ctx: RequestContext, req: OffsetForLeaderEpochRequest) -> Any:
    """Authorization as Kafka: a follower's request (replica id >= 0) needs CLUSTER_ACTION
    (else every partition answers CLUSTER_AUTHORIZATION_FAILED), then DESCRIBE per topic."""
    if opt(req, "replica_id", -1) >= 0 and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
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
                err = check_leader_epoch(p.current_leader_epoch,
                                         leader_epoch(ctx.image, t.topic, p.partition))
            if plog is not None and err == ErrorCode.none:
                epoch, end = plog.end_offset_for_epoch(p.leader_epoch)
                entry.update(leader_epoch=epoch, end_offset=end)
            entry["error_code"] = err
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return materialize(response_schema(23, ctx.version), {"throttle_time": 0, "topics": topics})
