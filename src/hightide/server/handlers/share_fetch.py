"""ShareFetch (api 78, v1-2) and ShareAcknowledge (api 79, v1-2), KIP-932.

A ShareFetch first validates the share session epoch (:mod:`hightide.share.session`),
then applies its piggy-backed acknowledgements (each one durable through the share
coordinator before the answer), then acquires records from every partition of the
session: up to MaxRecords records in total (whole log batches; v2 record-limit mode cuts
exactly), at most MaxBytes, split into AcquiredRecords ranges of about BatchSize records.
With nothing acquired it long-polls up to MaxWaitMs, woken by appends and by records
becoming available again (release, lock expiry). Records are the log's batch bytes as
stored; the client keeps the offsets named in AcquiredRecords.

A full request (epoch 0) is answered for every session partition; an incremental one
only for partitions with records, errors or acknowledgement results. Epoch -1 closes the
session after its acknowledgements and releases what the member still holds.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.share_fetch_response import (
    SharePartitionData,
    ShareTopicData,
    encode_share_fetch_response,
)
from ...protocol.views import opt
from ...share.partition import RENEW, AckBatch
from ...share.session import FINAL_EPOCH, SessionError
from ...share.types import ShareStateKey
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, refused_names
from ..context import RequestContext
from ..leadership import in_cluster, node_endpoints, not_leader
from ..registry import RawResponse, handles
from .common import LEADER_EPOCH

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...protocol.views.share_acknowledge import AcknowledgementBatch, ShareAcknowledgeRequest
    from ...protocol.views.share_fetch import AcknowledgementBatch as FetchAckBatch, ShareFetchRequest

_ZERO_UUID = uuid.UUID(int=0)  # kio's and the decoder's None: Kafka's zero topic id (an unknown topic)
RECORD_LIMIT_MODE = 1  # ShareAcquireMode (v2): 0 batch-optimized, 1 record-limit
_MAX_ACK_TYPE = 3  # GAP..REJECT; RENEW (4) needs v2 and IsRenewAck


# -- shared helpers ---------------------------------------------------------------------------
def _resolve(ctx: RequestContext, topic_id: uuid.UUID, partition: int,
             denied: frozenset[str] = frozenset()) -> tuple[str | None, int]:
    """(topic name, 0), or (None, error): UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED (the
    topic is in ``denied``), UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER."""
    timg = ctx.image.topic_by_id(topic_id)
    if timg is None:
        return None, int(ErrorCode.unknown_topic_id)
    if timg.name in denied:
        return None, int(ErrorCode.topic_authorization_failed)
    if partition not in timg.partitions:
        return None, int(ErrorCode.unknown_topic_or_partition)
    if not_leader(ctx, timg, partition) is not None:
        return None, int(ErrorCode.not_leader_or_follower)
    return timg.name, 0


def _leader(ctx: RequestContext, topic_id: uuid.UUID, partition: int) -> tuple[int, int]:
    """(leader id, leader epoch) of a partition in the image, (-1, -1) if unknown."""
    timg = ctx.image.topic_by_id(topic_id)
    p = timg.partitions.get(partition) if timg is not None else None
    return (p.leader, p.leader_epoch) if p is not None else (-1, -1)


def _endpoints(ctx: RequestContext, refused: Iterable[tuple[uuid.UUID, int]]) -> list[tuple[int, str, int, str | None]]:
    """NodeEndpoints of the leaders of the partitions refused NOT_LEADER_OR_FOLLOWER."""
    return node_endpoints(ctx, (_leader(ctx, tid, p)[0] for tid, p in refused)) if in_cluster(ctx) else []


def _ack_batches(ctx: RequestContext, req: ShareFetchRequest | ShareAcknowledgeRequest,
                 parts: Sequence[FetchAckBatch] | Sequence[AcknowledgementBatch]) -> tuple[list[AckBatch] | None, int]:
    """AckBatches of one partition, or (None, INVALID_REQUEST) for a malformed one
    (Kafka's validateAcknowledgementBatches)."""
    renew_ok = ctx.version >= 2 and opt(req, "is_renew_ack", False)
    out = []
    prev = -1
    for b in parts:
        types = tuple(int(t) for t in b.acknowledge_types)
        if (b.first_offset > b.last_offset or b.first_offset < prev or not types
                or (len(types) > 1 and b.last_offset - b.first_offset + 1 != len(types))
                or any(t < 0 or t > (RENEW if renew_ok else _MAX_ACK_TYPE) for t in types)):
            return None, int(ErrorCode.invalid_request)
        prev = b.last_offset
        out.append(AckBatch(b.first_offset, b.last_offset, types))
    return out, 0


def _denied(ctx: RequestContext, topic_ids: Iterable[uuid.UUID]) -> frozenset[str]:
    """The topics (by name) among ``topic_ids`` the principal may not READ (Kafka's
    ShareFetch/ShareAcknowledge check); empty without an authorizer."""
    return refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, _topic_names(ctx, topic_ids))


