"""Convert the Raft core's messages to and from kio's KRaft messages (the shell's side).

The core's messages are flat (one ``__cluster_metadata-0`` partition) and carry Kafka's
field names; here they are wrapped into, and read back from, kio's topic/partition
nesting: Vote v2 (52), BeginQuorumEpoch v1 (53), EndQuorumEpoch v1 (54), Fetch v17 (1,
topic id ``Uuid.METADATA_TOPIC_ID``) and FetchSnapshot v1 (59). A Fetch carries the
fetcher's ReplicaDirectoryId (KIP-853: how the leader knows an observer's replica key);
the other directory ids and endpoints are left at Kafka's defaults (the shell adds the
leader's NodeEndpoints to a Fetch answer).

Log entries travel as record batches: every :class:`Entry` payload is one v2 batch. On
the way out :func:`~.batches.encode_entries` (re-exported here, kio-free in
:mod:`.batches` with :func:`~.batches.leader_change_batch`) writes each batch's BaseOffset
and PartitionLeaderEpoch; on the way in :func:`decode_entries` reads epoch, record count
and the control bit back from the batch headers without touching the records.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.begin_quorum_epoch.v1 import request as bqe_req
from kio.schema.begin_quorum_epoch.v1 import response as bqe_resp
from kio.schema.end_quorum_epoch.v1 import request as eqe_req
from kio.schema.end_quorum_epoch.v1 import response as eqe_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.fetch_snapshot.v1 import request as fs_req
from kio.schema.fetch_snapshot.v1 import response as fs_resp
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v2 import request as vote_req
from kio.schema.vote.v2 import response as vote_resp
from kio.static.primitive import Records, i32, i32Timedelta, i64

from ...protocol.records import HEADER_SIZE, LOG_OVERHEAD, decode_records, iter_headers
from ...protocol.tolerant import read_tolerant
from . import messages as m
from .batches import CONTROL_KEY, LEADER_CHANGE, encode_entries, leader_change_batch, uuid_bytes, uuid_text

__all__ = ["METADATA_TOPIC", "METADATA_TOPIC_ID", "to_kio", "from_kio", "encode_entries",
           "decode_entries", "leader_change_batch", "read_leader_change", "LEADER_CHANGE"]

METADATA_TOPIC = TopicName("__cluster_metadata")
#: Kafka's ``Uuid.METADATA_TOPIC_ID``.
METADATA_TOPIC_ID = uuid.UUID(int=1)
_CONTROL_BIT = 0x20


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


# --- record batches --------------------------------------------------------------------

def decode_entries(records: bytes | None) -> tuple[m.Entry, ...]:
    """Split a Fetch response's records into entries (epoch = PartitionLeaderEpoch, count
    = LastOffsetDelta + 1, control = the control bit); a torn tail batch is dropped, as
    Kafka's fetcher does with a partial batch at the end of a response."""
    if not records:
        return ()
    out = []
    for h in iter_headers(records):
        size = h.length + LOG_OVERHEAD
        if size < HEADER_SIZE:
            break
        out.append(m.Entry(h.partition_leader_epoch, bytes(records[h.position:h.position + size]),
                           h.last_offset_delta + 1, bool(h.attributes & _CONTROL_BIT)))
    return tuple(out)


# --- the LeaderChange control batch ---------------------------------------------------

def read_leader_change(batch: bytes) -> LeaderChangeMessage | None:
    """The LeaderChangeMessage of a control batch; None if it holds no such record."""
    for rec in decode_records(batch):
        if rec.key is not None and len(rec.key) >= 4 and rec.value is not None \
                and CONTROL_KEY.unpack_from(rec.key)[1] == LEADER_CHANGE:
            msg, _ = read_tolerant(LeaderChangeMessage, memoryview(rec.value), 0)
            return msg
    return None


# --- to kio ----------------------------------------------------------------------------

