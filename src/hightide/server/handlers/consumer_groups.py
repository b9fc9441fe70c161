"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

The state machine is sans-IO (:mod:`hightide.group.consumer_group`, driven through the
shard); these handlers translate requests into its version-independent inputs, run them
through the coordinator runtime (which appends the records, replays them, then the live
timer records) and encode the answer for the negotiated version. Heartbeats are never
parked: every answer is immediate.
"""

from __future__ import annotations

import datetime

from ...group.consumer_api import HeartbeatRequest, HeartbeatResponse
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ..coordinator_log import CoordinatorUnavailable
from ..registry import handles

CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1 MemberType: a KIP-848 member
INT32_MIN = -2**31  # authorized operations not requested


def _ms(td: datetime.timedelta) -> int:
    return td // datetime.timedelta(milliseconds=1)


def _host(ctx) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


# -- ConsumerGroupHeartbeat -------------------------------------------------------------------
def _heartbeat_request(ctx, req) -> HeartbeatRequest:
    owned = req.topic_partitions
    names = req.subscribed_topic_names
    return HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=_ms(req.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
        server_assignor=req.server_assignor,
        topic_partitions=None if owned is None else tuple((t.topic_id, tuple(t.partitions)) for t in owned),
        client_id=ctx.header.client_id or "", client_host=_host(ctx), api_version=ctx.version)


@handles(68, 0, 1)
def consumer_group_heartbeat(ctx, req):
    runtime = ctx.broker.groups
    hb = _heartbeat_request(ctx, req)
    if ctx.broker.stopping:
        resp = HeartbeatResponse(ErrorCode.not_coordinator)
    else:
        try:
            resp = runtime.execute(req.group_id, lambda shard: shard.consumer_group_heartbeat(
                hb, ctx.now_ms, runtime.topics()), ctx.now_ms)
        except CoordinatorUnavailable as exc:
            resp = HeartbeatResponse(ErrorCode.coordinator_not_available, str(exc))
    assignment = None if resp.assignment is None else {"topic_partitions": [
        {"topic_id": tid, "partitions": list(parts)} for tid, parts in resp.assignment]}
    return materialize(response_schema(68, ctx.version), {
        "throttle_time": 0, "error_code": resp.error_code, "error_message": resp.error_message,
        "member_id": resp.member_id, "member_epoch": resp.member_epoch,
        "heartbeat_interval": resp.heartbeat_interval_ms, "assignment": assignment})


# -- ConsumerGroupDescribe --------------------------------------------------------------------
def _failed(group_id: str, code: ErrorCode, message: str | None) -> dict:
    return {"group_id": group_id, "error_code": code, "error_message": message, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": INT32_MIN}


def _assignment(named) -> dict:
    return {"topic_partitions": [{"topic_id": tid, "topic_name": name, "partitions": parts}
                                 for tid, name, parts in named]}


def _describe(ctx, group_id: str) -> dict:
    """One DescribedGroup: GROUP_ID_NOT_FOUND for unknown groups and for classic groups
    (as Kafka 4.0, whose admin client then falls back to DescribeGroups)."""
    if not group_id:
        return _failed(group_id, ErrorCode.invalid_group_id, "The group id must not be empty.")
    runtime = ctx.broker.groups
    try:
        shard = runtime.shard_for(group_id)
    except CoordinatorUnavailable as exc:
        return _failed(group_id, ErrorCode.coordinator_not_available, str(exc))
    d = shard.describe_consumer_group(group_id, runtime.topics())
    if d is None:
        what = "is not a consumer group" if shard.group_exists(group_id) else "not found"
        return _failed(group_id, ErrorCode.group_id_not_found, f"Group {group_id} {what}.")
    members = [{**m, "member_type": CONSUMER_MEMBER, "assignment": _assignment(m["assignment"]),
                "target_assignment": _assignment(m["target_assignment"])} for m in d["members"]]
    return {**d, "error_code": ErrorCode.none, "error_message": None, "members": members,
            "authorized_operations": INT32_MIN}


@handles(69, 0, 1)
def consumer_group_describe(ctx, req):
    return materialize(response_schema(69, ctx.version),
                       {"throttle_time": 0, "groups": [_describe(ctx, g) for g in req.group_ids]})
