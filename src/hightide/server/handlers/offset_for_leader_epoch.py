"""OffsetForLeaderEpoch (key 23): a single node has one leader epoch (0) for every
partition, so epoch 0 ends at the log end offset and any other epoch is undefined."""

from __future__ import annotations

from typing import Any

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ..leadership import leader_epoch
from ..registry import handles
from .common import LEADER_EPOCH, check_leader_epoch, resolve_partition


@handles(23, 2, 4)
def handle(ctx: RequestContext, req: Any) -> Any:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            plog, err = resolve_partition(ctx, t.topic, p.partition)
            if err == ErrorCode.none:
                err = check_leader_epoch(getattr(p, "current_leader_epoch", -1),
                                         leader_epoch(ctx.image, t.topic, p.partition))
            if plog is not None and err == ErrorCode.none and 0 <= p.leader_epoch:
                # Requested epoch >= ours: the largest epoch <= requested is ours.
                entry.update(leader_epoch=LEADER_EPOCH, end_offset=plog.log_end_offset)
            entry["error_code"] = err
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return materialize(response_schema(23, ctx.version), {"throttle_time": 0, "topics": topics})
