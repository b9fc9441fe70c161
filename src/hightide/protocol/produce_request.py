"""Produce requests (API key 0) v3-v11, decoded by hand without copying the records.

The generic reader (:mod:`.tolerant`, kio's primitives) copies every partition's
``records`` into a new ``bytes``: for a 1 MiB request that is a 1 MiB allocation
(page faults included) and copy before the batch is even validated. Here ``records`` is
a **memoryview slice of the frame** (None for a null records field), so the broker
validates the batch and writes it to the segment straight from the receive buffer.

Lifetime contract: the views are valid only as long as the frame is (for a frame of
:class:`~.server_connection.ServerConnection`, until its next ``get_buffer``: the
synchronous part of the request's handler). A handler must not keep them, or anything
sliced from them, past its synchronous part; the Produce handler releases them when it
is done (a late use raises ``ValueError`` instead of reading reused bytes). The views
are writable when the frame is, so the log may patch a batch's offsets in place.

The decoded entities carry kio's field names and types (``timeout`` a ``timedelta``);
unknown tagged fields are collected in ``unknown[id(entity)]`` as the tolerant reader
does; every declared length is bounded by the bytes left before anything is allocated;
trailing bytes are ignored. Unit tests compare it with kio's schema walker field by
field, on valid and mutated frames of every version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

from .primitives import (
    Unknown,
    collect_tags,
    read_compact_array_len,
    read_compact_str,
    read_int32_array_len,
    read_legacy_str,
    read_uvarint,
)

PRODUCE_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 11
FIRST_FLEXIBLE = 9

_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(slots=True, eq=False)
class PartitionProduceData:
    """One partition's data: ``records`` a view of the frame, or None (null field)."""

    index: int
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(frozen=True, slots=True)
class ProduceRequestBody:
    """A decoded Produce request body, with kio's field names and types (lists where
    kio has tuples, as the OffsetCommit decoder)."""

    transactional_id: str | None
    acks: int
    timeout: timedelta
    topic_data: list[TopicProduceData]


def is_produce_decoded(version: int) -> bool:
    """Whether :func:`decode_produce_request` decodes Produce ``version``."""
    return MIN_VERSION <= version <= MAX_VERSION


def _view(buf: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    end = pos + n
    if end > len(buf):
        raise ValueError(f"records of {n} bytes run past the end of the frame")
    return buf[pos:end], end


def _partitions_legacy(buf: memoryview, pos: int) -> tuple[list[PartitionProduceData], int]:
    n, pos = read_int32_array_len(buf, pos, 8)
    parts: list[PartitionProduceData] = []
    for _ in range(n):
        index, size = _I32.unpack_from(buf, pos)[0], _I32.unpack_from(buf, pos + 4)[0]
        pos += 8
        records: memoryview | None = None
        if size >= 0:
            records, pos = _view(buf, pos, size)
        elif size != -1:
            raise ValueError(f"negative records length {size}")
        parts.append(PartitionProduceData(index, records))
    return parts, pos


def _partitions_flexible(buf: memoryview, pos: int,
                         unknown: Unknown | None) -> tuple[list[PartitionProduceData], int]:
    n, pos = read_compact_array_len(buf, pos, 6)
    parts: list[PartitionProduceData] = []
    for _ in range(n):
        index = _I32.unpack_from(buf, pos)[0]
        size, pos = read_uvarint(buf, pos + 4)
        records: memoryview | None = None
        if size:
            records, pos = _view(buf, pos, size - 1)
        p = PartitionProduceData(index, records)
        if buf[pos] == 0:  # the usual empty tag section
            pos += 1
        else:
            pos = collect_tags(buf, pos, p, unknown)
        parts.append(p)
    return parts, pos


def decode_produce_request(version: int, frame: bytes | bytearray | memoryview, pos: int,
                           unknown: Unknown | None = None) -> ProduceRequestBody:
    """Decode a Produce v3-v11 request body starting at ``pos`` (after the request
    header). ``records`` are views of ``frame`` (see the module docstring). Raises
    ValueError, IndexError, UnicodeDecodeError or struct.error on malformed input."""
    if not is_produce_decoded(version):
        raise ValueError(f"Produce v{version} is not decoded here")
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    flexible = version >= FIRST_FLEXIBLE
    if flexible:
        txn_id, pos = read_compact_str(buf, pos)
    else:
        txn_id, pos = read_legacy_str(buf, pos)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    if flexible:
        ntopics, pos = read_compact_array_len(buf, pos + 6, 3)
    else:
        ntopics, pos = read_int32_array_len(buf, pos + 6, 6)
    topics: list[TopicProduceData] = []
    for _ in range(ntopics):
        if flexible:
            name, pos = read_compact_str(buf, pos, False)
            parts, pos = _partitions_flexible(buf, pos, unknown)
            topic = TopicProduceData(name or "", parts)
            pos = collect_tags(buf, pos, topic, unknown)
        else:
            name, pos = read_legacy_str(buf, pos, False)
            parts, pos = _partitions_legacy(buf, pos)
            topic = TopicProduceData(name or "", parts)
        topics.append(topic)
    body = ProduceRequestBody(txn_id, acks, timedelta(milliseconds=timeout_ms), topics)
    if flexible:
        collect_tags(buf, pos, body, unknown)
    return body
