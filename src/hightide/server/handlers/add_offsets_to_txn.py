"""AddOffsetsToTxn (key 25), v0-v4: add the group's ``__consumer_offsets`` partition to
the producer's transaction, so the COMMIT/ABORT marker reaches the offsets that
TxnOffsetCommit holds pending there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...group.records import OFFSETS_TOPIC
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize
from ..context import RequestContext
from ..registry import handles
from .txn_common import fenced_error

if TYPE_CHECKING:
    from ...protocol.views.add_offsets_to_txn import AddOffsetsToTxnRequest


@handles(25, 0, 4)
async def handle(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> Any:
    code: ErrorCode
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        code = ErrorCode.transactional_id_authorization_failed  # Kafka: WRITE on the id, then READ on the group
    elif not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        code = ErrorCode.group_authorization_failed
    elif not req.group_id:
        code = ErrorCode.invalid_group_id
    else:
        try:
            await ctx.groups.ensure_topic()
            partition = ctx.groups.partition_for(req.group_id)
            code = await ctx.txns.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                 [(OFFSETS_TOPIC, partition)])
        except CoordinatorUnavailable as exc:
            code = exc.error_code
    return materialize(response_schema(25, ctx.version), {
        "throttle_time": 0, "error_code": fenced_error(code, ctx.version, 2)})