def to_kio(msg: m.Message, *, cluster_id: str | None = None, dest: int = -1,
           records_offset: int = 0) -> Any:
    """The kio message for ``msg`` sent to node ``dest``. ``records_offset`` is the base
    offset of a FetchResponse's records (the request's fetch offset)."""
    if isinstance(msg, m.VoteRequest):
        return vote_req.VoteRequest(cluster_id=cluster_id, voter_id=BrokerId(dest), topics=(
            vote_req.TopicData(topic_name=METADATA_TOPIC, partitions=(vote_req.PartitionData(
                partition_index=i32(0), replica_epoch=i32(msg.replica_epoch),
                replica_id=BrokerId(msg.replica_id), replica_directory_id=None,
                voter_directory_id=None, last_offset_epoch=i32(msg.last_offset_epoch),
                last_offset=i64(msg.last_offset), pre_vote=msg.pre_vote),)),))
    if isinstance(msg, m.VoteResponse):
        return vote_resp.VoteResponse(error_code=ErrorCode.none, topics=(vote_resp.TopicData(
            topic_name=METADATA_TOPIC, partitions=(vote_resp.PartitionData(
                partition_index=i32(0), error_code=ErrorCode(msg.error_code),
                leader_id=BrokerId(msg.leader_id), leader_epoch=i32(msg.leader_epoch),
                vote_granted=msg.vote_granted),)),))
    if isinstance(msg, m.BeginQuorumEpochRequest):
        return bqe_req.BeginQuorumEpochRequest(
            cluster_id=cluster_id, voter_id=BrokerId(dest), leader_endpoints=(),
            topics=(bqe_req.TopicData(topic_name=METADATA_TOPIC, partitions=(
                bqe_req.PartitionData(partition_index=i32(0), voter_directory_id=None,
                                      leader_id=BrokerId(msg.leader_id),
                                      leader_epoch=i32(msg.leader_epoch)),)),))
    if isinstance(msg, m.BeginQuorumEpochResponse):
        return bqe_resp.BeginQuorumEpochResponse(error_code=ErrorCode.none, topics=(
            bqe_resp.TopicData(topic_name=METADATA_TOPIC, partitions=(bqe_resp.PartitionData(
                partition_index=i32(0), error_code=ErrorCode(msg.error_code),
                leader_id=BrokerId(msg.leader_id), leader_epoch=i32(msg.leader_epoch)),)),))
    if isinstance(msg, m.EndQuorumEpochRequest):
        return eqe_req.EndQuorumEpochRequest(
            cluster_id=cluster_id, leader_endpoints=(),
            topics=(eqe_req.TopicData(topic_name=METADATA_TOPIC, partitions=(
                eqe_req.PartitionData(
                    partition_index=i32(0), leader_id=BrokerId(msg.leader_id),
                    leader_epoch=i32(msg.leader_epoch),
                    preferred_candidates=tuple(
                        eqe_req.ReplicaInfo(candidate_id=BrokerId(c), candidate_directory_id=None)
                        for c in msg.preferred_successors)),)),))
    if isinstance(msg, m.EndQuorumEpochResponse):
        return eqe_resp.EndQuorumEpochResponse(error_code=ErrorCode.none, topics=(
            eqe_resp.TopicData(topic_name=METADATA_TOPIC, partitions=(eqe_resp.PartitionData(
                partition_index=i32(0), error_code=ErrorCode(msg.error_code),
                leader_id=BrokerId(msg.leader_id), leader_epoch=i32(msg.leader_epoch)),)),))
    if isinstance(msg, m.FetchRequest):
        return _fetch_request(msg, cluster_id)
    if isinstance(msg, m.FetchResponse):
        return _fetch_response(msg, records_offset)
    if isinstance(msg, m.FetchSnapshotRequest):
        return fs_req.FetchSnapshotRequest(
            cluster_id=cluster_id, replica_id=BrokerId(msg.replica_id), max_bytes=i32(msg.max_bytes),
            topics=(fs_req.TopicSnapshot(name=METADATA_TOPIC, partitions=(fs_req.PartitionSnapshot(
                partition=i32(0), current_leader_epoch=i32(msg.current_leader_epoch),
                snapshot_id=fs_req.SnapshotId(end_offset=i64(msg.snapshot_id.offset),
                                              epoch=i32(msg.snapshot_id.epoch)),
                position=i64(msg.position), replica_directory_id=None),)),))
    return fs_resp.FetchSnapshotResponse(
        throttle_time=_ms(0), error_code=ErrorCode.none,
        topics=(fs_resp.TopicSnapshot(name=METADATA_TOPIC, partitions=(fs_resp.PartitionSnapshot(
            index=i32(0), error_code=ErrorCode(msg.error_code),
            snapshot_id=fs_resp.SnapshotId(end_offset=i64(msg.snapshot_id.offset),
                                           epoch=i32(msg.snapshot_id.epoch)),
            current_leader=fs_resp.LeaderIdAndEpoch(leader_id=BrokerId(msg.leader_id),
                                                    leader_epoch=i32(msg.leader_epoch)),
            size=i64(msg.size), position=i64(msg.position),
            unaligned_records=Records(msg.unaligned_records)),)),))


def _fetch_request(msg: m.FetchRequest, cluster_id: str | None) -> fetch_req.FetchRequest:
    return fetch_req.FetchRequest(
        cluster_id=cluster_id,
        replica_state=fetch_req.ReplicaState(replica_id=BrokerId(msg.replica_id)),
        max_wait=_ms(msg.max_wait_ms), min_bytes=i32(0),
        topics=(fetch_req.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=(
            fetch_req.FetchPartition(
                partition=i32(0), current_leader_epoch=i32(msg.current_leader_epoch),
                fetch_offset=i64(msg.fetch_offset), last_fetched_epoch=i32(msg.last_fetched_epoch),
                log_start_offset=i64(msg.log_start_offset), partition_max_bytes=i32(1 << 20),
                replica_directory_id=uuid.UUID(bytes=uuid_bytes(msg.replica_directory_id))
                if msg.replica_directory_id else None),)),),
        forgotten_topics_data=())


