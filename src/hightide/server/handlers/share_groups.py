"""Share group membership (KIP-932): ShareGroupHeartbeat (76) v1, ShareGroupDescribe (77) v1.

The state machine is sans-IO (:mod:`hightide.group.share_group`, driven through the
shard); these handlers translate requests into its inputs and run them through
``broker.share_groups`` (:mod:`..share_groups`), which also initializes the share-group
state of newly subscribed partitions before answering. Heartbeats are never parked.
"""

from __future__ import annotations

from ...group.share_group import ShareHeartbeatRequest, ShareHeartbeatResponse, validate
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ..coordinator_log import CoordinatorUnavailable
from ..registry import handles

INT32_MIN = -2**31  # authorized operations not requested


def _host(ctx) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def _heartbeat_response(ctx, resp: ShareHeartbeatResponse):
    assignment = None if resp.assignment is None else {"topic_partitions": [
        {"topic_id": tid, "partitions": list(parts)} for tid, parts in resp.assignment]}
    return materialize(response_schema(76, ctx.version), {
        "throttle_time": 0, "error_code": resp.error_code, "error_message": resp.error_message,
        "member_id": resp.member_id, "member_epoch": resp.member_epoch,
        "heartbeat_interval": resp.heartbeat_interval_ms, "assignment": assignment})


@handles(76, 1, 1)
async def share_group_heartbeat(ctx, req):
    names = req.subscribed_topic_names
    hb = ShareHeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=ctx.header.client_id or "", client_host=_host(ctx))
    invalid = validate(hb)
    if invalid is not None:
        return _heartbeat_response(ctx, ShareHeartbeatResponse(invalid.code, str(invalid)))
    if ctx.broker.stopping:
        return _heartbeat_response(ctx, ShareHeartbeatResponse(ErrorCode.not_coordinator))
    try:
        resp = await ctx.broker.share_groups.heartbeat(hb, ctx.now_ms)
    except CoordinatorUnavailable as exc:
        resp = ShareHeartbeatResponse(ErrorCode.coordinator_not_available, str(exc))
    return _heartbeat_response(ctx, resp)


# -- ShareGroupDescribe --------------------------------------------------------------------------
def _failed(group_id: str, code: ErrorCode, message: str | None) -> dict:
    return {"group_id": group_id, "error_code": code, "error_message": message, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": INT32_MIN}


def _describe(ctx, group_id: str) -> dict:
    """One DescribedGroup: GROUP_ID_NOT_FOUND for unknown groups and groups of another
    type (as Kafka: "Group X is not a share group.")."""
    if not group_id:
        return _failed(group_id, ErrorCode.invalid_group_id, "The group id must not be empty.")
    runtime = ctx.broker.groups
    try:
        shard = runtime.shard_for(group_id)
    except CoordinatorUnavailable as exc:
        return _failed(group_id, ErrorCode.coordinator_not_available, str(exc))
    d = shard.describe_share_group(group_id, runtime.topics())
    if d is None:
        message = (f"Group {group_id} is not a share group." if shard.group_exists(group_id)
                   else f"Group {group_id} not found.")
        return _failed(group_id, ErrorCode.group_id_not_found, message)
    members = [{**m, "assignment": {"topic_partitions": [
        {"topic_id": tid, "topic_name": name, "partitions": parts} for tid, name, parts in m["assignment"]]}}
        for m in d["members"]]
    return {**d, "error_code": ErrorCode.none, "error_message": None, "members": members,
            "authorized_operations": INT32_MIN}


@handles(77, 1, 1)
def share_group_describe(ctx, req):
    return materialize(response_schema(77, ctx.version),
                       {"throttle_time": 0, "groups": [_describe(ctx, g) for g in req.group_ids]})
