"""InitProducerId (key 22): a producer id for an idempotent producer, or, with a
transactional id, the transaction coordinator's answer (a new id or a bumped epoch; an
ongoing transaction is aborted first; KIP-360's producer id and epoch on v3+)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorize_by_type, authorize_cluster
from ..context import RequestContext
from ..registry import handles
from .txn_common import fenced_error

if TYPE_CHECKING:
    from ...protocol.views.init_producer_id import InitProducerIdRequest

log = logging.getLogger("hightide.producer_ids")


@handles(22, 0, 5)
def handle(ctx: RequestContext, req: InitProducerIdRequest) -> Any:
    """Authorization as Kafka: WRITE on the transactional id (else
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED)."""
    if req.transactional_id is not None:
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            return _answer(ctx, ErrorCode.transactional_id_authorization_failed)
        return _transactional(ctx, req, req.transactional_id)
    if not authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) and not authorize_by_type(
            ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return _answer(ctx, ErrorCode.cluster_authorization_failed)
    return _allocate(ctx)


def _answer(ctx: RequestContext, code: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
    return materialize(response_schema(22, ctx.version), {
        "throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch})


async def _allocate(ctx: RequestContext) -> Any:
    """A new producer id (a block is reserved in the metadata log when the last one is
    used up, which waits for that write to be durable). A block that cannot be had (the
    controller unreachable, the metadata log failing) is answered with the error the
    source raised — retriable, as Kafka's — never by closing the connection."""
    try:
        pid = await ctx.producer_ids.next_producer_id()
    except CoordinatorUnavailable as exc:
        log.warning("InitProducerId from %s: no producer id: %s", ctx.peer, exc)
        return _answer(ctx, exc.error_code)
    return _answer(ctx, ErrorCode.none, pid, 0)


async def _transactional(ctx: RequestContext, req: InitProducerIdRequest, transactional_id: str) -> Any:
    """The coordinator's answer; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4."""
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    pid, epoch = opt(req, "producer_id", -1), opt(req, "producer_epoch", -1)
    expected = (int(pid), int(epoch)) if pid != -1 else None
    try:
        r = await ctx.txns.init_producer_id(transactional_id, timeout_ms, expected)
    except CoordinatorUnavailable as exc:
        return _answer(ctx, exc.error_code)
    return _answer(ctx, fenced_error(r.error, ctx.version, 4), r.producer_id, r.producer_epoch)
