"""EndTxn (key 26), v0-v4: commit or abort the producer's transaction (transaction
version 1; v5 would mean KIP-890 part 2's epoch bump per transaction and is not
offered). Answered once the decision is durable (and its markers are written, see
:mod:`hightide.coordinator.transactions`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    from ...protocol.views.end_txn import EndTxnRequest


@handles(26, 0, 4)
async def handle(ctx: RequestContext, req: EndTxnRequest) -> Any:
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return materialize(response_schema(26, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed})
    try:
        code = await ctx.txns.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed)
    except CoordinatorUnavailable as exc:
        code = exc.error_code
    return materialize(response_schema(26, ctx.version), {
        "throttle_time": 0, "error_code": fenced_error(code, ctx.version, 2)})