def _fetch_response(msg: m.FetchResponse, records_offset: int) -> fetch_resp.FetchResponse:
    div = msg.diverging_epoch
    snap = msg.snapshot_id
    partition = fetch_resp.PartitionData(
        partition_index=i32(0), error_code=ErrorCode(msg.error_code),
        high_watermark=i64(msg.high_watermark), log_start_offset=i64(msg.log_start_offset),
        diverging_epoch=fetch_resp.EpochEndOffset(
            epoch=i32(div.epoch if div else -1), end_offset=i64(div.offset if div else -1)),
        current_leader=fetch_resp.LeaderIdAndEpoch(leader_id=BrokerId(msg.leader_id),
                                                   leader_epoch=i32(msg.leader_epoch)),
        snapshot_id=fetch_resp.SnapshotId(end_offset=i64(snap.offset if snap else -1),
                                          epoch=i32(snap.epoch if snap else -1)),
        aborted_transactions=None, preferred_read_replica=BrokerId(-1),
        records=Records(encode_entries(records_offset, msg.records)) if msg.records else None)
    return fetch_resp.FetchResponse(
        throttle_time=_ms(0), error_code=ErrorCode.none,
        responses=(fetch_resp.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID,
                                                     partitions=(partition,)),))


# --- from kio --------------------------------------------------------------------------

def _one(topics: Any, field: str = "partitions") -> Any:
    """The only partition of the only topic (raises ValueError otherwise)."""
    if len(topics) != 1 or len(getattr(topics[0], field)) != 1:
        raise ValueError("a KRaft request names exactly one partition of __cluster_metadata")
    return getattr(topics[0], field)[0]


def from_kio(obj: Any) -> m.Message:
    """The core's message for a decoded kio KRaft message. Raises ValueError for one that
    does not name exactly one partition, or of another kind."""
    if isinstance(obj, vote_req.VoteRequest):
        p = _one(obj.topics)
        return m.VoteRequest(p.replica_id, p.replica_epoch, p.last_offset_epoch, p.last_offset,
                             p.pre_vote)
    if isinstance(obj, vote_resp.VoteResponse):
        p = _one(obj.topics)
        return m.VoteResponse(_error(obj, p), p.leader_id, p.leader_epoch, p.vote_granted)
    if isinstance(obj, bqe_req.BeginQuorumEpochRequest):
        p = _one(obj.topics)
        return m.BeginQuorumEpochRequest(p.leader_id, p.leader_epoch)
    if isinstance(obj, bqe_resp.BeginQuorumEpochResponse):
        p = _one(obj.topics)
        return m.BeginQuorumEpochResponse(_error(obj, p), p.leader_id, p.leader_epoch)
    if isinstance(obj, eqe_req.EndQuorumEpochRequest):
        p = _one(obj.topics)
        return m.EndQuorumEpochRequest(p.leader_id, p.leader_epoch,
                                       tuple(c.candidate_id for c in p.preferred_candidates))
    if isinstance(obj, eqe_resp.EndQuorumEpochResponse):
        p = _one(obj.topics)
        return m.EndQuorumEpochResponse(_error(obj, p), p.leader_id, p.leader_epoch)
    if isinstance(obj, fetch_req.FetchRequest):
        p = _one(obj.topics)
        directory = p.replica_directory_id
        return m.FetchRequest(obj.replica_state.replica_id, p.current_leader_epoch, p.fetch_offset,
                              p.last_fetched_epoch, p.log_start_offset,
                              int(obj.max_wait.total_seconds() * 1000),
                              uuid_text(directory.bytes) if directory is not None else "")
    if isinstance(obj, fetch_resp.FetchResponse):
        p = _one(obj.responses)
        div = p.diverging_epoch
        snap = p.snapshot_id
        return m.FetchResponse(
            _error(obj, p), p.current_leader.leader_id, p.current_leader.leader_epoch,
            p.high_watermark, p.log_start_offset, decode_entries(p.records),
            m.OffsetAndEpoch(div.end_offset, div.epoch) if div.epoch >= 0 else None,
            m.OffsetAndEpoch(snap.end_offset, snap.epoch) if snap.end_offset >= 0 else None)
    if isinstance(obj, fs_req.FetchSnapshotRequest):
        p = _one(obj.topics)
        return m.FetchSnapshotRequest(obj.replica_id, p.current_leader_epoch,
                                      m.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                      p.position, obj.max_bytes)
    if isinstance(obj, fs_resp.FetchSnapshotResponse):
        p = _one(obj.topics)
        return m.FetchSnapshotResponse(
            _error(obj, p), p.current_leader.leader_id, p.current_leader.leader_epoch,
            m.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch), p.size, p.position,
            bytes(p.unaligned_records))
    raise ValueError(f"not a KRaft message: {type(obj).__name__}")


def _error(top: Any, partition: Any) -> int:
    """A top-level error wins over the partition's (Kafka's response handling)."""
    return int(top.error_code) if top.error_code != ErrorCode.none else int(partition.error_code)
