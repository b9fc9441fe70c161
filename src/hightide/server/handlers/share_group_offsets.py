"""Share group offsets: DescribeShareGroupOffsets (90, v0–1), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92), as Kafka 4.x's ``GroupCoordinatorService`` answers them.

* Describe reads each share partition's summary (start offset, leader epoch, delivery
  complete count) from the share coordinator (``ctx.share_state``). v1 adds ``Lag`` =
  LEO − SPSO − DeliveryCompleteCount, -1 while the share partition is uninitialised or the
  count is unknown. A topic that does not exist answers start offset -1; a request without
  topics (null) describes every share partition the group has state for; an empty list
  answers no topics. No group-existence check (Kafka's neither).
* Alter and Delete need an existing, empty share group (GROUP_ID_NOT_FOUND /
  NON_EMPTY_GROUP at the top level, INVALID_GROUP_ID for an empty id). Alter
  (re)initialises each named partition's state at the new start offset with the group's
  epoch as state epoch and records the partitions as initialised in the group; Delete
  deletes the state of every partition of each named topic (UNKNOWN_TOPIC_OR_PARTITION for
  an unknown topic or one without state). Either way the share-partition cache drops the
  partitions (``ctx.share_manager.invalidate``) so the next fetch reads the new state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
import uuid

from ...lag.share import UNKNOWN, wire_lag
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...share.types import ShareStateKey
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, refused_names
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.alter_share_group_offsets import AlterShareGroupOffsetsRequest
    from ...protocol.views.delete_share_group_offsets import DeleteShareGroupOffsetsRequest
    from ...protocol.views.describe_share_group_offsets import DescribeShareGroupOffsetsRequest

ZERO_UUID = uuid.UUID(int=0)
_UNAVAILABLE = (CoordinatorUnavailable,)
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


# -- DescribeShareGroupOffsets ----------------------------------------------------------------
def _partition(index: int, start_offset: int = -1, leader_epoch: int = 0) -> dict:
    return {"partition_index": index, "start_offset": start_offset, "leader_epoch": leader_epoch, "lag": UNKNOWN,
            "error_code": ErrorCode.none, "error_message": None}


def _describe_partition(ctx: RequestContext, topic: str, key: ShareStateKey) -> dict:
    s = ctx.share_state.summary(key)
    if s.error_code != 0:  # as Kafka: absence of data, not an error
        return _partition(key.partition)
    out = _partition(key.partition, s.start_offset, s.leader_epoch)
    if s.start_offset >= 0 and s.delivery_complete_count >= 0:
        plog = ctx.logs.partition_log(topic, key.partition)
        if plog is None:
            out.update(error_code=ErrorCode.unknown_topic_or_partition, error_message=UNKNOWN_TOPIC_MESSAGE)
        else:
            out["lag"] = wire_lag(plog.log_end_offset, s.start_offset, s.delivery_complete_count)
    return out


def describe_group(ctx: RequestContext, group_id: str, topics: list[tuple[str, list[int]]] | None) -> dict:
    """One DescribeShareGroupOffsetsResponseGroup as a dict (kio field names), from
    committed share state; while the state is loading, the group's error says so."""
    try:
        return _describe_group(ctx, group_id, topics)
    except _UNAVAILABLE as exc:
        return {"group_id": group_id, "topics": [], "error_code": exc.error_code, "error_message": str(exc)}


def _describe_group(ctx: RequestContext, group_id: str, topics: list[tuple[str, list[int]]] | None) -> dict:
    image = ctx.image
    if topics is None:  # every share partition with state
        by_topic: dict[uuid.UUID, list[int]] = {}
        for key in ctx.share_state.keys_for_group(group_id):
            by_topic.setdefault(key.topic_id, []).append(key.partition)
        topics = []
        for tid, parts in by_topic.items():
            t = image.topic_by_id(tid)
            if t is not None:
                topics.append((t.name, sorted(parts)))
        topics.sort()
    known, unknown = [], []
    for name, parts in topics:
        t = image.topics.get(name)
        if t is None:
            unknown.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": [_partition(p) for p in parts]})
            continue
        known.append({"topic_name": name, "topic_id": t.topic_id, "partitions": [
            _describe_partition(ctx, name, ShareStateKey(group_id, t.topic_id, p)) for p in parts]})
    return {"group_id": group_id, "topics": known + unknown, "error_code": ErrorCode.none, "error_message": None}


