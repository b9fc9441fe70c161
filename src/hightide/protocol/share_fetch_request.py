"""ShareFetch (api 78, v1-2) and ShareAcknowledge (api 79, v1-2) requests decoded by hand.

A share consumer sends one of these per round trip, each carrying the acknowledgements
of what the previous one acquired: AcknowledgementBatches of (FirstOffset, LastOffset,
AcknowledgeTypes). The generic reader (:mod:`.tolerant`, kio's schemas) spent ~7 % of
the broker's loop under a share-group load building kio entities for them; this struct
walker builds plain tuples and lists with kio's field names instead, so the handlers
read either.

Same contract as the generic reader (unit tests compare the two on random requests and
on random corruptions of valid ones): the same field values (``max_wait`` a timedelta,
an all-zero topic id None, strict UTF-8, booleans 0/1 only), unknown tagged fields
collected in ``unknown[id(owner)]`` for the request, topic, partition or batch that
carries them, trailing bytes ignored. Every declared array length is bounded by the bytes
left before anything is allocated, so a hostile length costs nothing. Malformed input
raises ValueError, IndexError, UnicodeDecodeError or struct.error (the codec answers
them as a protocol error).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import NamedTuple

from .primitives import Unknown, collect_tags, read_compact_array_len, read_compact_str

_I32 = struct.Struct(">i")
_FETCH_LIMITS = struct.Struct(">iiiiii")  # epoch, max wait, min bytes, max bytes, max records, batch size
_RANGE = struct.Struct(">qq")  # first offset, last offset
_UUID_CACHE_SIZE = 4096
_uuids: dict[bytes, uuid.UUID | None] = {}


class AcknowledgementBatch(NamedTuple):
    """One AcknowledgementBatch (inclusive offsets; one type, or one per offset)."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


class AcknowledgePartition(NamedTuple):
    """A partition of a ShareFetch (FetchPartition) or ShareAcknowledge request."""

    partition_index: int
    acknowledgement_batches: list[AcknowledgementBatch]


class AcknowledgeTopic(NamedTuple):
    """A topic of a ShareFetch (FetchTopic) or ShareAcknowledge request."""

    topic_id: uuid.UUID | None
    partitions: list[AcknowledgePartition]


class ForgottenTopic(NamedTuple):
    topic_id: uuid.UUID | None
    partitions: tuple[int, ...]


class ShareFetchRequestBody(NamedTuple):
    """A decoded ShareFetch v1/v2 request body (kio's field names; v1 has the v2 fields
    at their defaults). Tuples, not frozen dataclasses: one is built per request."""

    group_id: str | None
    member_id: str | None
    share_session_epoch: int
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int
    share_acquire_mode: int
    is_renew_ack: bool
    topics: list[AcknowledgeTopic]
    forgotten_topics_data: list[ForgottenTopic]


class ShareAcknowledgeRequestBody(NamedTuple):
    """A decoded ShareAcknowledge v1/v2 request body (kio's field names)."""

    group_id: str | None
    member_id: str | None
    share_session_epoch: int
    is_renew_ack: bool
    topics: list[AcknowledgeTopic]


# -- fields ------------------------------------------------------------------------------------
def _topic_id(buf: bytes, pos: int) -> uuid.UUID | None:
    raw = buf[pos:pos + 16]
    if len(raw) != 16:
        raise ValueError("topic id truncated")
    tid = _uuids.get(raw, False)
    if tid is False:
        tid = None if raw == bytes(16) else uuid.UUID(bytes=raw)
        if len(_uuids) >= _UUID_CACHE_SIZE:
            _uuids.clear()
        _uuids[raw] = tid
    return tid  # type: ignore[return-value]


def _bool(buf: bytes, pos: int) -> bool:
    b = buf[pos]
    if b > 1:
        raise ValueError("invalid boolean value")
    return b == 1


# -- the acknowledgement walker ------------------------------------------------------------------
def _ack_batches(buf: bytes, pos: int, unknown: Unknown | None) -> tuple[list[AcknowledgementBatch], int]:
    n, pos = read_compact_array_len(buf, pos, 18)
    out = []
    rng = _RANGE.unpack_from
    for _ in range(n):
        first, last = rng(buf, pos)
        pos += 16
        nt, pos = read_compact_array_len(buf, pos, 1)
        if nt == 1:
            t = buf[pos]
            types: tuple[int, ...] = (t - 256 if t > 127 else t,)
        else:
            types = struct.unpack_from(f">{nt}b", buf, pos)
        pos += nt
        b = AcknowledgementBatch(first, last, types)
        if buf[pos]:
            pos = collect_tags(buf, pos, b, unknown)
        else:
            pos += 1
        out.append(b)
    return out, pos