def _topic_names(ctx: RequestContext, topic_ids: Iterable[uuid.UUID]) -> Iterator[str]:
    """Names of the known topics among ``topic_ids`` (lazy: nothing is looked up unless an
    authorizer asks)."""
    image = ctx.image
    for t in map(image.topic_by_id, set(topic_ids)):
        if t is not None:
            yield t.name


async def _acknowledge_all(ctx: RequestContext, req: ShareFetchRequest | ShareAcknowledgeRequest, group_id: str, member_id: str, acks: dict,
                           denied: frozenset[str] = frozenset()) -> dict[tuple, tuple[int, str | None]]:
    """Apply {(topic id, partition): raw batches}; {(topic id, partition): (code, message)}."""
    manager = ctx.share_manager
    results: dict[tuple, tuple[int, str | None]] = {}
    jobs = []
    for (tid, p), raw in acks.items():
        name, code = _resolve(ctx, tid, p, denied)
        if name is None:
            results[(tid, p)] = (code, None)
            continue
        batches, code = _ack_batches(ctx, req, raw)
        if batches is None:
            results[(tid, p)] = (code, "malformed acknowledgement batches")
            continue
        key = ShareStateKey(group_id, tid, p)
        jobs.append(((tid, p), manager.acknowledge(key, name, member_id, batches)))
    if len(jobs) == 1:  # the usual case: no task and no gathering future for one partition
        results[jobs[0][0]] = await jobs[0][1]
    elif jobs:
        done = await asyncio.gather(*(j for _, j in jobs))
        for (tp, _), res in zip(jobs, done):
            results[tp] = res
    return results


def _member_error(ctx: RequestContext, group_id: str | None, member_id: str | None,
                  epoch: int) -> tuple[int, str] | None:
    if not group_id:
        return int(ErrorCode.invalid_group_id), "The group id must not be empty."
    if not member_id:
        return int(ErrorCode.unknown_member_id), "The member id must not be empty."
    if epoch != FINAL_EPOCH and not ctx.share_manager.is_member(group_id, member_id):
        return int(ErrorCode.unknown_member_id), f"{member_id} is not a member of share group {group_id}."
    return None


# -- ShareFetch --------------------------------------------------------------------------------
def _fetch_error(ctx: RequestContext, code: int, message: str | None) -> RawResponse:
    return RawResponse(encode_share_fetch_response(ctx.version, ctx.header.correlation_id, [], error_code=code,
                                                   error_message=message))


@handles(78, 1, 2)
def share_fetch(ctx: RequestContext, req: ShareFetchRequest) -> Any:
    return _share_fetch(ctx, req)


