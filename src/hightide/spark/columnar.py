"""Record batches (Kafka's v2 format) to Arrow columns, and rows back to record batches.

The read path of the Spark source runs here, once per Fetch response. Batch headers are
read with :mod:`hightide.protocol.records`; the records are then decoded column-wise:

1. the bodies of all data batches in the response are joined into one buffer (compressed
   ones decompressed first) and per-batch values (base offset, base and max timestamp,
   timestamp type) are repeated per record with numpy;
2. one small Python loop walks the record-length varints to find where each record
   starts — the only per-record Python work, a few bytecodes per record;
3. everything else is vectorised over all records at once: the zigzag varints
   (timestamp delta, offset delta, key length, value length, header count) are decoded
   byte column by byte column, and keys and values are gathered into Arrow binary
   arrays (offsets + one data buffer) with a single fancy-index each.

Headers are decoded per record, and only for records that have any (and only when
``includeHeaders`` is set). Control batches are skipped. Offsets outside the requested
``[start, end)`` range are dropped, so a batch that straddles a range boundary is cut
exactly. Raises :class:`hightide.protocol.records.InvalidRecords` (CORRUPT_MESSAGE) on a
malformed batch.

The sink's encoder (Arrow columns to record batches) is :mod:`.encode`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..protocol.aborted import AbortedFilter
from ..protocol.records import (
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    InvalidRecords,
    decompress,
    parse_header,
)

__all__ = ["ARROW_SCHEMA", "ARROW_SCHEMA_WITH_HEADERS", "Decoded", "decode_to_arrow", "scan_batches_for_records"]

_HEADER_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                       pa.field("value", pa.binary())])))
_BASE_FIELDS = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
                pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
                pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
ARROW_SCHEMA = pa.schema(_BASE_FIELDS)
"""The Arrow form of the source's schema (what Spark expects from ``read``)."""
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, pa.field("headers", _HEADER_TYPE)])


@dataclass(slots=True)
class Decoded:
    """The data records of one Fetch response that fall in the requested range.

    ``next_offset`` is the offset after the last complete batch seen (data or control),
    where the next Fetch continues; it equals the request's offset when the response
    held no complete batch.
    """

    batch: pa.RecordBatch | None
    next_offset: int
    rows: int


def _corrupt(msg: str) -> InvalidRecords:
    return InvalidRecords(CORRUPT_MESSAGE, msg)