def _topics(buf: bytes, pos: int, unknown: Unknown | None) -> tuple[list[AcknowledgeTopic], int]:
    n, pos = read_compact_array_len(buf, pos, 18)
    topics = []
    for _ in range(n):
        tid = _topic_id(buf, pos)
        np_, pos = read_compact_array_len(buf, pos + 16, 6)
        parts = []
        for _ in range(np_):
            index = _I32.unpack_from(buf, pos)[0]
            batches, pos = _ack_batches(buf, pos + 4, unknown)
            p = AcknowledgePartition(index, batches)
            if buf[pos]:
                pos = collect_tags(buf, pos, p, unknown)
            else:
                pos += 1
            parts.append(p)
        t = AcknowledgeTopic(tid, parts)
        pos = collect_tags(buf, pos, t, unknown)
        topics.append(t)
    return topics, pos


def _forgotten(buf: bytes, pos: int, unknown: Unknown | None) -> tuple[list[ForgottenTopic], int]:
    n, pos = read_compact_array_len(buf, pos, 18)
    out = []
    for _ in range(n):
        tid = _topic_id(buf, pos)
        np_, pos = read_compact_array_len(buf, pos + 16, 4)
        f = ForgottenTopic(tid, struct.unpack_from(f">{np_}i", buf, pos))
        pos = collect_tags(buf, pos + 4 * np_, f, unknown)
        out.append(f)
    return out, pos


def _frame_bytes(frame: bytes | memoryview) -> bytes:
    # one copy of the (small) frame: slicing and decoding bytes is cheaper than a view's
    return frame if isinstance(frame, bytes) else bytes(frame)


# -- entry points ----------------------------------------------------------------------------
def decode_share_fetch_request(version: int, frame: bytes | memoryview, pos: int,
                               unknown: Unknown | None = None) -> ShareFetchRequestBody:
    """Decode a ShareFetch v1 or v2 request body starting at ``pos`` (after the request
    header). Raises ValueError, IndexError, UnicodeDecodeError or struct.error on
    malformed input (see the module doc)."""
    if version not in (1, 2):
        raise ValueError(f"ShareFetch v{version} is not decoded here")
    buf = _frame_bytes(frame)
    group_id, pos = read_compact_str(buf, pos)
    member_id, pos = read_compact_str(buf, pos)
    epoch, wait_ms, min_bytes, max_bytes, max_records, batch_size = _FETCH_LIMITS.unpack_from(buf, pos)
    pos += _FETCH_LIMITS.size
    mode, renew = 0, False
    if version >= 2:
        mode = buf[pos]
        mode = mode - 256 if mode > 127 else mode
        renew = _bool(buf, pos + 1)
        pos += 2
    topics, pos = _topics(buf, pos, unknown)
    forgotten, pos = _forgotten(buf, pos, unknown)
    body = ShareFetchRequestBody(group_id, member_id, epoch, datetime.timedelta(milliseconds=wait_ms), min_bytes,
                                 max_bytes, max_records, batch_size, mode, renew, topics, forgotten)
    collect_tags(buf, pos, body, unknown)
    return body


def decode_share_acknowledge_request(version: int, frame: bytes | memoryview, pos: int,
                                     unknown: Unknown | None = None) -> ShareAcknowledgeRequestBody:
    """Decode a ShareAcknowledge v1 or v2 request body starting at ``pos``. Raises as
    :func:`decode_share_fetch_request`."""
    if version not in (1, 2):
        raise ValueError(f"ShareAcknowledge v{version} is not decoded here")
    buf = _frame_bytes(frame)
    group_id, pos = read_compact_str(buf, pos)
    member_id, pos = read_compact_str(buf, pos)
    epoch = _I32.unpack_from(buf, pos)[0]
    pos += 4
    renew = False
    if version >= 2:
        renew = _bool(buf, pos)
        pos += 1
    topics, pos = _topics(buf, pos, unknown)
    body = ShareAcknowledgeRequestBody(group_id, member_id, epoch, renew, topics)
    collect_tags(buf, pos, body, unknown)
    return body
