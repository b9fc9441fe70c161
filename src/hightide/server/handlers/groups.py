"""The classic group protocol: JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).

The state machine is sans-IO (:mod:`hightide.group.classic`, driven through the shard);
these handlers translate requests, run them through the coordinator runtime and encode
the answer for the negotiated version. JoinGroup and SyncGroup may be parked: the handler
gets a handle and a future from the runtime, passes the handle to the shard and awaits
the future, which the runtime resolves when some shard result completes that handle.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from ...group.classic import JoinRequest, JoinResponse, SyncResponse
from ...group.shard import CoordinatorResult, GroupCoordinatorShard
from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..authorization import authorize, authorized_operations, authorizer
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...coordinator.internal_topic import CoordinatorUnavailable
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.delete_groups import DeleteGroupsRequest
    from ...protocol.views.describe_groups import DescribeGroupsRequest
    from ...protocol.views.heartbeat import HeartbeatRequest
    from ...protocol.views.join_group import JoinGroupRequest
    from ...protocol.views.leave_group import LeaveGroupRequest
    from ...protocol.views.list_groups import ListGroupsRequest
    from ...protocol.views.sync_group import SyncGroupRequest

INT32_MIN = -2**31
T = TypeVar("T")
_MS = datetime.timedelta(milliseconds=1)


def _ms(td: datetime.timedelta | int) -> int:
    return td // _MS if isinstance(td, datetime.timedelta) else int(td)


def _host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


async def _after_tail(ctx: RequestContext) -> None:
    """Kafka reads a connection's next request only after answering the previous one: a
    Heartbeat pipelined behind a parked JoinGroup must see the group after the join."""
    tail = ctx.groups.tail(ctx.peer)
    while tail is not None:
        await asyncio.wait([tail])
        tail = ctx.groups.tail(ctx.peer)


async def _in_order(ctx: RequestContext, fn: Callable[[], Awaitable[T]]) -> T:
    """``await fn()`` once the connection's parked request (if any) is answered."""
    await _after_tail(ctx)
    return await fn()


async def _parked(ctx: RequestContext, group_id: str, call: Callable[[GroupCoordinatorShard, int], CoordinatorResult],
                  failed: Callable[[ErrorCode], T]) -> T:
    """Run ``call(shard, handle)`` and await the parked answer. ``failed(code)`` builds
    the answer when the coordinator cannot serve."""
    runtime = ctx.groups
    await _after_tail(ctx)
    if ctx.identity.stopping:
        return failed(ErrorCode.not_coordinator)
    handle, fut = runtime.park()
    runtime.set_tail(ctx.peer, fut)
    try:
        await runtime.execute(group_id, lambda shard: call(shard, handle), ctx.now_ms)
    except CoordinatorUnavailable as exc:
        runtime.forget(handle)
        if not fut.done():
            fut.cancel()  # releases the connection's tail
        return failed(exc.error_code)
    try:
        return await fut
    except CoordinatorUnavailable as exc:
        return failed(exc.error_code)


# -- JoinGroup ------------------------------------------------------------------------------
def _may_read(ctx: RequestContext, group_id: str) -> bool:
    """Kafka's check for JoinGroup, SyncGroup, Heartbeat and LeaveGroup: READ on the group."""
    return authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id)


@handles(11, 0, 9)
async def join_group(ctx: RequestContext, req: JoinGroupRequest) -> Any:
    session = _ms(req.session_timeout)
    rebalance = _ms(opt(req, "rebalance_timeout", -1))
    jr = JoinRequest(req.group_id, req.member_id, opt(req, "group_instance_id", None),
                     ctx.header.client_id or "", _host(ctx), session, rebalance if rebalance >= 0 else session,
                     req.protocol_type, tuple((p.name, p.metadata) for p in req.protocols),
                     require_known_member_id=ctx.version >= 4)
    resp: JoinResponse
    if not _may_read(ctx, req.group_id):
        resp = JoinResponse(ErrorCode.group_authorization_failed, req.member_id)
    else:
        resp = await _parked(ctx, req.group_id, lambda shard, h: shard.join_group(jr, h, ctx.now_ms),
                             lambda code: JoinResponse(code, req.member_id))
    ok = resp.error == ErrorCode.none
    body = {
        "throttle_time": 0, "error_code": resp.error, "generation_id": resp.generation,
        "protocol_type": resp.protocol_type if ok else None,
        "protocol_name": resp.protocol if ok else (None if ctx.version >= 7 else ""),
        "leader": resp.leader, "skip_assignment": resp.skip_assignment, "member_id": resp.member_id,
        "members": [{"member_id": mid, "group_instance_id": iid, "metadata": meta}
                    for mid, iid, meta in resp.members],
    }
    if ctx.version < 7 and body["protocol_name"] is None:
        body["protocol_name"] = ""
    return materialize(response_schema(11, ctx.version), body)


