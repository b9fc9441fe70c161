"""WriteTxnMarkers (key 27), v1-v2: the API a transaction coordinator uses to have COMMIT
or ABORT markers written to the partitions this broker hosts. The local coordinator
writes its markers through the same path (:meth:`TransactionCoordinator.write_markers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.write_txn_markers import WritableTxnMarker, WriteTxnMarkersRequest


@handles(27, 1, 2)
async def handle(ctx: RequestContext, req: WriteTxnMarkersRequest) -> Any:
    """Needs ALTER or CLUSTER_ACTION on the cluster (Kafka), else every partition answers
    CLUSTER_AUTHORIZATION_FAILED."""
    allowed = authorize_cluster(ctx, AclOperation.ALTER) or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    results = []
    for m in req.markers:
        parts = [(t.name, int(p)) for t in m.topics for p in t.partition_indexes]
        if allowed:
            errors = await _write(ctx, m, parts)
        else:
            errors = dict.fromkeys(parts, ErrorCode.cluster_authorization_failed)
        results.append({"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p, "error_code": errors.get((t.name, int(p)), ErrorCode.none)}
                for p in t.partition_indexes]} for t in m.topics]})
    return materialize(response_schema(27, ctx.version), {"markers": results})


async def _write(ctx: RequestContext, m: WritableTxnMarker, parts: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    try:
        return await ctx.txns.write_markers(m.producer_id, m.producer_epoch, m.transaction_result,
                                            m.coordinator_epoch, parts)
    except CoordinatorUnavailable as exc:
        return {tp: exc.error_code for tp in parts}
