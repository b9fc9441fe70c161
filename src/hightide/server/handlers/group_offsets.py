"""FindCoordinator (10), OffsetCommit (8), OffsetFetch (9), OffsetDelete (47).

The logic lives in the sans-IO shard (:mod:`hightide.group.shard`); these handlers
translate requests, run them through the coordinator runtime, and encode the answer.
OffsetFetch responses carry hightide's extension tags (the partition leader's high
watermark, log start offset and last stable offset; docs/protocol-extensions.md) on v6+
when the request asks (its top-level tag 10000 IncludeLogOffsets; never unasked: Kafka
sends no tag there and librdkafka < 2.2 cannot skip them), and OffsetCommit requests may carry ``ExpectedOffset`` (tag 10000 per partition).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from ...group.offsets import CommitRequest, CommitTuple
from ...group.shard import CoordinatorResult, GroupCoordinatorShard
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.offset_commit_request import OffsetCommitRequestBody, encode_offset_commit_response
from ...protocol.offset_fetch_response import (
    GroupOffsets,
    PartitionEntry,
    asks_log_offsets,
    encode_offset_fetch_response,
    extended_entry,
)
from ...protocol.views import opt
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...share.records import partition_for as share_partition_for
from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..authorization import authorize, refused_names
from ..context import RequestContext
from ..leadership import coordinator_endpoint
from ..registry import RawResponse, handles
from .common import offsets_available

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...protocol.views.find_coordinator import FindCoordinatorRequest
    from ...protocol.views.offset_commit import OffsetCommitRequest
    from ...protocol.views.offset_delete import OffsetDeleteRequest
    from ...protocol.views.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic, OffsetFetchRequestTopics

GROUP_KEY, TXN_KEY, SHARE_KEY = 0, 1, 2
TAG_EXPECTED_OFFSET = 10000


# -- FindCoordinator ------------------------------------------------------------------------
async def _share_coordinator(ctx: RequestContext, key: str, version: int) -> tuple[ErrorCode, str | None]:
    """Key type SHARE (v6+): ``group:topicId:partition`` (Kafka's SharePartitionKey),
    answered by the node of its ``__share_group_state`` partition (this one)."""
    import base64
    tokens = key.split(":")
    try:
        if version < 6 or len(tokens) != 3 or not tokens[0]:
            raise ValueError
        base64.urlsafe_b64decode(tokens[1] + "==")[15]  # a 16-byte topic id
        int(tokens[2])
    except (ValueError, IndexError):
        return ErrorCode.invalid_request, f"invalid share coordinator key {key!r}"
    try:
        await ctx.share_state.ensure_topic()
    except CoordinatorUnavailable as exc:
        return exc.error_code, str(exc)
    return ErrorCode.none, None


async def _txn_coordinator(ctx: RequestContext, key: str) -> tuple[ErrorCode, str | None]:
    """Key type TRANSACTION: a transactional id, answered by the node of its
    ``__transaction_state`` partition (this one; the topic is created on first use)."""
    if not key:
        return ErrorCode.invalid_request, "the transactional id must not be empty"
    try:
        await ctx.txns.ensure_topic()
    except CoordinatorUnavailable as exc:
        return exc.error_code, str(exc)
    return ErrorCode.none, None


def _coordinator_partition(ctx: RequestContext, key_type: int, key: str) -> tuple[str, int]:
    """(internal topic, partition) of a valid coordinator key (Kafka's partitionFor)."""
    if key_type == SHARE_KEY:
        return ctx.share_state.topic, share_partition_for(key, ctx.share_state.num_partitions)
    if key_type == TXN_KEY:
        return ctx.txns.topic, ctx.txns.partition_for(key)
    return ctx.groups.topic, ctx.groups.partition_for(key)


def _find_coordinator_refused(ctx: RequestContext, key_type: int, key: str) -> ErrorCode | None:
    """Kafka's FindCoordinator authorization: DESCRIBE on the group or transactional id;
    share-state keys come from brokers (CLUSTER_ACTION). The error, or None if allowed."""
    if key_type == GROUP_KEY and key and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == TXN_KEY and key and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed
    if key_type == SHARE_KEY and not authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed
    return None


@handles(10, 0, 6)
async def find_coordinator(ctx: RequestContext, req: FindCoordinatorRequest) -> Any:
    key_type = opt(req, "key_type", GROUP_KEY)
    keys = list(opt(req, "coordinator_keys", ())) if ctx.version >= 4 else [opt(req, "key", "")]
    entries = []
    for key in keys:
        code, msg = ErrorCode.none, None
        refused = _find_coordinator_refused(ctx, key_type, key)
        if refused is not None:
            code = refused
        elif key_type == TXN_KEY:
            code, msg = await _txn_coordinator(ctx, key)
        elif key_type == SHARE_KEY:
            code, msg = await _share_coordinator(ctx, key, ctx.version)
        elif key_type != GROUP_KEY:
            code, msg = ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"
        elif not key:
            code, msg = ErrorCode.invalid_request, "the group id must not be empty"
        else:
            try:
                await ctx.groups.ensure_topic()
            except CoordinatorUnavailable as exc:
                code, msg = exc.error_code, str(exc)
        node = None
        if code == ErrorCode.none:  # the leader of the key's partition (cluster mode), else this node
            code, msg, node = coordinator_endpoint(ctx, *_coordinator_partition(ctx, key_type, key))
        entries.append({"key": key, "node_id": node[0] if node else -1, "host": node[1] if node else "",
                        "port": node[2] if node else -1, "error_code": code, "error_message": msg})
    if ctx.version >= 4:
        body = {"throttle_time": 0, "coordinators": entries}
    else:
        body = {"throttle_time": 0, **{k: v for k, v in entries[0].items() if k != "key"}}
    return materialize(response_schema(10, ctx.version), body)


# -- OffsetCommit ---------------------------------------------------------------------------
def _expected_offset(ctx: RequestContext, partition: object) -> int | None:
    tags = ctx.unknown_tags.get(id(partition)) if ctx.unknown_tags else None  # (usually none at all)
    raw = tags.get(TAG_EXPECTED_OFFSET) if tags else None
    return struct.unpack(">q", raw)[0] if raw is not None and len(raw) == 8 else None


def _commit_requests(ctx: RequestContext, req: OffsetCommitRequest | OffsetCommitRequestBody, denied: set[str] | frozenset[str]) -> list[CommitTuple]:
    """The partitions to commit (not those of ``denied`` topics), one tuple each. v8/v9
    requests come decoded as such tuples already (:class:`CommitPartitionRequest`)."""
    if isinstance(req, OffsetCommitRequestBody):
        return [p for t in req.topics if t.name not in denied for p in t.partitions]
    tagged = bool(ctx.unknown_tags)  # (usually no tags at all: no ExpectedOffset to look up)
    new = tuple.__new__  # the NamedTuple without its Python-level __new__
    out: list[CommitTuple] = []
    for t in req.topics:
        name = t.name
        if name in denied:
            continue
        out += [new(CommitRequest, (name, p.partition_index, p.committed_offset,
                                    opt(p, "committed_leader_epoch", -1), p.committed_metadata,
                                    _expected_offset(ctx, p) if tagged else None)) for p in t.partitions]
    return out


@handles(8, 2, 9)
async def offset_commit(ctx: RequestContext, req: OffsetCommitRequest) -> Any:
    """Answered once the commit's records are committed: durable when the topic's
    ``flush.messages`` says so (see docs/offsets.md); an error if the append or fsync
    fails, and then nothing of it is visible to OffsetFetch. Authorization as Kafka: READ
    on the group (else every partition GROUP_AUTHORIZATION_FAILED), READ on each topic
    (TOPIC_AUTHORIZATION_FAILED; those partitions are not committed)."""
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        return encode_offset_commit_response(ctx.version, ctx.header.correlation_id, [
            (t.name, [(p.partition_index, ErrorCode.group_authorization_failed) for p in t.partitions])
            for t in req.topics])
    denied = refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    commits = _commit_requests(ctx, req, denied)

    def commit(shard: GroupCoordinatorShard) -> CoordinatorResult:
        topics = ctx.image.topics  # the image when the commit runs (one look-up, not one per partition)

        def exists(topic: str, partition: int) -> bool:
            t = topics.get(topic)
            return t is not None and partition in t.partitions
        return shard.commit_offsets(req.group_id, req.generation_id_or_member_epoch, req.member_id, commits,
                                    ctx.now_ms, exists, opt(req, "group_instance_id", None), ctx.version)

    try:
        group_error, errors = await ctx.groups.execute(req.group_id, commit, ctx.now_ms)
    except CoordinatorUnavailable as exc:
        group_error, errors = exc.error_code, {}
    topics = [(t.name, [(p.partition_index, ErrorCode.topic_authorization_failed if t.name in denied
                         else errors.get((t.name, p.partition_index), group_error))
                        for p in t.partitions]) for t in req.topics]
    return encode_offset_commit_response(ctx.version, ctx.header.correlation_id, topics)


# -- OffsetFetch ----------------------------------------------------------------------------
class _Bounds:
    """(high watermark, log start offset, last stable offset) of each partition of one
    OffsetFetch request, read once per partition whatever the number of groups (the
    handler reads every group's committed offsets, and the bounds of the partitions led
    here, without awaiting: one consistent snapshot). None: no tags for the partition.

    A partition another broker leads is noted in ``elsewhere`` (leader id, leader epoch)
    and its entries in ``later``; the handler asks the leaders once every committed
    offset was read (so the high watermark is never older than the commit) and fills
    those entries in (:mod:`hightide.replica.leader_offsets`)."""

    __slots__ = ("elsewhere", "known", "later")

    def __init__(self) -> None:
        self.known: dict[tuple[str, int], tuple[int, int, int] | None] = {}
        self.elsewhere: dict[tuple[str, int], tuple[int, int]] = {}
        self.later: list[tuple[list[PartitionEntry], int, tuple[str, int]]] = []

    def read(self, ctx: RequestContext, topic: str, partition: int) -> tuple[int, int, int] | None:
        """The partition's bounds if this broker leads it and knows its high watermark,
        else None (and the leader noted in ``elsewhere`` when another broker leads it).
        A new leader whose HW has not reached the start of its epoch yet answers None,
        as ListOffsets answers OFFSET_NOT_AVAILABLE then: its HW may be below the old
        leader's, and an end offset must not go back."""
        t = ctx.image.topics.get(topic)
        p = None if t is None else t.partitions.get(partition)
        if p is None:
            return None
        if p.leader != ctx.services.identity.node_id:
            if p.leader >= 0:
                self.elsewhere[(topic, partition)] = (p.leader, p.leader_epoch)
            return None
        plog = ctx.logs.partition_log(topic, partition)
        if plog is None:
            return None
        if not offsets_available(ctx, topic, partition):
            return None
        return plog.high_watermark, plog.log_start_offset, plog.last_stable_offset


def _fetch_group(ctx: RequestContext, group_id: str,
                 topics: Sequence[OffsetFetchRequestTopics] | Sequence[OffsetFetchRequestTopic] | None, member_id: str | None = None,
                 member_epoch: int = -1, bounds: _Bounds | None = None,
                 require_stable: bool = False) -> GroupOffsets:
    """One group's offsets, with the extension tags when ``bounds`` is given. Authorization as Kafka: DESCRIBE on the group (else the
    group's GROUP_AUTHORIZATION_FAILED); named topics the principal may not DESCRIBE
    answer TOPIC_AUTHORIZATION_FAILED per partition, and are left out of an all-topics
    fetch."""
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return GroupOffsets(group_id, ErrorCode.group_authorization_failed, [])
    try:
        shard = ctx.groups.shard_for(group_id)  # committed state only
    except CoordinatorUnavailable as exc:
        return GroupOffsets(group_id, exc.error_code, [])
    member_error = shard.validate_fetch(group_id, member_id, member_epoch)
    if member_error != ErrorCode.none:  # a consumer group member with a stale epoch (v9)
        return GroupOffsets(group_id, member_error, [])
    denied = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics or ()))
    partitions = None if topics is None else [(t.name, p) for t in topics if t.name not in denied
                                              for p in t.partition_indexes]
    fetched = shard.fetch_offsets(group_id, partitions, require_stable)  # KIP-447 (v7+)
    if topics is None:
        hidden = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (f[0] for f in fetched))
        if hidden:
            fetched = [f for f in fetched if f[0] not in hidden]
    known, elsewhere = (bounds.known, bounds.elsewhere) if bounds is not None else ({}, {})
    by_topic: dict[str, list[PartitionEntry]] = {}
    for topic, partition, offset, epoch, metadata, error_code in fetched:
        b = None
        parts = by_topic.get(topic)
        if parts is None:
            parts = by_topic[topic] = []
        if bounds is not None:
            key = (topic, partition)
            if key in known:
                b = known[key]
            else:
                b = known[key] = bounds.read(ctx, topic, partition)
            if b is None and key in elsewhere:
                bounds.later.append((parts, len(parts), key))
        if b is None:
            parts.append((partition, offset, epoch, metadata, error_code, None, None, None))
        elif metadata == "":  # the usual entry (v6+, since b is read only then), encoded here
            parts.append(extended_entry(partition, offset, epoch, error_code, b[0], b[1], b[2]))
        else:
            parts.append((partition, offset, epoch, metadata, error_code, b[0], b[1], b[2]))
    if denied and topics is not None:
        for t in topics:
            if t.name in denied:
                by_topic.setdefault(t.name, []).extend(
                    (p, -1, -1, "", ErrorCode.topic_authorization_failed, None, None, None) for p in t.partition_indexes)
    return GroupOffsets(group_id, ErrorCode.none, list(by_topic.items()))


