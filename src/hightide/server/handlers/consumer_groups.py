"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

The state machine is sans-IO (:mod:`hightide.group.consumer_group`, driven through the
shard); these handlers translate requests into its version-independent inputs, run them
through the coordinator runtime (which appends the records, waits until they are
committed, replays them, then the live timer records) and encode the answer for the negotiated version. Heartbeats are never
parked: every answer is immediate. A member's regex is resolved with its own
authorization: the heartbeat passes the core a filter keeping the topics the request's
principal may DESCRIBE (:func:`regex_describable`).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ...group.consumer_api import HeartbeatRequest, HeartbeatResponse
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import allowed_names, authorize, authorizer, refused_names
from ..context import RequestContext
from ..registry import handles
from .common import assignment as _assignment, describe_group

if TYPE_CHECKING:
    from ...protocol.views.consumer_group_describe import ConsumerGroupDescribeRequest
    from ...protocol.views.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest

CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1 MemberType: a KIP-848 member
_ZERO_UUID = uuid.UUID(int=0)  # kio reads Kafka's zero topic id (Uuid.ZERO) as None


def _ms(td: datetime.timedelta) -> int:
    return td // datetime.timedelta(milliseconds=1)


def _host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


# -- ConsumerGroupHeartbeat -------------------------------------------------------------------
def _heartbeat_request(ctx: RequestContext, req: ConsumerGroupHeartbeatRequest) -> HeartbeatRequest:
    owned = req.topic_partitions
    names = req.subscribed_topic_names
    return HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=_ms(req.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=opt(req, "subscribed_topic_regex", None),
        server_assignor=req.server_assignor,
        topic_partitions=None if owned is None else tuple((t.topic_id or _ZERO_UUID, tuple(t.partitions)) for t in owned),
        client_id=ctx.header.client_id or "", client_host=_host(ctx), api_version=ctx.version)


def heartbeat_refused(ctx: RequestContext, group_id: str, subscribed: Collection[str] | None) -> ErrorCode | None:
    """Kafka's check of a consumer or share group heartbeat: READ on the group (else
    GROUP_AUTHORIZATION_FAILED), and DESCRIBE on every subscribed topic name (else
    TOPIC_AUTHORIZATION_FAILED: clients may not learn of topics they cannot describe)."""
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if subscribed and refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, subscribed):
        return ErrorCode.topic_authorization_failed
    return None


def regex_describable(ctx: RequestContext) -> Callable[[Collection[str]], Collection[str]] | None:
    """The filter a member's regex is resolved with (Kafka's
    ``filterTopicDescribeAuthorizedTopics``): the topics among those it matches that the
    request's principal may DESCRIBE, from the ACLs current when it runs. None without an
    authorizer (every topic)."""
    if authorizer(ctx) is None:
        return None
    return lambda names: allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)


@handles(68, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, req: ConsumerGroupHeartbeatRequest) -> Any:
    runtime = ctx.groups
    hb = _heartbeat_request(ctx, req)
    refused = heartbeat_refused(ctx, req.group_id, req.subscribed_topic_names)
    if refused is not None:
        resp = HeartbeatResponse(refused)
    elif ctx.identity.stopping:
        resp = HeartbeatResponse(ErrorCode.not_coordinator)
    else:
        describable = regex_describable(ctx)
        try:
            resp = await runtime.execute(req.group_id, lambda shard: shard.consumer_group_heartbeat(
                hb, ctx.now_ms, runtime.topics(), describable), ctx.now_ms)
        except CoordinatorUnavailable as exc:
            resp = HeartbeatResponse(exc.error_code, str(exc))
    assignment = None if resp.assignment is None else {"topic_partitions": [
        {"topic_id": tid, "partitions": list(parts)} for tid, parts in resp.assignment]}
    return materialize(response_schema(68, ctx.version), {
        "throttle_time": 0, "error_code": resp.error_code, "error_message": resp.error_message,
        "member_id": resp.member_id, "member_epoch": resp.member_epoch,
        "heartbeat_interval": resp.heartbeat_interval_ms, "assignment": assignment})


# -- ConsumerGroupDescribe --------------------------------------------------------------------
def _members(members: list[dict]) -> list[dict]:
    return [{**m, "member_type": CONSUMER_MEMBER, "assignment": _assignment(m["assignment"]),
             "target_assignment": _assignment(m["target_assignment"])} for m in members]


def _describe(ctx: RequestContext, group_id: str, authorized_operations: bool) -> dict:
    """Classic groups answer GROUP_ID_NOT_FOUND too (as Kafka 4.0, whose admin client then
    falls back to DescribeGroups)."""
    return describe_group(ctx, group_id, lambda shard, topics: shard.describe_consumer_group(group_id, topics),
                          "consumer", _members, authorized_operations)


@handles(69, 0, 1)
def consumer_group_describe(ctx: RequestContext, req: ConsumerGroupDescribeRequest) -> Any:
    return materialize(response_schema(69, ctx.version),
                       {"throttle_time": 0, "groups": [_describe(ctx, g, req.include_authorized_operations)
                                                        for g in req.group_ids]})