@handles(90, 0, 1)
def describe_share_group_offsets(ctx: RequestContext, req: DescribeShareGroupOffsetsRequest) -> Any:
    """Authorization as Kafka: DESCRIBE on each group (else its GROUP_AUTHORIZATION_FAILED)
    and on each topic: a named topic the principal may not describe answers
    TOPIC_AUTHORIZATION_FAILED per partition; an all-topics request leaves it out."""
    groups = []
    for g in req.groups:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            groups.append({"group_id": g.group_id, "topics": [], "error_code": ErrorCode.group_authorization_failed,
                           "error_message": None})
            continue
        topics = None if g.topics is None else [(t.topic_name, list(t.partitions)) for t in g.topics]
        denied = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (n for n, _ in topics or ()))
        described = describe_group(ctx, g.group_id, [t for t in topics or () if t[0] not in denied]
                                   if denied else topics)
        if topics is None:
            hidden = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                   (t["topic_name"] for t in described["topics"]))
            described["topics"] = [t for t in described["topics"] if t["topic_name"] not in hidden]
        elif denied:
            described["topics"] += [{"topic_name": n, "topic_id": ZERO_UUID, "partitions": [
                {**_partition(p), "error_code": ErrorCode.topic_authorization_failed} for p in parts]}
                for n, parts in topics if n in denied]
        groups.append(described)
    return materialize(response_schema(90, ctx.version), {"throttle_time": 0, "groups": groups})


# -- shared checks ----------------------------------------------------------------------------
def _group_error(ctx: RequestContext, group_id: str, operation: AclOperation) -> tuple[ErrorCode, str | None] | None:
    """The group-level error of Alter/DeleteShareGroupOffsets: GROUP_AUTHORIZATION_FAILED
    without ``operation`` on the group, then the group's state errors."""
    if not authorize(ctx, operation, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    if not group_id:
        return ErrorCode.invalid_group_id, "The group id must not be empty."
    try:
        state = ctx.share_groups.group_state(group_id)
    except _UNAVAILABLE as exc:
        return exc.error_code, str(exc)
    if state is None:
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
    if state != "Empty":
        return ErrorCode.non_empty_group, f"Share group {group_id} is not empty."
    return None


def _invalidate(ctx: RequestContext, key: ShareStateKey) -> None:
    ctx.share_manager.invalidate(key)


def _group_epoch(ctx: RequestContext, group_id: str, default: int) -> int:
    try:
        d = ctx.share_groups.describe(group_id)
    except (AttributeError, *_UNAVAILABLE):
        return default
    return d.get("group_epoch", default) if d else default


async def _mark_initialized(ctx: RequestContext, group_id: str, parts: dict[uuid.UUID, frozenset[int]], now_ms: int) -> None:
    """Record altered partitions as initialised in the share group, as Kafka's
    alterShareGroupOffsets does, so a later heartbeat does not initialise them again."""
    runtime = ctx.groups
    try:
        await runtime.execute(group_id, lambda shard: shard.share_initialized(group_id, parts, runtime.topics(), True),
                        now_ms)
    except _UNAVAILABLE:
        pass


# -- AlterShareGroupOffsets ------------------------------------------------------------------
@handles(91, 0, 0)
async def alter_share_group_offsets(ctx: RequestContext, req: AlterShareGroupOffsetsRequest) -> Any:
    """Authorization as Kafka: READ on the group (else a top-level
    GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED per
    partition, not altered)."""
    schema = response_schema(91, ctx.version)
    err = _group_error(ctx, req.group_id, AclOperation.READ)
    denied = refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in req.topics))
    if err:
        return materialize(schema, {"throttle_time": 0, "error_code": err[0], "error_message": err[1],
                                    "responses": []})
    responses: list[dict] = []
    done: dict[uuid.UUID, set[int]] = {}
    code: int
    message: str | None
    for t in req.topics:
        timg = ctx.image.topics.get(t.topic_name)
        parts = []
        for p in t.partitions:
            code, message = ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE
            if t.topic_name in denied:
                code, message = ErrorCode.topic_authorization_failed, None
            elif timg is not None and p.partition_index in timg.partitions:
                key = ShareStateKey(req.group_id, timg.topic_id, p.partition_index)
                try:
                    current = ctx.share_state.summary(key)
                except _UNAVAILABLE as exc:
                    code, message = exc.error_code, str(exc)
                else:
                    epoch = _group_epoch(ctx, req.group_id, max(current.state_epoch, 0) + 1)
                    code, message = await ctx.share_state.initialize_checked(key, max(epoch, current.state_epoch),
                                                                             p.start_offset)
                    _invalidate(ctx, key)
                if code == 0:
                    done.setdefault(timg.topic_id, set()).add(p.partition_index)
            parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
        responses.append({"topic_name": t.topic_name, "topic_id": timg.topic_id if timg else ZERO_UUID,
                          "partitions": parts})
    if done:
        await _mark_initialized(ctx, req.group_id, {t: frozenset(ps) for t, ps in done.items()}, ctx.now_ms)
    return materialize(schema, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                "responses": responses})


