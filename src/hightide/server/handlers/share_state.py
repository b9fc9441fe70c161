"""The share-state RPCs (KIP-932, seed 002): InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85, v0–1), DeleteShareGroupState (86),
ReadShareGroupStateSummary (87, v0–1).

In Kafka these are inter-broker RPCs; hightide also serves them on its listener so tools
and tests can read and write share state. Each partition of a request is one call to the
share coordinator runtime (``broker.share_state``): the sans-IO shard decides, the runtime
appends to ``__share_group_state``, waits until the records are committed (fsynced under
``flush.messages``) and only then replays them and answers: a failed fsync answers
KAFKA_STORAGE_ERROR and leaves nothing a later read could see. As Kafka's ``ShareCoordinatorService``, a
request with an empty group id, no topics or a topic without partitions is answered with
no results. WriteShareGroupState v0 carries no DeliveryCompleteCount (it is recomputed
from the state batches); v1 carries it. ReadShareGroupStateSummary v1 returns it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...share.types import ShareState, ShareStateKey, StateBatch
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.delete_share_group_state import DeleteShareGroupStateRequest, PartitionData as DeletePart
    from ...protocol.views.initialize_share_group_state import (InitializeShareGroupStateRequest,
                                                                 PartitionData as InitializePart)
    from ...protocol.views.read_share_group_state import PartitionData as ReadPart, ReadShareGroupStateRequest
    from ...protocol.views.read_share_group_state_summary import (PartitionData as SummaryPart,
                                                                   ReadShareGroupStateSummaryRequest)
    from ...protocol.views.write_share_group_state import PartitionData as WritePart, WriteShareGroupStateRequest

    ShareStateRequest = (InitializeShareGroupStateRequest | WriteShareGroupStateRequest | DeleteShareGroupStateRequest
                         | ReadShareGroupStateRequest | ReadShareGroupStateSummaryRequest)


def _empty(req: ShareStateRequest) -> bool:
    return not req.group_id or not req.topics or any(not t.partitions for t in req.topics)


def _results(per_topic: list[tuple]) -> list[dict]:
    return [{"topic_id": tid, "partitions": parts} for tid, parts in per_topic]


def _code_part(partition: int, outcome: tuple[int, str | None]) -> dict:
    return {"partition": partition, "error_code": outcome[0], "error_message": outcome[1]}


NULL_TOPIC_ID = (int(ErrorCode.invalid_request), "The topic id cannot be null.")


CLUSTER_DENIED = (int(ErrorCode.cluster_authorization_failed), MESSAGES[ErrorCode.cluster_authorization_failed])


async def _per_partition(ctx: RequestContext, req: ShareStateRequest, call: Callable[[ShareStateKey, Any], Awaitable[dict]],
                         failed: Callable[[int, tuple[int, str | None]], dict]) -> list[dict]:
    """``call(key, partition)`` per partition; ``failed(partition, (code, message))``
    answers the partitions of a topic without an id (INVALID_REQUEST, as Kafka), and
    every partition when the principal lacks CLUSTER_ACTION on the cluster (these RPCs
    come from brokers: CLUSTER_AUTHORIZATION_FAILED, as Kafka)."""
    allowed = authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if not allowed:
                parts.append(failed(p.partition, CLUSTER_DENIED))
            elif t.topic_id is None or t.topic_id.int == 0:
                parts.append(failed(p.partition, NULL_TOPIC_ID))
            else:
                parts.append(await call(ShareStateKey(req.group_id, t.topic_id, p.partition), p))
        out.append((t.topic_id, parts))
    return _results(out)


def _failed_state(partition: int, error: tuple[int, str | None]) -> dict:
    return _state_part(partition, ShareState(error_code=error[0], error_message=error[1]), False)


@handles(83, 0, 0)
async def initialize_share_group_state(ctx: RequestContext, req: InitializeShareGroupStateRequest) -> Any:
    rt = ctx.share_state

    async def one(key: ShareStateKey, p: InitializePart) -> dict:
        return _code_part(p.partition, await rt.initialize_checked(key, p.state_epoch, p.start_offset))
    results = [] if _empty(req) else await _per_partition(ctx, req, one, _code_part)
    return materialize(response_schema(83, ctx.version), {"results": results})


def _batches(p: WritePart) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                 for b in p.state_batches)


@handles(85, 0, 1)
async def write_share_group_state(ctx: RequestContext, req: WriteShareGroupStateRequest) -> Any:
    rt = ctx.share_state

    async def one(key: ShareStateKey, p: WritePart) -> dict:
        dcc = opt(p, "delivery_complete_count", -1)
        return _code_part(p.partition, await rt.write_checked(key, p.state_epoch, p.leader_epoch, p.start_offset,
                                                              dcc, _batches(p)))
    results = [] if _empty(req) else await _per_partition(ctx, req, one, _code_part)
    return materialize(response_schema(85, ctx.version), {"results": results})


@handles(86, 0, 0)
async def delete_share_group_state(ctx: RequestContext, req: DeleteShareGroupStateRequest) -> Any:
    rt = ctx.share_state

    async def one(key: ShareStateKey, p: DeletePart) -> dict:
        return _code_part(p.partition, await rt.delete_checked(key))
    results = [] if _empty(req) else await _per_partition(ctx, req, one, _code_part)
    return materialize(response_schema(86, ctx.version), {"results": results})


def _state_part(partition: int, s: ShareState, with_batches: bool) -> dict:
    out: dict[str, Any] = {"partition": partition, "error_code": s.error_code, "error_message": s.error_message,
           "state_epoch": s.state_epoch, "leader_epoch": s.leader_epoch, "start_offset": s.start_offset,
           "delivery_complete_count": s.delivery_complete_count}
    if with_batches:
        out["state_batches"] = [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                 "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                                for b in s.state_batches]
    return out


@handles(84, 0, 0)
async def read_share_group_state(ctx: RequestContext, req: ReadShareGroupStateRequest) -> Any:
    rt = ctx.share_state

    async def one(key: ShareStateKey, p: ReadPart) -> dict:
        return _state_part(p.partition, await rt.read(key, p.leader_epoch), True)
    results = [] if _empty(req) else await _per_partition(ctx, req, one,
                                                          lambda p, e: {**_failed_state(p, e), "state_batches": []})
    return materialize(response_schema(84, ctx.version), {"results": results})


@handles(87, 0, 1)
async def read_share_group_state_summary(ctx: RequestContext, req: ReadShareGroupStateSummaryRequest) -> Any:
    rt = ctx.share_state

    async def one(key: ShareStateKey, p: SummaryPart) -> dict:
        return _state_part(p.partition, await rt.read_summary(key), False)
    results = [] if _empty(req) else await _per_partition(ctx, req, one, _failed_state)
    return materialize(response_schema(87, ctx.version), {"results": results})