@handles(9, 1, 9)
def offset_fetch(ctx: RequestContext, req: OffsetFetchRequest) -> Any:
    """Committed offsets, with the extension tags on v6+ when the request asks for them
    (:func:`asks_log_offsets`): the bounds of partitions led here are read with the
    commits; if some partitions are led by other brokers the answer waits for their
    leaders' offsets (at most about a second, see :mod:`hightide.replica.leader_offsets`);
    the single node never waits."""
    bounds = _Bounds() if ctx.version >= 6 and ctx.unknown_tags and asks_log_offsets(
        ctx.unknown_tags.get(id(req))) else None
    if ctx.version >= 8:
        groups = [_fetch_group(ctx, g.group_id, g.topics, opt(g, "member_id", None),
                               opt(g, "member_epoch", -1), bounds, opt(req, "require_stable", False))
                  for g in opt(req, "groups", ())]
    else:
        groups = [_fetch_group(ctx, opt(req, "group_id", ""), opt(req, "topics", None), bounds=bounds,
                               require_stable=opt(req, "require_stable", False))]
    if bounds is not None and bounds.later and ctx.services.leader_offsets is not None:
        return _with_leader_bounds(ctx, groups, bounds)
    return _encode_offset_fetch(ctx, groups)


async def _with_leader_bounds(ctx: RequestContext, groups: list[GroupOffsets], bounds: _Bounds) -> RawResponse:
    """The answer once the leaders of ``bounds.elsewhere`` answered (or did not: those
    partitions then carry no tags)."""
    service = ctx.services.leader_offsets
    assert service is not None
    got = await service.bounds(bounds.elsewhere)
    for parts, i, key in bounds.later:
        b = got.get(key)
        if b is not None:
            e = parts[i]
            assert isinstance(e, tuple)  # _fetch_group's entries are tuples
            parts[i] = (e[0], e[1], e[2], e[3], e[4], b[0], b[1], b[2])
    return _encode_offset_fetch(ctx, groups)


