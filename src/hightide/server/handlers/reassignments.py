"""AlterPartitionReassignments (45) and ListPartitionReassignments (46)
(``kafka-reassign-partitions.sh``, ``Admin.alterPartitionReassignments``), Kafka's KRaft
behaviour.

A reassignment is started, changed or cancelled (replicas null) per partition by the
sans-IO :func:`~hightide.cluster.replication_control.alter_reassignments`, run as a
metadata write: the new replicas join the replica set (``adding_replicas``), the leader
brings them into the ISR as they catch up (AlterPartition), and the controller completes
the move — the replicas being removed leave — once the ISR holds every target replica.
ListPartitionReassignments lists the moves in progress from the image. On a broker-only
node both are forwarded to the controller; the single node answers them itself (it can
only "move" a partition to itself: any other broker is not registered). ALTER on the
cluster for 45, DESCRIBE for 46 (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.alter_partition_reassignments import AlterPartitionReassignmentsRequest
    from ...protocol.views.list_partition_reassignments import ListPartitionReassignmentsRequest


@handles(45, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, req: AlterPartitionReassignmentsRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return _alter_response(ctx.version, code, MESSAGES.get(code), [])
    wanted = [(t.name, [(int(p.partition_index), None if p.replicas is None else [int(b) for b in p.replicas])
                        for p in t.partitions]) for t in req.topics]
    controller = ctx.metadata.controller
    try:
        results = await ctx.metadata.write_metadata(lambda image: controller.alter_reassignments(image, wanted))
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing changed
        results = [(name, [(p, exc.error_code, str(exc)) for p, _ in parts]) for name, parts in wanted]
    return _alter_response(ctx.version, ErrorCode.none, None, results)


def _alter_response(version: int, code: ErrorCode, message: str | None,
                    results: list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]) -> Any:
    return materialize(response_schema(45, version), {
        "throttle_time": 0, "error_code": code, "error_message": message,
        "responses": [{"name": name, "partitions": [
            {"partition_index": p, "error_code": c, "error_message": m} for p, c, m in parts]}
            for name, parts in results]})


@handles(46, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, req: ListPartitionReassignmentsRequest) -> Any:
    schema = response_schema(46, ctx.version)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        code = ErrorCode.cluster_authorization_failed
        return materialize(schema, {"throttle_time": 0, "error_code": code, "error_message": MESSAGES.get(code),
                                    "topics": []})
    wanted = None if req.topics is None else [(t.name, [int(p) for p in t.partition_indexes]) for t in req.topics]
    found = ctx.metadata.controller.list_reassignments(ctx.image, wanted)
    return materialize(schema, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": [
        {"name": name, "partitions": [{"partition_index": r.partition, "replicas": list(r.replicas),
                                       "adding_replicas": list(r.adding), "removing_replicas": list(r.removing)}
                                      for r in parts]} for name, parts in found]})
