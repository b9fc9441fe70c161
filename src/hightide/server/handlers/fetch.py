"""Fetch (key 1), versions 4-17: long-poll with max wait and min bytes, partition and
response byte limits, topic ids from v13.

A Fetch that finds fewer than ``min_bytes`` parks the way Kafka's DelayedFetch does: it
remembers where each fetch offset is (segment, byte position) and, whenever one of its
partitions is appended to, compares that with where the high watermark (the LSO for
read_committed) now is -- positions only, no record bytes are read. It completes when
the bytes available reach ``min_bytes``, when a partition needs an answer of its own
(deleted or recreated, log start moved past the fetch offset, truncated below it, the
fetch offset left behind on an older segment), when the broker stops, or when
``max_wait`` runs out; then the partitions are read once.

A read_committed fetch (isolation level 1) gets data up to the last stable offset and
the aborted transactions overlapping it, from the log's in-memory index (no per-record
work). Record bytes are never decoded: a partition's read of at least
``REGION_MIN_BYTES`` is a file region (a dup'd descriptor, offset and size, see
:meth:`PartitionLog.read_records`) that the connection sends with ``sendfile``; smaller
ones are ``pread`` into the response buffers (:mod:`hightide.protocol.fetch_response`).
Every region read is either in the answer (the connection closes it once sent) or
closed here (a partition dropped by the KIP-74 limit, a read thrown away when the fetch
parks). With the request log on, regions are read into bytes so the log can decode the
answer. Fetch sessions
(KIP-227) are answered the way Kafka answers when its session cache is full: session
id 0, i.e. every fetch is a full fetch, which every client supports.

A consumer's fetch of a partition whose leader is new here and whose high watermark
has not yet reached the start of its leader epoch gets OFFSET_NOT_AVAILABLE (retriable;
the Java client, librdkafka, kafka-python and aiokafka retry it) until it has: the new
leader learns the HW from its followers' next fetches, and until then its own HW may be
below one the old leader answered. Kafka answers ListOffsets this way and Fetch with the
lower HW; hightide's promise is that a high watermark never goes back (issue 28's
simulation found it going back across a controlled shutdown).

A follower's fetch (replica id >= 0, from ``ReplicaState`` in v15+; CLUSTER_ACTION when
authorization is on) reads up to the log end offset, not the high watermark, and never
waits on the HW: it parks until the LEO moves. Each partition it read without error is
recorded with the replica manager (:meth:`ReplicaManager.follower_fetched`: its fetch
offset is the follower's log end, which may move the HW and grow the ISR), and the
answer carries the HW after that update. A broker that is not a follower of the
partition gets NOT_LEADER_OR_FOLLOWER (UNKNOWN_LEADER_EPOCH when it named a leader epoch).
A parked fetch is answered at once when the partition's leader or leader epoch changes.
A follower whose LastFetchedEpoch and FetchOffset (v12+) diverge from this log's leader
epochs is answered at once with DivergingEpoch (the largest epoch <= its own and where
that epoch ends here) and no records, as Kafka does; it truncates there and fetches again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...log.partition_log import OffsetOutOfRange, PartitionLog
from ...protocol.errors import ErrorCode
from ...protocol.fetch_response import PartitionData, TopicData, encode_fetch_response
from ...protocol.regions import close_regions
from ...protocol.views import opt
from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..authorization import authorizer
from ...services import PartitionLogs
from ..context import RequestContext
from ..quotas import fetch_max_bytes, fetch_throttle, record_request_time
from ..leadership import node_endpoints, not_leader
from ..registry import RawResponse, handles
from ..request_log import REQUEST_LOGGER
from .common import check_leader_epoch, missing_log_error, offsets_available

if TYPE_CHECKING:
    from ...protocol.views.fetch import FetchPartition, FetchRequest

FINAL_EPOCH = -1

Watched = tuple[tuple[str, int], int, int, int]
"""A partition a parked fetch waits on: ((topic, partition), fetch offset, partition max
bytes, the partition's leader epoch when it was read)."""


@dataclass(frozen=True, slots=True)
class Replica:
    """The follower a fetch comes from: its broker id and broker epoch (-1: not sent)."""
    replica_id: int
    broker_epoch: int


def _read_all(ctx: RequestContext, req: FetchRequest, read_committed: bool, refused: set[str] | None = None,
              replica: Replica | None = None) -> tuple[list[TopicData], int, bool, list[Watched]]:
    """One pass over the requested partitions. Returns (topics, bytes, any error, the
    partitions to wait on). Topics in ``refused`` answer TOPIC_AUTHORIZATION_FAILED.
    ``replica``: a follower's fetch (reads up to the LEO, recorded per partition).
    The caller owns the regions among the records (see :func:`_close_records`); on an
    exception none is left open."""
    out: list[TopicData] = []
    try:
        return _read_topics(ctx, req, read_committed, refused, replica, out)
    except BaseException:
        _close_records(out)
        raise


def _read_topics(ctx: RequestContext, req: FetchRequest, read_committed: bool, refused: set[str] | None,
                 replica: Replica | None, out: list[TopicData]) -> tuple[list[TopicData], int, bool, list[Watched]]:
    """:func:`_read_all`'s pass, appending each topic to ``out`` before reading it."""
    image = ctx.image
    partition_log = ctx.logs.partition_log
    remaining = req.max_bytes if ctx.version >= 3 else 2**31 - 1
    if replica is None and ctx.services.quotas is not None:
        remaining = fetch_max_bytes(ctx, remaining)
    total = 0
    errors = False
    keys = []
    for t in req.topics:
        topic_id = opt(t, "topic_id", None)  # v13+
        if ctx.version >= 13:
            timg = image.topic_by_id(topic_id) if topic_id is not None else None
            name = timg.name if timg else None
        else:
            name = opt(t, "topic", "")
            timg = image.topics.get(name)
        td = TopicData(name, topic_id, [])
        out.append(td)
        for p in t.partitions:
            pd = PartitionData(p.partition)
            td.partitions.append(pd)
            if refused and name in refused:  # before existence, as Kafka (names never leak)
                pd.error_code = ErrorCode.topic_authorization_failed
                errors = True
                continue
            if timg is None or p.partition not in timg.partitions:
                pd.error_code = (ErrorCode.unknown_topic_id if ctx.version >= 13 else ErrorCode.unknown_topic_or_partition)
                errors = True
                continue
            if (elsewhere := not_leader(ctx, timg, p.partition)) is not None:
                pd.error_code = elsewhere.error_code
                pd.current_leader = elsewhere.current_leader if ctx.version >= 16 else None  # as Kafka (KIP-951)
                errors = True
                continue
            plog = partition_log(timg.name, p.partition)
            if plog is None:  # in the metadata but its log could not be opened (or is loading)
                pd.error_code = missing_log_error(ctx, timg.name, p.partition, ErrorCode.kafka_storage_error)
                errors = True
                continue
            epoch = timg.partitions[p.partition].leader_epoch
            keys.append(((timg.name, p.partition), p.fetch_offset, p.partition_max_bytes, epoch))
            err = check_leader_epoch(opt(p, "current_leader_epoch", -1), epoch)
            pd.high_watermark = plog.high_watermark
            pd.last_stable_offset = plog.last_stable_offset
            pd.log_start_offset = plog.log_start_offset
            pd.aborted = [] if read_committed else None
            if err != ErrorCode.none:
                pd.error_code = err
                errors = True
                continue
            if replica is None and not offsets_available(ctx, timg.name, p.partition):
                pd.error_code = ErrorCode.offset_not_available
                errors = True
                continue
            if replica is not None and _diverged(plog, p, pd):
                errors = True  # answered at once, as Kafka answers a diverging follower
                continue
            limit = min(p.partition_max_bytes, remaining)
            if limit <= 0:
                if replica is not None and not _follower_fetched(ctx, replica, timg.name, p, plog, pd):
                    errors = True
                pd.records = b""
                continue
            try:
                if read_committed:
                    result, pd.aborted = plog.read_committed(p.fetch_offset, limit)
                elif replica is not None:
                    result = plog.read_records(p.fetch_offset, limit)  # up to the LEO
                else:
                    result = plog.read_records(p.fetch_offset, limit, max_offset=plog.high_watermark)
            except OffsetOutOfRange:
                pd.error_code = ErrorCode.offset_out_of_range
                errors = True
                continue
            except OSError:
                pd.error_code = ErrorCode.kafka_storage_error
                errors = True
                continue
            data = result.data
            if replica is not None and not _follower_fetched(ctx, replica, timg.name, p, plog, pd):
                close_regions((data,))
                errors = True
                continue
            if total and len(data) > limit:
                close_regions((data,))
                data = b""  # only the first partition with data may exceed the limits (KIP-74)
                if read_committed:
                    pd.aborted = []
            pd.records = data
            n = len(data)
            total += n
            remaining -= n
    if REQUEST_LOGGER.isEnabledFor(logging.DEBUG):
        _read_regions(out)
    return out, total, errors, keys


def _close_records(topics: list[TopicData]) -> None:
    """Close the regions among the partitions' records (a read that is not sent)."""
    close_regions(pd.records for t in topics for pd in t.partitions)


def _read_regions(topics: list[TopicData]) -> None:
    """Replace every region among the records by its bytes (and close it). Raises
    OSError when a region cannot be read (all regions are closed then)."""
    try:
        for t in topics:
            for pd in t.partitions:
                rec = pd.records
                if not isinstance(rec, (bytes, memoryview)):
                    pd.records = rec.read()
                    rec.close()
    except BaseException:
        _close_records(topics)
        raise


def _diverged(plog: PartitionLog, p: FetchPartition, pd: PartitionData) -> bool:
    """Fetch v12+ from a follower (Kafka's ``Partition.readRecords``): True, with no
    records, when its LastFetchedEpoch / FetchOffset diverge from this leader's log
    (``pd.diverging_epoch`` = our largest epoch <= it and where that epoch ends here: the
    follower truncates there and fetches again) or when the end of that epoch is unknown
    here or the offset is below our log start (OFFSET_OUT_OF_RANGE)."""
    try:
        pd.diverging_epoch = plog.diverging_epoch(opt(p, "last_fetched_epoch", -1), p.fetch_offset)
    except OffsetOutOfRange:
        pd.error_code = ErrorCode.offset_out_of_range
        return True
    return pd.diverging_epoch is not None


def _follower_fetched(ctx: RequestContext, replica: Replica, topic: str, p: FetchPartition, plog: PartitionLog,
                      pd: PartitionData) -> bool:
    """Record a follower's fetch of a partition it could read (see the module doc) and put
    the HW after it in ``pd``. False (``pd.error_code`` set) when the replica manager
    refuses it."""
    replicas = ctx.services.replicas
    code = ErrorCode.not_leader_or_follower if replicas is None else replicas.follower_fetched(
        topic, p.partition, replica.replica_id, replica.broker_epoch, p.fetch_offset,
        opt(p, "log_start_offset", -1), opt(p, "current_leader_epoch", -1))
    if code != ErrorCode.none:
        pd.error_code = code
        return False
    pd.high_watermark = plog.high_watermark
    pd.last_stable_offset = plog.last_stable_offset
    return True


@dataclass(slots=True)
class _Position:
    """Where a parked fetch starts in one partition (Kafka's FetchPartitionStatus)."""
    key: tuple[str, int]
    log: PartitionLog
    offset: int
    segment: int  # base offset of the segment holding ``offset``
    position: int  # byte position of the batch holding ``offset`` in that segment
    max_bytes: int
    leader_epoch: int  # the partition's, when the fetch was read


def _park(logs: PartitionLogs, watched: list[Watched]) -> list[_Position] | None:
    """The fetch positions of ``watched``; None if a partition already needs an answer."""
    out = []
    for key, offset, max_bytes, epoch in watched:
        plog = logs.partition_log(*key)
        if plog is None:
            return None
        try:
            segment, position = plog.position_of(offset)
        except (OffsetOutOfRange, OSError):
            return None
        out.append(_Position(key, plog, offset, segment, position, max_bytes, epoch))
    return out


def _leadership_changed(ctx: RequestContext, p: _Position) -> bool:
    """True if this node no longer leads the partition in the epoch the fetch was read in."""
    t = ctx.image.topics.get(p.key[0])
    pimg = t.partitions.get(p.key[1]) if t is not None else None
    return pimg is None or pimg.leader_epoch != p.leader_epoch or pimg.leader != ctx.identity.node_id


def _ready(ctx: RequestContext, parked: list[_Position], read_committed: bool, min_bytes: int,
           to_log_end: bool = False) -> bool:
    """Kafka's DelayedFetch.tryComplete: True if the fetch should be answered now.

    Compares each fetch position with the high watermark's (LSO's; a follower's: the
    LEO's) position, counting up to the partition's max bytes of what lies between;
    never reads record bytes.
    """
    if ctx.identity.stopping:
        return True
    accumulated = 0
    partition_log = ctx.logs.partition_log
    for p in parked:
        plog = partition_log(*p.key)
        if plog is not p.log or _leadership_changed(ctx, p):
            return True  # deleted, recreated or reopened; led elsewhere or in a new epoch
        end = plog.log_end_offset if to_log_end else (
            plog.last_stable_offset if read_committed else plog.high_watermark)
        if end == p.offset:
            continue
        ceiling = plog.log_end_offset if to_log_end else plog.high_watermark
        if ceiling < p.offset or p.offset < plog.log_start_offset:
            return True  # truncated below the fetch offset, or records deleted past it
        if end < p.offset:
            continue  # read_committed past the LSO: nothing to read until it moves past the offset
        try:
            segment, position = plog.position_of(end)
        except (OffsetOutOfRange, OSError):
            return True
        if segment != p.segment:
            return True  # a new segment rolled, or the fetch is behind on an older one
        accumulated += min(position - p.position, p.max_bytes)
        if accumulated >= min_bytes:
            return True
    return False


async def _long_poll(ctx: RequestContext, req: FetchRequest, read_committed: bool, deadline: float,
                     watched: list[Watched], refused: set[str] | None, replica: Replica | None) -> RawResponse:
    """Park until :func:`_ready` or the deadline, re-checking positions on every append
    to a watched partition (and HW move); then read every partition once and answer."""
    parked = _park(ctx.logs, watched)
    if parked is not None:
        keys = [p.key for p in parked]
        while not _ready(ctx, parked, read_committed, req.min_bytes, replica is not None):
            left = deadline - ctx.clock.monotonic()
            if left <= 0:
                break
            await ctx.waiters.wait(keys, left)
    topics, total, _, _ = _read_all(ctx, req, read_committed, refused, replica)
    return _respond_within_quota(ctx, topics, total, replica)


def _respond_within_quota(ctx: RequestContext, topics: list[TopicData], total: int,
                          replica: Replica | None) -> RawResponse:
    """A consumer's answer of ``total`` record bytes, or, over its client quota, the
    answer without records carrying the throttle time (:func:`..quotas.fetch_throttle`)."""
    if replica is None and ctx.services.quotas is not None and fetch_throttle(ctx, total) > 0:
        _close_records(topics)
        return _respond(ctx, [])
    return _respond(ctx, topics)


def _respond(ctx: RequestContext, topics: list[TopicData], error: int = 0) -> RawResponse:
    try:
        buffers, _ = encode_fetch_response(ctx.version, ctx.header.correlation_id, topics, error_code=error,
                                           throttle_ms=ctx.throttle_ms, session_id=0,
                                           node_endpoints=_leader_endpoints(ctx, topics))
    except BaseException:
        _close_records(topics)
        raise
    return RawResponse(buffers)


def _leader_endpoints(ctx: RequestContext, topics: list[TopicData]) -> list[tuple[int, str, int, str | None]]:
    """NodeEndpoints (v16+): the alive leaders named in CurrentLeader fields (Kafka's
    rule); none without broker registrations (the single node leads every partition)."""
    if ctx.version < 16 or not ctx.image.brokers:
        return []
    return node_endpoints(ctx, (pd.current_leader[0] for t in topics for pd in t.partitions
                                if pd.current_leader is not None))


def _replica_id(req: FetchRequest) -> int:
    state = opt(req, "replica_state", None)  # v15+: ReplicaState.ReplicaId
    return state.replica_id if state is not None else opt(req, "replica_id", -1)


def _replica(req: FetchRequest) -> Replica | None:
    """The follower a fetch comes from (replica id >= 0), else None (a consumer)."""
    replica_id = _replica_id(req)
    if replica_id < 0:
        return None
    state = opt(req, "replica_state", None)
    return Replica(replica_id, state.replica_epoch if state is not None else -1)


def _refused_topics(ctx: RequestContext, req: FetchRequest) -> set[str] | None:
    """Kafka's fetch authorization: a follower's fetch (replica id >= 0) needs
    CLUSTER_ACTION on the cluster, else every topic is refused; a consumer's needs READ
    on each topic. Returns the refused topic names, or None when authorization is off."""
    a = authorizer(ctx)
    if a is None:
        return None
    if ctx.version >= 13:
        ids = (opt(t, "topic_id", None) for t in req.topics)
        names = {timg.name for timg in (ctx.image.topic_by_id(i) for i in ids if i is not None) if timg is not None}
    else:
        names = {opt(t, "topic", "") for t in req.topics}
    if _replica_id(req) >= 0:
        ok = a.authorize(ctx.principal, ctx.client_host, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                         CLUSTER_NAME)
        return set() if ok else names
    return {n for n in names if not a.authorize(ctx.principal, ctx.client_host, AclOperation.READ,
                                                ResourceType.TOPIC, n)}


@handles(1, 4, 17)
def handle(ctx: RequestContext, req: FetchRequest) -> Any:
    session_id = opt(req, "session_id", 0)
    if session_id != 0:
        # We never hand out sessions, so any id a client names is unknown to us.
        return _respond(ctx, [], ErrorCode.fetch_session_id_not_found)
    read_committed = req.isolation_level == 1
    refused = _refused_topics(ctx, req)
    replica = _replica(req)
    started = ctx.clock.monotonic()
    topics, total, errors, keys = _read_all(ctx, req, read_committed, refused, replica)
    if replica is None and ctx.services.quotas is not None:
        record_request_time(ctx, started)
    max_wait_ms = req.max_wait.total_seconds() * 1000
    if total >= req.min_bytes or errors or max_wait_ms <= 0 or not keys:
        if not keys and max_wait_ms > 0 and not errors and not req.topics:
            return _sleep_then_respond(ctx, max_wait_ms)
        return _respond_within_quota(ctx, topics, total, replica)
    _close_records(topics)  # parked: read again when it completes
    deadline = ctx.clock.monotonic() + max_wait_ms / 1000
    return _long_poll(ctx, req, read_committed, deadline, keys, refused, replica)


async def _sleep_then_respond(ctx: RequestContext, max_wait_ms: float) -> RawResponse:
    # An empty fetch (no partitions) waits out max_wait like Kafka, so idle clients
    # do not spin.
    await ctx.clock.sleep(max_wait_ms / 1000)
    return _respond(ctx, [])