async def _share_fetch(ctx: RequestContext, req: ShareFetchRequest) -> RawResponse:
    """Authorization as Kafka: READ on the group (else a top-level
    GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED for its
    partitions, fetched and acknowledged alike)."""
    manager = ctx.share_manager
    group_id, member_id, epoch = req.group_id, req.member_id, req.share_session_epoch
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id or ""):  # (nullable)
        return _fetch_error(ctx, int(ErrorCode.group_authorization_failed), None)
    err = _member_error(ctx, group_id, member_id, epoch)
    if err:
        return _fetch_error(ctx, *err)
    assert group_id and member_id  # (_member_error refuses empty ones)
    wanted: list[tuple[uuid.UUID, int]] = []
    acks: dict[tuple[uuid.UUID, int], Sequence[FetchAckBatch]] = {}
    for t in req.topics:
        tid = _ZERO_UUID if t.topic_id is None else t.topic_id
        for p in t.partitions:
            wanted.append((tid, p.partition_index))
            if p.acknowledgement_batches:
                acks[(tid, p.partition_index)] = p.acknowledgement_batches
    forgotten = [(_ZERO_UUID if t.topic_id is None else t.topic_id, p) for t in req.forgotten_topics_data
                 for p in t.partitions]
    try:
        context = manager.sessions.fetch_context(group_id, member_id, epoch, wanted, forgotten, bool(acks),
                                                 ctx.now_ms)
    except SessionError as exc:
        return _fetch_error(ctx, exc.error_code, exc.message)
    denied = _denied(ctx, itertools.chain((tid for tid, _ in context.partitions), (tid for tid, _ in acks)))
    ack_results = await _acknowledge_all(ctx, req, group_id, member_id, acks, denied) if acks else {}
    results: dict[tuple[uuid.UUID, int], SharePartitionData] = {}
    renew_only = ctx.version >= 2 and opt(req, "is_renew_ack", False)
    if context.kind == "final":
        manager.close_session(group_id, member_id)
    elif not renew_only:
        await _fetch_partitions(ctx, req, group_id, member_id, context.partitions, results, denied)
    for tp, (code, msg) in ack_results.items():
        pd = results.get(tp)
        if pd is None:
            pd = results[tp] = SharePartitionData(tp[1], leader_id=ctx.identity.node_id, leader_epoch=LEADER_EPOCH)
        pd.acknowledge_error_code, pd.acknowledge_error_message = code, msg
    topics: dict[uuid.UUID, ShareTopicData] = {}
    for (tid, pi), pd in results.items():
        if context.full or pd.records or pd.error_code or (tid, pi) in ack_results:
            topics.setdefault(tid, ShareTopicData(tid)).partitions.append(pd)
    lock_ms = manager.settings(group_id).record_lock_duration_ms
    refused = [tp for tp, pd in results.items() if pd.error_code == ErrorCode.not_leader_or_follower]
    return RawResponse(encode_share_fetch_response(ctx.version, ctx.header.correlation_id, list(topics.values()),
                                                   acquisition_lock_timeout_ms=lock_ms,
                                                   node_endpoints=_endpoints(ctx, refused)))


