"""AlterPartition (56) on the controller listener: a partition leader asks to change its
ISR (or confirms recovery after an unclean election), Kafka's KRaft ``alterPartition``.

The decision is the sans-IO :func:`~hightide.cluster.replication_control.alter_partition`
(validation in Kafka's order, the change through the one partition-change builder), run
as a metadata write: the answer — per partition the new leader, leader epoch, ISR,
recovery state and partition epoch, or an error — leaves once the change is committed
and applied. v2 (ISR as broker ids) and v3 (ISR with broker epochs, checked against the
registrations), Kafka 4's versions. Brokers only: CLUSTER_ACTION on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.replication_control import AlterPartitionAnswer, IsrRequest
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.alter_partition import AlterPartitionRequest, PartitionData


def _isr(version: int, p: PartitionData) -> tuple[tuple[int, int], ...]:
    if version >= 3:
        return tuple((int(b.broker_id), int(b.broker_epoch)) for b in opt(p, "new_isr_with_epochs", ()))
    return tuple((int(b), -1) for b in opt(p, "new_isr", ()))


def isr_requests(version: int, req: AlterPartitionRequest) -> list[tuple[Any, list[IsrRequest]]]:
    """The request's topics as (topic id, partitions)."""
    return [(t.topic_id, [IsrRequest(int(p.partition_index), int(p.leader_epoch), _isr(version, p),
                                     int(p.leader_recovery_state), int(p.partition_epoch))
                          for p in t.partitions]) for t in req.topics]


@handles(56, 2, 3)
async def alter_partition(ctx: RequestContext, req: AlterPartitionRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _response(ctx.version, AlterPartitionAnswer(ErrorCode.cluster_authorization_failed))
    topics = isr_requests(ctx.version, req)
    controller = ctx.metadata.controller
    try:
        answer = await ctx.metadata.write_metadata(lambda image: controller.alter_partition(
            image, int(req.broker_id), int(req.broker_epoch), topics, ctx.version))
    except CoordinatorUnavailable as exc:  # nothing was written: the leader retries
        answer = AlterPartitionAnswer(exc.error_code, str(exc))
    return _response(ctx.version, answer)


def _response(version: int, answer: AlterPartitionAnswer) -> Any:
    topics = [{"topic_id": tid, "partitions": [
        {"partition_index": r.partition, "error_code": r.error_code, "leader_id": r.leader,
         "leader_epoch": r.leader_epoch, "isr": list(r.isr), "leader_recovery_state": r.leader_recovery_state,
         "partition_epoch": r.partition_epoch} for r in results]} for tid, results in answer.topics]
    return materialize(response_schema(56, version), {"throttle_time": 0, "error_code": answer.error_code,
                                                      "topics": topics})
