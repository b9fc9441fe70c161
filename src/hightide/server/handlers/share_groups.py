"""Share group membership (KIP-932): ShareGroupHeartbeat (76) v1, ShareGroupDescribe (77) v1.

The state machine is sans-IO (:mod:`hightide.group.share_group`, driven through the
shard); these handlers translate requests into its inputs and run them through
``broker.share_groups`` (:mod:`..share_groups`), which also initializes the share-group
state of newly subscribed partitions before answering. Heartbeats are never parked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...group.share_group import ShareHeartbeatRequest, ShareHeartbeatResponse, validate
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...coordinator.internal_topic import CoordinatorUnavailable
from ..context import RequestContext
from ..registry import handles
from .common import assignment as _assignment, describe_group
from .consumer_groups import heartbeat_refused

if TYPE_CHECKING:
    from ...protocol.views.share_group_describe import ShareGroupDescribeRequest
    from ...protocol.views.share_group_heartbeat import ShareGroupHeartbeatRequest



def _host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def _heartbeat_response(ctx: RequestContext, resp: ShareHeartbeatResponse) -> Any:
    assignment = None if resp.assignment is None else {"topic_partitions": [
        {"topic_id": tid, "partitions": list(parts)} for tid, parts in resp.assignment]}
    return materialize(response_schema(76, ctx.version), {
        "throttle_time": 0, "error_code": resp.error_code, "error_message": resp.error_message,
        "member_id": resp.member_id, "member_epoch": resp.member_epoch,
        "heartbeat_interval": resp.heartbeat_interval_ms, "assignment": assignment})


@handles(76, 1, 1)
async def share_group_heartbeat(ctx: RequestContext, req: ShareGroupHeartbeatRequest) -> Any:
    names = req.subscribed_topic_names
    hb = ShareHeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=ctx.header.client_id or "", client_host=_host(ctx))
    refused = heartbeat_refused(ctx, req.group_id, names)
    if refused is not None:
        return _heartbeat_response(ctx, ShareHeartbeatResponse(refused))
    invalid = validate(hb)
    if invalid is not None:
        return _heartbeat_response(ctx, ShareHeartbeatResponse(invalid.code, str(invalid)))
    if ctx.identity.stopping:
        return _heartbeat_response(ctx, ShareHeartbeatResponse(ErrorCode.not_coordinator))
    try:
        resp = await ctx.share_groups.heartbeat(hb, ctx.now_ms)
    except CoordinatorUnavailable as exc:
        resp = ShareHeartbeatResponse(exc.error_code, str(exc))
    return _heartbeat_response(ctx, resp)


# -- ShareGroupDescribe --------------------------------------------------------------------------
def _members(members: list[dict]) -> list[dict]:
    return [{**m, "assignment": _assignment(m["assignment"])} for m in members]


def _describe(ctx: RequestContext, group_id: str, authorized_operations: bool) -> dict:
    return describe_group(ctx, group_id, lambda shard, topics: shard.describe_share_group(group_id, topics),
                          "share", _members, authorized_operations)


@handles(77, 1, 1)
def share_group_describe(ctx: RequestContext, req: ShareGroupDescribeRequest) -> Any:
    return materialize(response_schema(77, ctx.version),
                       {"throttle_time": 0, "groups": [_describe(ctx, g, req.include_authorized_operations)
                                                        for g in req.group_ids]})
