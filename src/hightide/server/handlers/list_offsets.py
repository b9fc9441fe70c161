"""ListOffsets (key 2), versions 1-9, with Kafka's exact semantics:

* -2 EARLIEST: log start offset; -1 LATEST: high watermark (LSO for read_committed);
* -3 MAX_TIMESTAMP (v7+; lower versions get UNSUPPORTED_VERSION for that partition):
  the record with the largest timestamp, exact record offset even inside a compressed
  batch, the earliest batch on ties;
* -4 EARLIEST_LOCAL (v8+): the local log start offset (no tiered storage: the log start);
* -5 LATEST_TIERED (v9+): -1, as Kafka answers without remote storage;
  (-3, -4, -5 below the version that introduced them: UNSUPPORTED_VERSION);
* T >= 0: the first offset whose timestamp >= T, with that record's timestamp.
Anything at or past the fetchable end (HW, or LSO for read_committed) answers -1/-1.

Replication (Kafka's ``Partition.fetchOffsetForTimestamp``): the leader epoch answered is
the partition's current one for LATEST and, for any other offset, the epoch of the batch
holding it (the log's leader-epoch cache; -1 when it knows none). While a new leader's
high watermark is still below the start of its leader epoch, LATEST (and a lookup whose
result is at or past the fetchable end) answers OFFSET_NOT_AVAILABLE, a retriable error,
so a client never sees the end of the log go back across a leader change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...log.partition_log import PartitionLog
from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation, ResourceType
from ..authorization import refused_names
from ..context import RequestContext
from ..leadership import leader_epoch
from ..registry import handles
from .common import check_leader_epoch, offsets_available, resolve_partition

if TYPE_CHECKING:
    from ...protocol.views.list_offsets import ListOffsetsRequest

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}


def lookup(plog: PartitionLog, timestamp: int, version: int, read_committed: bool,
           available: bool = True) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) for one partition. ``available``: False while a new
    leader's HW lags the start of its epoch (OFFSET_NOT_AVAILABLE for LATEST and for
    results at or past the fetchable end)."""
    end = plog.last_stable_offset if read_committed else plog.high_watermark
    if version < _MIN_VERSION.get(timestamp, 0):
        return ErrorCode.unsupported_version, -1, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, -1, plog.log_start_offset
    if timestamp == LATEST:
        return (ErrorCode.none, -1, end) if available else (ErrorCode.offset_not_available, -1, -1)
    if timestamp == LATEST_TIERED:
        return ErrorCode.none, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset(max_offset=end)
    else:
        found = plog.offset_for_timestamp(timestamp, max_offset=end)
    if found is None:
        return ErrorCode.none, -1, -1
    offset, ts = found
    if offset >= end:
        return (ErrorCode.none if available else ErrorCode.offset_not_available), -1, -1
    return ErrorCode.none, ts, offset


def _epoch_of(plog: PartitionLog, timestamp: int, offset: int, current: int) -> int:
    """The leader epoch answered with ``offset``: the partition's current one for LATEST,
    else the epoch of the batch holding it (-1 when none is known, or no offset)."""
    if offset < 0:
        return -1
    if timestamp == LATEST:
        return current
    epoch = plog.epochs.epoch_for_offset(offset)
    return -1 if epoch is None else epoch


@handles(2, 1, 9)
def handle(ctx: RequestContext, req: ListOffsetsRequest) -> Any:
    read_committed = opt(req, "isolation_level", 0) == 1
    denied = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = []
    for t in req.topics:
        seen: dict[int, int] = {}
        for p in t.partitions:
            seen[p.partition_index] = seen.get(p.partition_index, 0) + 1
        parts = []
        for p in t.partitions:
            entry = {"partition_index": p.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1,
                     "old_style_offsets": []}
            if seen[p.partition_index] > 1 or t.name in denied:
                entry["error_code"] = (ErrorCode.topic_authorization_failed if t.name in denied
                                       else ErrorCode.invalid_request)
                parts.append(entry)
                continue
            plog, err = resolve_partition(ctx, t.name, p.partition_index)
            epoch = -1
            if err == ErrorCode.none:
                epoch = leader_epoch(ctx.image, t.name, p.partition_index)
                err = check_leader_epoch(opt(p, "current_leader_epoch", -1), epoch)
            if plog is not None and err == ErrorCode.none:
                available = offsets_available(ctx, t.name, p.partition_index)
                err, ts, off = lookup(plog, p.timestamp, ctx.version, read_committed, available)
                if err == ErrorCode.none:
                    entry.update(timestamp=ts, offset=off, leader_epoch=_epoch_of(plog, p.timestamp, off, epoch))
            entry["error_code"] = err
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return materialize(response_schema(2, ctx.version), {"throttle_time": 0, "topics": topics})
