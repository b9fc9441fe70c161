"""DeleteRecords (key 21): advance the log start offset (offset -1 means the high
watermark); whole segments below it are deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.codec import response_schema

from ...log.partition_log import OffsetOutOfRange
from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation, ResourceType
from ..authorization import refused_names
from ..context import RequestContext
from ..registry import handles
from .common import resolve_partition

if TYPE_CHECKING:
    from ...protocol.views.delete_records import DeleteRecordsRequest


@handles(21, 0, 2)
def handle(ctx: RequestContext, req: DeleteRecordsRequest) -> Any:
    denied = refused_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name in denied:
                plog, err = None, ErrorCode.topic_authorization_failed
            else:
                plog, err = resolve_partition(ctx, t.name, p.partition_index)
            low = -1
            if plog is not None:
                try:
                    low = plog.delete_records_before(p.offset)
                except OffsetOutOfRange:
                    err = ErrorCode.offset_out_of_range
                except OSError:
                    err = ErrorCode.kafka_storage_error
            parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": err})
        topics.append({"name": t.name, "partitions": parts})
    return materialize(response_schema(21, ctx.version), {"throttle_time": 0, "topics": topics})