# -- DeleteShareGroupOffsets -----------------------------------------------------------------
@handles(92, 0, 0)
async def delete_share_group_offsets(ctx: RequestContext, req: DeleteShareGroupOffsetsRequest) -> Any:
    """Authorization as Kafka: DELETE on the group (else a top-level
    GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED, not deleted)."""
    schema = response_schema(92, ctx.version)
    err = _group_error(ctx, req.group_id, AclOperation.DELETE)
    denied = refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in req.topics))
    if err:
        return materialize(schema, {"throttle_time": 0, "error_code": err[0], "error_message": err[1],
                                    "responses": []})
    with_state: dict[uuid.UUID, list[ShareStateKey]] = {}
    try:
        keys_with_state = ctx.share_state.keys_for_group(req.group_id)
    except _UNAVAILABLE as exc:
        return materialize(schema, {"throttle_time": 0, "error_code": exc.error_code, "error_message": str(exc),
                                    "responses": []})
    for key in keys_with_state:
        with_state.setdefault(key.topic_id, []).append(key)
    ok: list[dict] = []
    failed: list[dict] = []
    for t in req.topics:
        timg = ctx.image.topics.get(t.topic_name)
        if t.topic_name in denied:
            failed.append({"topic_name": t.topic_name, "topic_id": ZERO_UUID,
                           "error_code": ErrorCode.topic_authorization_failed, "error_message": None})
            continue
        if timg is None:
            failed.append({"topic_name": t.topic_name, "topic_id": ZERO_UUID,
                           "error_code": ErrorCode.unknown_topic_or_partition, "error_message": UNKNOWN_TOPIC_MESSAGE})
            continue
        keys = with_state.get(timg.topic_id)
        if not keys:
            failed.append({"topic_name": t.topic_name, "topic_id": ZERO_UUID,
                           "error_code": ErrorCode.unknown_topic_or_partition,
                           "error_message": "There is no offset information to delete."})
            continue
        code, message = ErrorCode.none, None
        for key in keys:
            c, m = await ctx.share_state.delete_checked(key)
            _invalidate(ctx, key)
            if c != 0 and code == ErrorCode.none:
                code, message = ErrorCode(c), m
        entry = {"topic_name": t.topic_name, "topic_id": timg.topic_id, "error_code": code, "error_message": message}
        (ok if code == ErrorCode.none else failed).append(entry)
    if ok:
        # the group forgets these topics were initialized, so its next heartbeat
        # initializes them again before assigning them (as Kafka's coordinator does)
        try:
            await ctx.share_groups.state_deleted(req.group_id, [e["topic_id"] for e in ok])
        except _UNAVAILABLE:
            pass  # the share state is gone; a fetch initializes a partition it finds without state
    return materialize(schema, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                "responses": ok + failed})