# -- SyncGroup ------------------------------------------------------------------------------
@handles(14, 0, 5)
async def sync_group(ctx: RequestContext, req: SyncGroupRequest) -> Any:
    assignments = {a.member_id: a.assignment for a in req.assignments}
    instance = opt(req, "group_instance_id", None)
    ptype, pname = opt(req, "protocol_type", None), opt(req, "protocol_name", None)
    if not _may_read(ctx, req.group_id):
        return materialize(response_schema(14, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "protocol_type": None,
            "protocol_name": None, "assignment": b""})
    resp: SyncResponse = await _parked(
        ctx, req.group_id,
        lambda shard, h: shard.sync_group(req.group_id, req.member_id, instance, req.generation_id, ptype, pname,
                                          assignments, h, ctx.now_ms),
        lambda code: SyncResponse(code))
    ok = resp.error == ErrorCode.none
    return materialize(response_schema(14, ctx.version), {
        "throttle_time": 0, "error_code": resp.error, "protocol_type": resp.protocol_type if ok else None,
        "protocol_name": resp.protocol if ok else None, "assignment": resp.assignment})


# -- Heartbeat ------------------------------------------------------------------------------
@handles(12, 0, 4)
def heartbeat(ctx: RequestContext, req: HeartbeatRequest) -> Any:
    return _in_order(ctx, lambda: _heartbeat(ctx, req))


async def _heartbeat(ctx: RequestContext, req: HeartbeatRequest) -> Any:
    instance = opt(req, "group_instance_id", None)
    if not _may_read(ctx, req.group_id):
        return materialize(response_schema(12, ctx.version), {"throttle_time": 0,
                                                              "error_code": ErrorCode.group_authorization_failed})
    try:
        code = await ctx.groups.execute(
            req.group_id, lambda shard: shard.heartbeat(req.group_id, req.member_id, instance, req.generation_id,
                                                        ctx.now_ms), ctx.now_ms)
    except CoordinatorUnavailable as exc:
        code = exc.error_code
    return materialize(response_schema(12, ctx.version), {"throttle_time": 0, "error_code": code})


# -- LeaveGroup -----------------------------------------------------------------------------
@handles(13, 0, 5)
def leave_group(ctx: RequestContext, req: LeaveGroupRequest) -> Any:
    return _in_order(ctx, lambda: _leave_group(ctx, req))


async def _leave_group(ctx: RequestContext, req: LeaveGroupRequest) -> Any:
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in opt(req, "members", ())]
    else:
        members = [(opt(req, "member_id", ""), None)]
    if not _may_read(ctx, req.group_id):
        return materialize(response_schema(13, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []})
    try:
        top, codes = await ctx.groups.execute(
            req.group_id, lambda shard: shard.leave_group(req.group_id, members, ctx.now_ms), ctx.now_ms)
    except CoordinatorUnavailable as exc:
        top, codes = exc.error_code, []
    if ctx.version < 3:
        top = top if top != ErrorCode.none else codes[0]
        return materialize(response_schema(13, ctx.version), {"throttle_time": 0, "error_code": top})
    return materialize(response_schema(13, ctx.version), {
        "throttle_time": 0, "error_code": top,
        "members": [{"member_id": mid, "group_instance_id": iid, "error_code": code}
                    for (mid, iid), code in zip(members, codes)] if top == ErrorCode.none else []})


