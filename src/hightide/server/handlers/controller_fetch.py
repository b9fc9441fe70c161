"""Fetch (1) on the controller listener: observers (brokers) follow ``__cluster_metadata-0``
the way Kafka's ``KafkaRaftClient`` serves its log to observers.

Contract for the broker side (node/metadata_follower.py):

* The request names topic ``__cluster_metadata`` (v12-) or topic id
  ``AAAAAAAAAAAAAAAAAAAAAQ`` (Kafka's METADATA_TOPIC_ID, v13+), partition 0, with
  ``ReplicaId`` (``ReplicaState.ReplicaId`` from v15) = the broker's node id and, from
  v15, ``ReplicaEpoch`` = its broker epoch. Anything else gets INVALID_REQUEST (top
  level); a ``ClusterId`` that is not ours INCONSISTENT_CLUSTER_ID.
* The answer holds the committed record batches from ``FetchOffset`` (whole batches, so
  the first may start below it), at most ``PartitionMaxBytes`` (at least one batch),
  never past the committed end; ``HighWatermark`` = the committed end (the offset the
  next record will get). ``CurrentLeader`` = (this node, leader epoch 0).
* Nothing to send and ``MaxWaitMs`` > 0: the Fetch waits until the metadata log commits
  a write (or the wait runs out, or the controller stops), then answers.
* ``FetchOffset`` below the log start offset (trimmed behind a snapshot): error NONE
  with ``SnapshotId`` = the latest snapshot, no records; the broker loads it with
  FetchSnapshot (59) and fetches on from its end offset.
* ``FetchOffset`` beyond the committed end, or a ``LastFetchedEpoch`` above ours (the
  broker's copy has records this controller does not): error NONE with
  ``DivergingEpoch`` = (leader epoch, committed end), no records. The broker truncates
  its copy to ``DivergingEpoch.EndOffset`` (or resyncs from 0) and fetches again.
* A Fetch at offset N counts as the broker acknowledging N - 1 (hightide's brokers apply
  a batch to their image before they send the next Fetch); it does not refresh the
  broker's session (heartbeats do).

With a controller quorum: a Fetch whose ReplicaId is another voter is Raft replication
(:mod:`.raft_rpcs`); a broker's Fetch is served by the active controller only — any
other voter answers NOT_LEADER_OR_FOLLOWER with ``CurrentLeader`` = the leader it knows
(-1 if none) and its epoch, and (v16+) the leader's controller endpoint in
``NodeEndpoints``. Leader epochs are the quorum's; DivergingEpoch comes from the
leader's epoch cache.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ...cluster.metadata_log import METADATA_TOPIC
from ...log.partition_log import OffsetOutOfRange
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from .fetch_snapshot import snapshot_for
from .raft_rpcs import is_voter_fetch, voter_fetch
from ..registry import service_handler

if TYPE_CHECKING:
    from ...protocol.views.fetch import FetchPartition, FetchRequest, FetchTopic
    from ...node.controller_service import ControllerService

#: Kafka's ``Uuid.METADATA_TOPIC_ID`` (Uuid(0, 1)).
METADATA_TOPIC_ID = uuid.UUID(int=1)
#: The long-poll key woken when the metadata log commits (``AppendWaiters``).
METADATA_KEY = (METADATA_TOPIC, 0)


def _names_metadata(req: FetchRequest, version: int) -> tuple[FetchTopic, FetchPartition] | None:
    """(topic, partition) of the request if it fetches exactly ``__cluster_metadata-0``."""
    if len(req.topics) != 1 or len(req.topics[0].partitions) != 1:
        return None
    t = req.topics[0]
    ok = opt(t, "topic_id", None) == METADATA_TOPIC_ID if version >= 13 else opt(t, "topic", None) == METADATA_TOPIC
    p = t.partitions[0]
    return (t, p) if ok and p.partition == 0 else None


def _replica(req: FetchRequest, version: int) -> tuple[int, int | None]:
    state = opt(req, "replica_state", None)  # v15+
    if version >= 15 and state is not None:
        return int(state.replica_id), int(state.replica_epoch)
    return int(opt(req, "replica_id", -1)), None


@service_handler(1, 4, 17)
async def fetch(service: ControllerService, ctx: RequestContext, req: FetchRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # Kafka: the metadata log is for brokers
        return _respond(service, ctx, None, None, error=ErrorCode.cluster_authorization_failed)
    found = _names_metadata(req, ctx.version)
    if found is None:
        return _respond(service, ctx, None, None, error=ErrorCode.invalid_request)
    cluster_id = opt(req, "cluster_id", None)
    if cluster_id is not None and cluster_id != ctx.identity.cluster_id:
        return _respond(service, ctx, found[0], None, error=ErrorCode.inconsistent_cluster_id)
    topic, part = found
    replica_id, replica_epoch = _replica(req, ctx.version)
    if is_voter_fetch(service, replica_id, opt(part, "replica_directory_id", None)):
        return await voter_fetch(service, ctx, req)
    if not service.is_active:
        return _respond(service, ctx, topic, _partition(service, error=ErrorCode.not_leader_or_follower))
    fetch_offset = int(part.fetch_offset)
    last_epoch = int(opt(part, "last_fetched_epoch", -1))
    if fetch_offset < 0:
        return _respond(service, ctx, topic, _partition(service, error=ErrorCode.invalid_request))
    end = service.committed_end()
    snapshot = snapshot_for(service, fetch_offset)
    if snapshot is not None:  # trimmed below the log start: load the snapshot first (Kafka's SnapshotId answer)
        partition = _partition(service)
        partition["snapshot_id"] = {"end_offset": snapshot.offset, "epoch": snapshot.epoch}
        return _respond(service, ctx, topic, partition)
    diverging = _diverging(service, fetch_offset, last_epoch, end)
    if diverging is not None:  # its copy has records ours does not: no acknowledgement
        return _respond(service, ctx, topic, _partition(service, diverging=diverging))
    service.observe_fetch(replica_id, fetch_offset, replica_epoch, ctx.now_ms)
    max_wait_s = req.max_wait.total_seconds()
    if fetch_offset == end and max_wait_s > 0 and not ctx.identity.stopping:
        deadline = ctx.clock.monotonic() + max_wait_s
        while service.committed_end() == fetch_offset and not ctx.identity.stopping:
            left = deadline - ctx.clock.monotonic()
            if left <= 0:
                break
            await ctx.waiters.wait([METADATA_KEY], left)
    return _respond(service, ctx, topic, _read(service, fetch_offset, int(part.partition_max_bytes)))


def _diverging(service: ControllerService, fetch_offset: int, last_epoch: int, end: int) -> tuple[int, int] | None:
    """DivergingEpoch (epoch, end offset) when the fetcher's copy is not a prefix of the
    committed log: it fetches past the committed end, or its last epoch ends before its
    fetch offset here (or is one this log never had); None when it is."""
    if fetch_offset > end:
        return service.leader_epoch, end
    raft = service.raft
    if raft is None:
        return (service.leader_epoch, end) if last_epoch > service.leader_epoch else None
    if fetch_offset == 0 or last_epoch < 0:
        return None
    found = raft.core.log.end_offset_for_epoch(last_epoch)
    if found.epoch != last_epoch or found.offset < fetch_offset:
        return found.epoch, min(found.offset, end)
    return None


def _read(service: ControllerService, offset: int, max_bytes: int) -> dict:
    end = service.committed_end()
    try:
        data = service.metadata_log.read(offset, max(max_bytes, 1), max_offset=end).data if offset < end else b""
    except OffsetOutOfRange:
        return _partition(service, error=ErrorCode.offset_out_of_range)
    return _partition(service, records=bytes(data), end=end)


def _partition(service: ControllerService, *, error: ErrorCode = ErrorCode.none, records: bytes = b"",
               diverging: tuple[int, int] | None = None, end: int | None = None) -> dict:
    end = service.committed_end() if end is None else end
    start = service.metadata_log.log_start_offset
    return {"partition_index": 0, "error_code": error, "high_watermark": end, "last_stable_offset": end,
            "log_start_offset": start, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": records,
            "diverging_epoch": {"epoch": diverging[0] if diverging else -1,
                                "end_offset": diverging[1] if diverging else -1},
            "current_leader": {"leader_id": service.leader_id, "leader_epoch": service.leader_epoch},
            "snapshot_id": {"end_offset": -1, "epoch": -1}}


def _respond(service: ControllerService, ctx: RequestContext, topic: FetchTopic | None, partition: dict | None, *,
             error: ErrorCode = ErrorCode.none) -> Any:
    responses = []
    if topic is not None and partition is not None:
        responses.append({"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [partition]})
    leader = service.leader_id
    if leader == service.node_id:
        host, port = ctx.identity.advertised
    else:
        host, port = service.voter_endpoints.get(leader, ("", -1))
    endpoints = [{"node_id": leader, "host": host, "port": port, "rack": None}] if leader >= 0 else []
    return materialize(response_schema(1, ctx.version), {
        "throttle_time": 0, "error_code": error, "session_id": 0, "responses": responses,
        "node_endpoints": endpoints})