def _encode_offset_fetch(ctx: RequestContext, groups: list[GroupOffsets]) -> RawResponse:
    frame = encode_offset_fetch_response(ctx.version, ctx.header.correlation_id, groups)
    return RawResponse([memoryview(frame)[4:]])


# -- OffsetDelete ---------------------------------------------------------------------------
@handles(47, 0, 0)
async def offset_delete(ctx: RequestContext, req: OffsetDeleteRequest) -> Any:
    """Authorization as Kafka: DELETE on the group (else GROUP_AUTHORIZATION_FAILED),
    READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition, not deleted)."""
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return materialize(response_schema(47, 0), {"error_code": ErrorCode.group_authorization_failed,
                                                    "throttle_time": 0, "topics": []})
    denied = refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    partitions = [(t.name, p.partition_index) for t in req.topics if t.name not in denied for p in t.partitions]
    try:
        group_error, errors = await ctx.groups.execute(
            req.group_id, lambda shard: shard.delete_offsets(req.group_id, partitions,
                                                             shard.subscribed_topics(req.group_id)),
            ctx.now_ms)
    except CoordinatorUnavailable as exc:
        group_error, errors = exc.error_code, {}
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": ErrorCode.topic_authorization_failed
         if t.name in denied else errors.get((t.name, p.partition_index), ErrorCode.none)}
        for p in t.partitions]} for t in req.topics] if group_error == ErrorCode.none else []
    return materialize(response_schema(47, 0), {"error_code": group_error, "throttle_time": 0, "topics": topics})