# -- DescribeGroups -------------------------------------------------------------------------
def _describe(ctx: RequestContext, group_id: str) -> dict:
    base = {"group_id": group_id, "error_code": ErrorCode.none, "error_message": None, "group_state": "Dead",
            "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": INT32_MIN}
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return {**base, "error_code": ErrorCode.group_authorization_failed, "group_state": ""}
    try:
        shard = ctx.groups.shard_for(group_id) if group_id else None
        described = shard.describe_group(group_id) if shard is not None else None
    except CoordinatorUnavailable as exc:
        return {**base, "error_code": exc.error_code, "group_state": ""}
    if described is None:
        if ctx.version >= 6:
            other = shard is not None and shard.group_exists(group_id)  # a consumer or share group
            return {**base, "error_code": ErrorCode.group_id_not_found, "error_message":
                    f"Group {group_id} is not a classic group." if other else f"Group {group_id} not found."}
        return base
    return {**base, **described}


@handles(15, 0, 6)
def describe_groups(ctx: RequestContext, req: DescribeGroupsRequest) -> Any:
    groups = [_describe(ctx, g) for g in req.groups]
    if opt(req, "include_authorized_operations", False):  # v3+; no authorizer: every group operation
        for g in groups:
            if g["error_code"] == ErrorCode.none:
                g["authorized_operations"] = authorized_operations(ctx, ResourceType.GROUP, g["group_id"])
    return materialize(response_schema(15, ctx.version), {"throttle_time": 0, "groups": groups})


# -- ListGroups -----------------------------------------------------------------------------
@handles(16, 0, 5)
def list_groups(ctx: RequestContext, req: ListGroupsRequest) -> Any:
    states = {s.lower() for s in opt(req, "states_filter", ())}
    types = {t.lower() for t in opt(req, "types_filter", ())}
    groups = []
    try:
        shards = list(ctx.groups.shards.values())  # none before the topic exists
    except CoordinatorUnavailable as exc:
        return materialize(response_schema(16, ctx.version),
                           {"throttle_time": 0, "error_code": exc.error_code, "groups": []})
    if not types or "classic" in types:
        for shard in shards:
            for gid, ptype, state in shard.list_groups():
                if not states or state.lower() in states:
                    groups.append({"group_id": gid, "protocol_type": ptype, "group_state": state,
                                   "group_type": "classic"})
    if not types or "consumer" in types:
        for shard in shards:
            for gid, state in shard.list_consumer_groups():
                if not states or state.lower() in states:
                    groups.append({"group_id": gid, "protocol_type": "consumer", "group_state": state,
                                   "group_type": "consumer"})
    if not types or "share" in types:
        for shard in shards:
            for gid, state in shard.list_share_groups():
                if not states or state.lower() in states:
                    groups.append({"group_id": gid, "protocol_type": "share", "group_state": state,
                                   "group_type": "share"})
    a = authorizer(ctx)  # Kafka: DESCRIBE on the cluster lists every group, else those the principal may describe
    if a is not None and not a.authorize(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                         CLUSTER_NAME):
        groups = [g for g in groups if a.authorize(ctx.principal, ctx.client_host, AclOperation.DESCRIBE,
                                                   ResourceType.GROUP, g["group_id"])]
    return materialize(response_schema(16, ctx.version),
                       {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups})


# -- DeleteGroups ---------------------------------------------------------------------------
async def _delete_share_state(ctx: RequestContext, group_id: str) -> ErrorCode:
    """An empty share group's share-partition state goes first (as Kafka's
    GroupCoordinatorService.deleteGroups); a non-empty one is refused by the shard."""
    if not group_id or ctx.share_groups.group_state(group_id) != "Empty":
        return ErrorCode.none
    return ErrorCode(await ctx.share_groups.delete_state(group_id))


def _delete_group(shard: GroupCoordinatorShard, group_id: str) -> CoordinatorResult:
    return shard.delete_group(group_id)


@handles(42, 0, 2)
async def delete_groups(ctx: RequestContext, req: DeleteGroupsRequest) -> Any:
    results = []
    for group_id in req.groups_names:
        if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, group_id):
            results.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed})
            continue
        try:
            code = await _delete_share_state(ctx, group_id)
            if code == ErrorCode.none:
                code = await ctx.groups.execute(group_id, partial(_delete_group, group_id=group_id), ctx.now_ms)
        except CoordinatorUnavailable as exc:
            code = exc.error_code
        results.append({"group_id": group_id, "error_code": code})
    return materialize(response_schema(42, ctx.version), {"throttle_time": 0, "results": results})
