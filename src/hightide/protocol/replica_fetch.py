"""The replica fetcher's Fetch (v17) by hand: its request packed, its answer walked.

A follower sends one Fetch per round trip to each leader, and on the acks=all path every
write waits for two of those rounds (the one that carries the records, the next one
that reports the follower's log end). Through kio, building the request (materialize,
then the schema writer) and decoding the answer cost ~160 µs of Python per round on this
machine, and the answer's records were copied once more by kio's bytes reader. Here
the request is packed with ``struct`` and the answer is walked into NamedTuples with
kio's field names (the fetcher reads either); each partition's records are a read-only
view of the frame, never copied (the follower's log appends them as they are; an answer
larger than the connection's receive chunk is itself not copied either, see
:mod:`.client_connection`).

Contract (unit tests compare both directions with kio on random values): the request
bytes equal kio's encoding of the same FetchRequest v17 (ReplicaState in tag 1, no
cluster id, no fetch session, no rack, no forgotten topics, no replica directory id);
the answer's fields equal kio's FetchResponse v17 for the fields named below (an
all-zero topic id is None, as kio reads it), a partition's ``diverging_epoch`` is None
when the tag is absent (kio: EpochEndOffset(-1, -1)), other tags (current leader,
snapshot id, node endpoints, unknown ones) are skipped. Every array length is bounded by
the bytes left before anything is allocated. Malformed input raises ValueError,
IndexError or struct.error (the connection answers CORRUPT_MESSAGE for it).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from .codec import EncodedBody
from .primitives import read_compact_array_len, read_tags, read_uvarint, skip_tags, uvarint

VERSION = 17

_BODY_HEAD = struct.Struct(">iiibii")  # max wait, min bytes, max bytes, isolation level, session id, session epoch
_PARTITION = struct.Struct(">iiqiqi")  # partition, current leader epoch, fetch offset, last fetched epoch,
#                                        log start offset, partition max bytes
_REPLICA_STATE = struct.Struct(">iq")  # replica id, replica epoch
_ANSWER_HEAD = struct.Struct(">ihi")  # throttle time, error code, session id
_PARTITION_HEAD = struct.Struct(">ihqqq")  # partition, error, high watermark, last stable offset, log start offset
_ABORTED = struct.Struct(">qq")
_I32 = struct.Struct(">i")
_EPOCH_END = struct.Struct(">iq")
_ZERO_UUID = bytes(16)
_MIN_TOPIC = 17  # topic id + an empty partitions array
_MIN_PARTITION = 4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1  # ... aborted (null), preferred replica, records (null), tags
_MIN_ABORTED = 17


class FetchPartitionRequest(NamedTuple):
    """One partition a follower fetches (FetchRequest v17's FetchPartition)."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


def encode_replica_fetch(replica_id: int, replica_epoch: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                         topics: list[tuple[uuid.UUID, list[FetchPartitionRequest]]]) -> EncodedBody:
    """A follower's FetchRequest v17 body (read uncommitted, no fetch session): what
    kio writes for the same entity (see the module doc)."""
    out = bytearray(_BODY_HEAD.pack(max_wait_ms, min_bytes, max_bytes, 0, 0, -1))
    out += uvarint(len(topics) + 1)
    for topic_id, partitions in topics:
        out += topic_id.bytes
        out += uvarint(len(partitions) + 1)
        for p in partitions:
            out += _PARTITION.pack(*p)
            out.append(0)  # the partition's tags (no replica directory id)
        out.append(0)  # the topic's tags
    out += b"\x01\x01"  # forgotten topics: empty; rack id: ""
    out += b"\x01\x01\x0d" + _REPLICA_STATE.pack(replica_id, replica_epoch) + b"\x00"  # tag 1: ReplicaState
    return EncodedBody(bytes(out), flexible=True)


class EpochEndOffset(NamedTuple):
    epoch: int
    end_offset: int


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


class FetchedPartition(NamedTuple):
    """FetchResponse v17's PartitionData (records: a read-only view of the frame, or
    None when null)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTransaction, ...] | None
    preferred_read_replica: int
    records: memoryview | None
    diverging_epoch: EpochEndOffset | None


class FetchedTopic(NamedTuple):
    topic_id: uuid.UUID | None
    partitions: list[FetchedPartition]


class FetchAnswer(NamedTuple):
    """FetchResponse v17 (throttle time in ms, not a timedelta)."""

    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchedTopic]


def decode_replica_fetch_response(frame: bytes | memoryview) -> FetchAnswer:
    """Decode a FetchResponse v17 frame (correlation id first, no size prefix; bytes or a
    read-only view, see the module doc)."""
    view = memoryview(frame).toreadonly()
    pos = skip_tags(frame, 4)  # correlation id, response header v1 tags
    throttle, error, session = _ANSWER_HEAD.unpack_from(frame, pos)
    pos += 10
    n_topics, pos = read_compact_array_len(frame, pos, _MIN_TOPIC)
    topics = []
    for _ in range(n_topics):
        raw = bytes(frame[pos:pos + 16])
        if len(raw) != 16:
            raise ValueError("topic id runs past the end of the frame")
        topic_id = None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)
        pos += 16
        n_parts, pos = read_compact_array_len(frame, pos, _MIN_PARTITION)
        parts = []
        for _ in range(n_parts):
            index, code, hw, lso, log_start = _PARTITION_HEAD.unpack_from(frame, pos)
            pos += 30
            n, pos = _compact_len(frame, pos)
            aborted: tuple[AbortedTransaction, ...] | None = None
            if n >= 0:
                if n * _MIN_ABORTED > len(frame) - pos:
                    raise ValueError(f"array of {n} aborted transactions exceeds the frame")
                found = []
                for _ in range(n):
                    found.append(AbortedTransaction(*_ABORTED.unpack_from(frame, pos)))
                    pos = skip_tags(frame, pos + 16)
                aborted = tuple(found)
            preferred = _I32.unpack_from(frame, pos)[0]
            pos += 4
            size, pos = _compact_len(frame, pos)
            records = None
            if size >= 0:
                end = pos + size
                if end > len(frame):
                    raise ValueError("records run past the end of the frame")
                records = view[pos:end]
                pos = end
            diverging = None
            if frame[pos] == 0:  # no tagged fields: the usual case
                pos += 1
            else:
                tags, pos = read_tags(frame, pos)
                if 0 in tags:
                    diverging = EpochEndOffset(*_EPOCH_END.unpack_from(tags[0]))
            parts.append(FetchedPartition(index, code, hw, lso, log_start, aborted, preferred, records, diverging))
        pos = skip_tags(frame, pos)
        topics.append(FetchedTopic(topic_id, parts))
    skip_tags(frame, pos)
    return FetchAnswer(throttle, error, session, topics)


def _compact_len(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact nullable length: (-1 for null, next position)."""
    n = buf[pos]
    if n < 0x80:
        return n - 1, pos + 1
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos
