"""FetchSnapshot (59) on the controller listener: a broker (or a Raft follower) whose
metadata Fetch was answered with a ``SnapshotId`` downloads that snapshot file from the
controller in chunks, as Kafka's ``KafkaRaftClient.handleFetchSnapshotRequest`` serves it.

Contract (Kafka's rules, in order):

* CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level; Kafka's
  ControllerApis); a ``ClusterId`` that is not ours: INCONSISTENT_CLUSTER_ID (top level);
  not exactly one topic with one partition: INVALID_REQUEST (top level);
  a partition other than ``__cluster_metadata-0``: UNKNOWN_TOPIC_OR_PARTITION.
* ``CurrentLeaderEpoch`` below the leader epoch: FENCED_LEADER_EPOCH; above it:
  UNKNOWN_LEADER_EPOCH (with ``CurrentLeader`` so the caller can catch up); a voter
  that does not lead: NOT_LEADER_OR_FOLLOWER.
* No snapshot file with that id (it was replaced by a newer one: fetch the log again and
  get the new id): SNAPSHOT_NOT_FOUND; ``Position`` < 0 or ≥ the file size:
  POSITION_OUT_OF_RANGE.
* Otherwise ``UnalignedRecords`` = at most ``MaxBytes`` bytes of the file from
  ``Position`` (a chunk need not end on a batch boundary), ``Size`` = the file size,
  ``Position`` and ``SnapshotId`` echoed, ``CurrentLeader`` = this controller and epoch.
  The file is read off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ...cluster.metadata_log import METADATA_TOPIC
from ...cluster.raft.messages import OffsetAndEpoch
from ...cluster.snapshot import SnapshotStore
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ...node.controller_service import LEADER_EPOCH
from ..registry import service_handler

if TYPE_CHECKING:
    from ...protocol.views.fetch_snapshot import FetchSnapshotRequest
    from ...node.controller_service import ControllerService


def snapshot_store(service: ControllerService) -> SnapshotStore:
    """The snapshot files next to the controller's metadata log."""
    plog = service.metadata_log
    return SnapshotStore(plog.path, plog.storage)


@service_handler(59, 0, 1)
async def fetch_snapshot(service: ControllerService, ctx: RequestContext, req: FetchSnapshotRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _respond(service, ctx, error=ErrorCode.cluster_authorization_failed)
    cluster_id = req.cluster_id
    if cluster_id is not None and cluster_id != ctx.identity.cluster_id:
        return _respond(service, ctx, error=ErrorCode.inconsistent_cluster_id)
    if len(req.topics) != 1 or len(req.topics[0].partitions) != 1:
        return _respond(service, ctx, error=ErrorCode.invalid_request)
    topic, part = req.topics[0], req.topics[0].partitions[0]
    sid = OffsetAndEpoch(int(part.snapshot_id.end_offset), int(part.snapshot_id.epoch))
    answer = {"name": topic.name, "index": int(part.partition), "sid": sid, "position": int(part.position)}
    if topic.name != METADATA_TOPIC or part.partition != 0:
        return _respond(service, ctx, answer, ErrorCode.unknown_topic_or_partition)
    epoch, leader_epoch = int(part.current_leader_epoch), _leader(service)[1]
    if epoch != leader_epoch:
        code = ErrorCode.fenced_leader_epoch if epoch < leader_epoch else ErrorCode.unknown_leader_epoch
        return _respond(service, ctx, answer, code)
    if not getattr(service, "is_active", True):  # a voter that does not lead (a controller quorum)
        return _respond(service, ctx, answer, ErrorCode.not_leader_or_follower)
    store = snapshot_store(service)
    try:
        size = await asyncio.to_thread(store.size, sid)
    except FileNotFoundError:
        return _respond(service, ctx, answer, ErrorCode.snapshot_not_found)
    position = int(part.position)
    if position < 0 or position >= size:
        return _respond(service, ctx, answer, ErrorCode.position_out_of_range, size=size)
    try:
        chunk = await asyncio.to_thread(store.read, sid, position, max(int(req.max_bytes), 1))
    except FileNotFoundError:  # deleted (a newer snapshot) between the two reads
        return _respond(service, ctx, answer, ErrorCode.snapshot_not_found)
    return _respond(service, ctx, answer, ErrorCode.none, size=size, records=chunk)


def _leader(service: ControllerService) -> tuple[int, int]:
    """(leader id, leader epoch): the quorum's when the service runs Raft, else this
    controller and the single voter's epoch."""
    return int(getattr(service, "leader_id", service.node_id)), int(getattr(service, "leader_epoch", LEADER_EPOCH))


def snapshot_for(service: ControllerService, fetch_offset: int) -> OffsetAndEpoch | None:
    """The snapshot an observer's metadata Fetch at ``fetch_offset`` must load first: the
    latest one when the offset is below the log start offset (the records it needs were
    trimmed), else None."""
    if fetch_offset >= service.metadata_log.log_start_offset:
        return None
    return snapshot_store(service).latest()


def _respond(service: ControllerService, ctx: RequestContext, answer: dict | None = None,
             partition_error: ErrorCode = ErrorCode.none, *, error: ErrorCode = ErrorCode.none, size: int = -1,
             records: bytes = b"") -> Any:
    topics = []
    if answer is not None:
        sid: OffsetAndEpoch = answer["sid"]
        topics.append({"name": answer["name"], "partitions": [{
            "index": answer["index"], "error_code": partition_error,
            "snapshot_id": {"end_offset": sid.offset, "epoch": sid.epoch},
            "current_leader": dict(zip(("leader_id", "leader_epoch"), _leader(service))),
            "size": size, "position": answer["position"], "unaligned_records": records}]})
    host, port = ctx.identity.advertised
    return materialize(response_schema(59, ctx.version), {
        "throttle_time": 0, "error_code": error, "topics": topics,
        "node_endpoints": [{"node_id": service.node_id, "host": host, "port": port, "rack": None}]})


__all__ = ["fetch_snapshot", "snapshot_for", "snapshot_store"]