async def _fetch_partitions(ctx: RequestContext, req: ShareFetchRequest, group_id: str, member_id: str,
                            partitions: Iterable[tuple[uuid.UUID, int]],
                            results: dict[tuple[uuid.UUID, int], SharePartitionData],
                            denied: frozenset[str] = frozenset()) -> None:
    manager = ctx.share_manager
    live: list[tuple[tuple[uuid.UUID, int], ShareStateKey, str]] = []
    for tid, p in partitions:
        pd = results[(tid, p)] = SharePartitionData(p, leader_id=ctx.identity.node_id, leader_epoch=LEADER_EPOCH)
        name, code = _resolve(ctx, tid, p, denied)
        if name is None:
            pd.error_code = code
            if code == ErrorCode.not_leader_or_follower:
                pd.leader_id, pd.leader_epoch = _leader(ctx, tid, p)
            continue
        key = ShareStateKey(group_id, tid, p)
        code, msg = await manager.prepare(key, name)
        if code:
            pd.error_code, pd.error_message = code, msg
            continue
        live.append(((tid, p), key, name))
    if not live:
        return
    max_records = req.max_records if req.max_records > 0 else 500
    max_bytes = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
    strict = ctx.version >= 2 and opt(req, "share_acquire_mode", 0) == RECORD_LIMIT_MODE
    min_bytes = max(req.min_bytes, 1)
    max_wait_s = max(req.max_wait.total_seconds(), 0)
    deadline = ctx.clock.monotonic() + max_wait_s
    total = 0
    while True:
        for tp, key, name in live:
            if max_records <= 0 or max_bytes <= 0:
                break
            if results[tp].records:
                continue  # one read per partition per response: a second could repeat a batch
            got = manager.acquire(key, member_id, max_records, max_bytes, batch_size=max(req.batch_size, 0),
                                  strict=strict)
            pd = results[tp]
            if got.error_code:
                pd.error_code, pd.error_message = got.error_code, got.error_message
                continue
            if got.acquired:
                pd.records.extend(got.records)
                pd.acquired.extend((a.first_offset, a.last_offset, a.delivery_count) for a in got.acquired)
                n = got.size
                total += n
                max_bytes -= n
                max_records -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
        left = deadline - ctx.clock.monotonic()
        if total >= min_bytes or left <= 0 or ctx.identity.stopping or max_records <= 0 or max_bytes <= 0:
            return
        keys = [(name, tp[1]) for tp, _, name in live] + [manager.wait_key(key) for _, key, _ in live]
        await ctx.waiters.wait(keys, left)
        # partitions dropped meanwhile (invalidate) are loaded again
        for tp, key, name in live:
            if manager.cached(key) is None:
                await manager.prepare(key, name)


# -- ShareAcknowledge --------------------------------------------------------------------------
def _ack_response(ctx: RequestContext, code: int, message: str | None, topics: list | None = None,
                  lock_ms: int = 0, endpoints: list[tuple[int, str, int, str | None]] | None = None) -> Any:
    return materialize(response_schema(79, ctx.version), {
        "throttle_time": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout": lock_ms,
        "responses": topics or [], "node_endpoints": [
            {"node_id": n, "host": h, "port": port, "rack": r} for n, h, port, r in endpoints or ()]})


@handles(79, 1, 2)
def share_acknowledge(ctx: RequestContext, req: ShareAcknowledgeRequest) -> Any:
    return _share_acknowledge(ctx, req)


async def _share_acknowledge(ctx: RequestContext, req: ShareAcknowledgeRequest) -> Any:
    manager = ctx.share_manager
    group_id, member_id, epoch = req.group_id, req.member_id, req.share_session_epoch
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id or ""):  # Kafka: READ group, then topics
        return _ack_response(ctx, int(ErrorCode.group_authorization_failed), None)
    err = _member_error(ctx, group_id, member_id, epoch)
    if err:
        return _ack_response(ctx, *err)
    assert group_id and member_id  # (_member_error refuses empty ones)
    try:
        final = manager.sessions.acknowledge_context(group_id, member_id, epoch, ctx.now_ms)
    except SessionError as exc:
        return _ack_response(ctx, exc.error_code, exc.message)
    acks = {(_ZERO_UUID if t.topic_id is None else t.topic_id, p.partition_index): p.acknowledgement_batches
            for t in req.topics for p in t.partitions}
    results = await _acknowledge_all(ctx, req, group_id, member_id, acks, _denied(ctx, (tid for tid, _ in acks)))
    if final:
        manager.close_session(group_id, member_id)
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, p), (code, msg) in results.items():
        leader, epoch = _leader(ctx, tid, p) if code == ErrorCode.not_leader_or_follower else (ctx.identity.node_id,
                                                                                               LEADER_EPOCH)
        by_topic.setdefault(tid, []).append({
            "partition_index": p, "error_code": code, "error_message": msg,
            "current_leader": {"leader_id": leader, "leader_epoch": epoch}})
    topics = [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()]
    refused = [tp for tp, (code, _) in results.items() if code == ErrorCode.not_leader_or_follower]
    return _ack_response(ctx, 0, None, topics, manager.settings(group_id).record_lock_duration_ms,
                         _endpoints(ctx, refused))
