"""Record-level rules of the log cleaner: which records of a batch survive, and how a
batch that lost records is re-encoded (see :mod:`.cleaner` for the whole algorithm).
Pure functions over bytes; no IO."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import NamedTuple

from ..protocol.crc import crc32c

from hightide.protocol.records import (
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    InvalidRecords,
    _read_bytes,
    _read_varint,
    compress,
    decompress,
    iter_headers,
)

__all__ = ["filter_batch", "parse_records", "validate_compacted_batch", "Filtered"]

_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")
_COMPRESSION_MASK = 0x07


class _Rec(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    tombstone: bool
    start: int  # slice of the (decompressed) records section holding the whole record
    end: int


# ------------------------------------------------------------------ record level


def parse_records(h: BatchHeader, raw: bytes) -> tuple[bytes, list[_Rec]]:
    """The records section of batch ``raw`` (decompressed) and where each record is.
    Raises InvalidRecords (CORRUPT_MESSAGE) on malformed data."""
    body = raw[HEADER_SIZE:]
    if h.compression:
        body = decompress(h.compression, body)
    log_append = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    out: list[_Rec] = []
    pos = 0
    for _ in range(h.records_count):
        start = pos
        length, pos = _read_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise InvalidRecords(CORRUPT_MESSAGE, "truncated record")
        pos += 1  # record attributes
        ts_delta, pos = _read_varint(body, pos)
        off_delta, pos = _read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        vlen, pos = _read_varint(body, pos)
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(_Rec(h.base_offset + off_delta, ts, key, vlen < 0, start, end))
        pos = end
    return body, out


def _encode(h: BatchHeader, records: bytes, count: int, base_ts: int, max_ts: int, attributes: int) -> bytes:
    """A v2 batch with ``h``'s offsets, producer fields and leader epoch around ``records``
    (an uncompressed records section, compressed here with the codec in ``attributes``)."""
    codec = attributes & _COMPRESSION_MASK
    payload = compress(codec, records) if codec else records
    tail = _TAIL.pack(
        attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence, count
    ) + payload
    return _HEAD.pack(h.base_offset, len(tail) + 9, h.partition_leader_epoch, 2, crc32c(tail)) + tail


class Filtered(NamedTuple):
    data: bytes | None  # what to write (None = drop the batch)
    removed: int
    changed: bool
    tombstones: bool  # the written batch holds tombstones


def filter_batch(
    h: BatchHeader,
    raw: bytes,
    offset_map: Mapping[bytes, int],
    drop_tombstones: bool,
    producer_last: Mapping[int, int],
) -> Filtered:
    """Apply the retention rules of the module docstring to one batch."""
    if h.is_control or h.is_transactional:
        return Filtered(raw, 0, False, False)
    keep_empty = h.producer_id >= 0 and producer_last.get(h.producer_id) == h.last_offset
    if h.records_count == 0:  # an empty header kept by an earlier cleaning
        return Filtered(raw, 0, False, False) if keep_empty else Filtered(None, 0, True, False)
    body, recs = parse_records(h, raw)
    kept = [
        r
        for r in recs
        if r.key is not None
        and r.offset >= offset_map.get(r.key, -1)
        and not (r.tombstone and drop_tombstones)
    ]
    tombstones = any(r.tombstone for r in kept)
    removed = len(recs) - len(kept)
    if removed == 0:
        return Filtered(raw, 0, False, tombstones)
    if kept:
        if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            max_ts = h.max_timestamp
        else:
            max_ts = max(r.timestamp for r in kept)
        section = b"".join(body[r.start : r.end] for r in kept)
        return Filtered(_encode(h, section, len(kept), h.base_timestamp, max_ts, h.attributes), removed, True,
                         tombstones)
    if keep_empty:  # Kafka keeps an empty, uncompressed header with the batch's MaxTimestamp
        attrs = h.attributes & ~_COMPRESSION_MASK
        return Filtered(_encode(h, b"", 0, h.max_timestamp, h.max_timestamp, attrs), removed, True, False)
    return Filtered(None, removed, True, False)


def validate_compacted_batch(records: bytes | bytearray | memoryview) -> str | None:
    """Produce-path check for topics whose ``cleanup.policy`` contains ``compact``.

    ``records`` holds already validated batches (CRC checked). Returns None when every
    record of every non-control batch has a key, else the message to answer with
    INVALID_RECORD (87), as Kafka does. Decodes (decompresses) the records, so call it
    only for compacted topics. Raises InvalidRecords (CORRUPT_MESSAGE) when the records
    cannot be decoded.
    """
    buf = bytes(records)
    for h in iter_headers(buf):
        if h.is_control:
            continue
        _, recs = parse_records(h, buf[h.position : h.position + h.size])
        if any(r.key is None for r in recs):
            return "Compacted topic cannot accept message without key."
    return None