def _varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zigzag varint at each of ``pos`` (int64 positions into ``arr``).
    Returns (values as int64, positions after each varint)."""
    if pos.size == 0:
        return np.zeros(0, np.int64), pos
    b = arr[pos]
    val = (b & 0x7F).astype(np.uint64)
    after = pos + 1
    idx = np.flatnonzero(b & 0x80)
    shift = 7
    while idx.size:
        if shift > 63:
            raise _corrupt("varint too long")
        b = arr[after[idx]]
        val[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[idx] += 1
        idx = idx[(b & 0x80) != 0]
        shift += 7
    signed = (val >> np.uint64(1)).astype(np.int64) ^ -(val & np.uint64(1)).astype(np.int64)
    return signed, after


def _record_starts(body: bytes, counts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
    """Positions (after the length varint) where each record starts, walking the length
    varints of ``counts[i]`` records in each batch body that ends at ``ends[i]``."""
    starts: list[int] = []
    append = starts.append
    pos = 0
    try:
        for count, end in zip(counts, ends):
            for _ in range(count):
                b = body[pos]
                if b < 0x80:
                    pos += 1
                else:
                    b2 = body[pos + 1]
                    if b2 < 0x80:
                        b = (b & 0x7F) | (b2 << 7)
                        pos += 2
                    else:
                        b, pos = _slow_uvarint(body, pos)
                append(pos)
                pos += (b >> 1) ^ -(b & 1)
            if pos != end:
                raise _corrupt("record lengths do not add up to the batch length")
    except IndexError:
        raise _corrupt("truncated record") from None
    return np.array(starts, np.int64)


def _slow_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _corrupt("varint too long")


def _binary(arr: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """An Arrow binary array of ``arr[starts[i]:starts[i]+lens[i]]``; a
    negative length is a null."""
    n = len(starts)
    valid = lens >= 0
    sizes = np.where(valid, lens, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total * 4 >= len(arr):
        # Large slices (values): they are disjoint and in order, so mark their bytes with
        # a running sum of +1 at each start and -1 at each end and take the marked bytes.
        edges = np.zeros(len(arr) + 1, np.int8)
        edges[starts[sizes > 0]] = 1
        edges[(starts + sizes)[sizes > 0]] -= 1
        data = arr[np.cumsum(edges[:-1], dtype=np.int8).view(np.bool_)]
    elif total:
        # Small slices (keys): gather by index, start of slice + position inside it.
        idx = np.repeat(starts - offsets[:-1], sizes)
        idx += np.arange(total, dtype=np.int64)
        data = arr[idx]
    else:
        data = np.zeros(0, np.uint8)
    nulls = n - int(np.count_nonzero(valid))
    validity = None if nulls == 0 else pa.array(valid, pa.bool_()).buffers()[1]
    if total >= 2**31 - 1:  # more than int32 offsets can address
        return pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                     nulls)
    return pa.Array.from_buffers(pa.binary(), n,
                                 [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], nulls)


def _repeat_string(s: str, n: int) -> pa.Array:
    raw = s.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)], 0)


def _headers(body: bytes, pos: np.ndarray, counts: np.ndarray) -> pa.Array:
    """The headers column: per record a list of (key, value) structs."""
    keys: list[str] = []
    values: list[bytes | None] = []
    offsets = np.zeros(len(pos) + 1, np.int32)
    total = 0
    for i in np.flatnonzero(counts):
        p = int(pos[i])
        for _ in range(int(counts[i])):
            kl, p = _zigzag(body, p)
            k = body[p:p + kl]
            p += kl
            vl, p = _zigzag(body, p)
            if vl < 0:
                values.append(None)
            else:
                values.append(body[p:p + vl])
                p += vl
            keys.append(k.decode("utf-8", "replace"))
        total += int(counts[i])
        offsets[i + 1] = int(counts[i])
    np.cumsum(offsets, out=offsets)
    struct = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                        fields=list(_HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), struct, type=_HEADER_TYPE)


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _slow_uvarint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


def decode_to_arrow(records: bytes | memoryview, topic: str, partition: int, start: int, end: int,
                    include_headers: bool = False, aborted: Iterable[tuple[int, int]] = ()) -> Decoded:
    """Decode the record batches of one Fetch response for ``topic``/``partition``,
    keeping offsets in ``[start, end)``. See the module docstring. ``aborted``: the
    aborted transactions of a read_committed Fetch answer; their data batches are
    skipped as Kafka's consumer skips them (:class:`~hightide.protocol.aborted.AbortedFilter`)."""
    skip = AbortedFilter(aborted)
    buf = memoryview(records)
    n = len(buf)
    pos = 0
    next_offset = start
    bodies: list[bytes] = []
    counts: list[int] = []
    ends: list[int] = []
    base_offsets: list[int] = []
    base_ts: list[int] = []
    max_ts: list[int] = []
    log_append: list[bool] = []
    body_end = 0
    while n - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        size = h.length + LOG_OVERHEAD
        if h.length < MIN_BATCH_LENGTH:
            raise _corrupt(f"record batch length {h.length} is too small")
        if pos + size > n:
            break  # a partial batch at the end of the response
        if h.magic != 2:
            raise _corrupt(f"record batch magic {h.magic} is not supported")
        if h.base_offset >= end:
            break
        hidden = skip.aborted(h)  # every batch feeds the filter (control batches end aborted runs)
        if h.next_offset > start and not h.is_control and h.records_count > 0 and not hidden:
            raw = buf[pos + HEADER_SIZE:pos + size]
            body = decompress(h.compression, raw) if h.compression else bytes(raw)
            bodies.append(body)
            body_end += len(body)
            counts.append(h.records_count)
            ends.append(body_end)
            base_offsets.append(h.base_offset)
            base_ts.append(h.base_timestamp)
            max_ts.append(h.max_timestamp)
            log_append.append(h.timestamp_type == 1)
        next_offset = max(next_offset, h.next_offset)
        pos += size
    if not bodies:
        return Decoded(None, next_offset, 0)
    joined = bodies[0] if len(bodies) == 1 else b"".join(bodies)
    starts = _record_starts(joined, counts, ends)
    arr = np.frombuffer(joined, np.uint8)
    cnt = np.asarray(counts, np.int64)
    try:
        ts_delta, p = _varints(arr, starts + 1)  # + 1: the record's attributes byte
        off_delta, p = _varints(arr, p)
        key_len, p = _varints(arr, p)
        key_start = p
        val_len, p = _varints(arr, p + np.maximum(key_len, 0))
        val_start = p
        hdr_count, p = _varints(arr, p + np.maximum(val_len, 0))
    except IndexError:
        raise _corrupt("truncated record") from None
    offsets = np.repeat(np.asarray(base_offsets, np.int64), cnt) + off_delta
    stamps = np.where(np.repeat(np.asarray(log_append, bool), cnt), np.repeat(np.asarray(max_ts, np.int64), cnt),
                      np.repeat(np.asarray(base_ts, np.int64), cnt) + ts_delta)
    ts_type = np.repeat(np.asarray(log_append, np.int32), cnt)
    keep = (offsets >= start) & (offsets < end)
    if not keep.all():
        sel = np.flatnonzero(keep)
        offsets, stamps, ts_type = offsets[sel], stamps[sel], ts_type[sel]
        key_start, key_len, val_start, val_len = key_start[sel], key_len[sel], val_start[sel], val_len[sel]
        p, hdr_count = p[sel], hdr_count[sel]
    rows = len(offsets)
    if rows == 0:
        return Decoded(None, next_offset, 0)
    cols = [_binary(arr, key_start, key_len), _binary(arr, val_start, val_len), _repeat_string(topic, rows),
            pa.array(np.full(rows, partition, np.int32)), pa.array(offsets),
            pa.array(stamps * 1000, pa.timestamp("us", tz="UTC")), pa.array(ts_type)]
    schema = ARROW_SCHEMA
    if include_headers:
        if hdr_count.any():
            cols.append(_headers(joined, p, hdr_count))  # p: just past each header count
        else:
            cols.append(pa.ListArray.from_arrays(pa.array(np.zeros(rows + 1, np.int32)),
                                                 pa.array([], _HEADER_TYPE.value_type), type=_HEADER_TYPE))
        schema = ARROW_SCHEMA_WITH_HEADERS
    return Decoded(pa.RecordBatch.from_arrays(cols, schema=schema), next_offset, rows)


Headers = list[tuple[str, bytes | None]]


def scan_batches_for_records(records: bytes, start: int, end: int) -> tuple[list[tuple[int, Headers]], int]:
    """(offset, headers) of every data record in ``[start, end)`` of a Fetch response,
    and the next offset to fetch. Used by the sink's replay check (cold path)."""
    d = decode_to_arrow(records, "", 0, start, end, include_headers=True)
    if d.batch is None:
        return [], d.next_offset
    offs = d.batch.column("offset").to_pylist()
    hdrs = d.batch.column("headers").to_pylist()
    return [(o, [(h["key"], h["value"]) for h in hs]) for o, hs in zip(offs, hdrs)], d.next_offset
