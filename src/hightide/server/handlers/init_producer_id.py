"""InitProducerId (key 22) for idempotent producers. Transactions come later: a
transactional id is answered with COORDINATOR_NOT_AVAILABLE (see docs/compatibility.md)."""

from __future__ import annotations

from typing import Any

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ..registry import handles


@handles(22, 0, 5)
def handle(ctx: RequestContext, req: Any) -> Any:
    if req.transactional_id is not None:
        # No transaction coordinator yet: say so rather than hand out a producer id
        # whose transactional guarantees we could not honour.
        return materialize(response_schema(22, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.coordinator_not_available,
            "producer_id": -1, "producer_epoch": -1})
    return _allocate(ctx)


async def _allocate(ctx: RequestContext) -> Any:
    """A new producer id (a block is reserved in the metadata log when the last one is
    used up, which waits for that write to be durable)."""
    pid = await ctx.producer_ids.next_producer_id()
    return materialize(response_schema(22, ctx.version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": 0})
