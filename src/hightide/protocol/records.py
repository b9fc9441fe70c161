"""Record batch v2 (magic 2) codec.

Hot paths (produce validation, log append, recovery) only ever look at the 61-byte batch
header and check the CRC-32C of the batch; the records themselves stay opaque bytes.
Decoding individual records (:func:`decode_records`) and building batches
(:func:`build_batch`) are for the cold paths: ListOffsets by timestamp, internal topics
and tests.

Layout of a batch (all integers big-endian)::

    0  BaseOffset            int64
    8  BatchLength           int32   bytes after this field (= batch size - 12)
    12 PartitionLeaderEpoch  int32
    16 Magic                 int8    (= 2)
    17 CRC                   uint32  CRC-32C of bytes [21, end)
    21 Attributes            int16
    23 LastOffsetDelta       int32
    27 BaseTimestamp         int64
    35 MaxTimestamp          int64
    43 ProducerId            int64
    51 ProducerEpoch         int16
    53 BaseSequence          int32
    57 RecordsCount          int32
    61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import cramjam
from .crc import crc32c

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "CORRUPT_MESSAGE",
    "MESSAGE_TOO_LARGE",
    "RECORD_LIST_TOO_LARGE",
    "INVALID_RECORD",
    "UNSUPPORTED_COMPRESSION_TYPE",
    "BatchHeader",
    "Record",
    "InvalidRecords",
    "parse_header",
    "validate_batches",
    "scan_batches",
    "ScanResult",
    "iter_headers",
    "decode_records",
    "build_batch",
    "compress",
    "decompress",
    "batch_crc",
    "recompress_batch",
]

HEADER_SIZE = 61
#: BaseOffset + BatchLength: the bytes not counted by BatchLength.
LOG_OVERHEAD = 12
#: Smallest legal BatchLength (a batch with no records): 61 - 12.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

# Kafka error codes used here.
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
RECORD_LIST_TOO_LARGE = 18
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">qi")  # BaseOffset, BatchLength
_I32 = struct.Struct(">i")
HeaderFields = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]
"""The 13 fields of a batch header as ``_HEADER`` unpacks them (BatchHeader minus position)."""
_unpack_header: Callable[[Buffer, int], HeaderFields] = _HEADER.unpack_from  # struct only knows tuple[Any, ...]
_unpack_length = _LENGTH.unpack_from


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 record batch, plus where it was found.

    ``position`` is the byte offset of the batch inside the buffer (or file) it was
    parsed from. ``length`` is the BatchLength field (bytes after it).
    """

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def last_offset(self) -> int:
        """Offset of the last record of the batch (base_offset + last_offset_delta)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset that follows this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def size(self) -> int:
        """Total size of the batch in bytes (BatchLength + 12)."""
        return self.length + LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record (int32 wrap-around), -1 if no sequence."""
        if self.base_sequence < 0:
            return -1
        seq = self.base_sequence + self.last_offset_delta
        return seq - 0x80000000 if seq > 0x7FFFFFFF else seq


class Record(NamedTuple):
    """One decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class InvalidRecords(Exception):
    """The records in a produce request (or on disk) are not acceptable.

    ``error_code`` is the Kafka error code the broker answers for the partition.
    """

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


Buffer = bytes | bytearray | memoryview


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos`` without copying.

    Raises ``struct.error`` if fewer than 61 bytes are available; does not validate.
    """
    return BatchHeader(*_unpack_header(buf, pos), pos)


def batch_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of the batch at ``pos`` of total ``size`` bytes (Attributes to end)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def validate_batches(
    buf: Buffer,
    max_batch_bytes: int | None = None,
    *,
    client_origin: bool = True,
) -> list[BatchHeader]:
    """Validate the record bytes a producer sent for one partition.

    Returns the headers of the batches (with ``position`` relative to ``buf``). Raises
    :class:`InvalidRecords` with the error code Kafka answers:

    * CORRUPT_MESSAGE (2): truncated batch, BatchLength < 49, magic > 2 or < 0,
      CRC mismatch, trailing bytes that are not a whole batch (Kafka silently trims an
      incomplete trailing batch; we reject it, real clients never send one).
    * MESSAGE_TOO_LARGE (10): a batch larger than ``max_batch_bytes`` (the topic's
      ``max.message.bytes``; compared to the whole batch size like Kafka).
    * INVALID_RECORD (87): empty buffer; magic 0/1 (Produce v3+ requires magic 2);
      and, when ``client_origin`` (Kafka's AppendOrigin.CLIENT checks): more than one
      batch (Produce v3+ allows exactly one per partition), BaseOffset != 0,
      RecordsCount <= 0 or != LastOffsetDelta + 1, control batches, a producer id
      with a negative base sequence.

    With ``client_origin=False`` several batches and empty (count 0) batches are
    accepted (internal appends, replication). Record bodies are never parsed: the
    broker trusts MaxTimestamp from the header (Kafka recomputes it for compressed
    batches).
    """
    n = len(buf)
    if n == 0:
        raise InvalidRecords(INVALID_RECORD, "produce request must contain at least one record batch")
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < n:
        if n - pos < HEADER_SIZE:
            if n - pos >= LOG_OVERHEAD:
                length = _unpack_length(mv, pos)[1]
                if length < MIN_BATCH_LENGTH:
                    raise InvalidRecords(CORRUPT_MESSAGE, f"record batch length {length} at byte {pos} is too small")
            raise InvalidRecords(CORRUPT_MESSAGE, f"truncated record batch at byte {pos}")
        h = BatchHeader(*_unpack_header(mv, pos), pos)
        length = h.length
        if length < MIN_BATCH_LENGTH:
            raise InvalidRecords(CORRUPT_MESSAGE, f"record batch length {length} at byte {pos} is too small")
        magic = h.magic
        if magic != 2:
            if 0 <= magic < 2:
                raise InvalidRecords(INVALID_RECORD, f"record batches must have magic 2, got {magic}")
            raise InvalidRecords(CORRUPT_MESSAGE, f"invalid magic {magic} in record batch at byte {pos}")
        size = length + LOG_OVERHEAD
        end = pos + size
        if end > n:
            raise InvalidRecords(CORRUPT_MESSAGE, f"truncated record batch at byte {pos}: {size} bytes declared, {n - pos} present")
        if max_batch_bytes is not None and size > max_batch_bytes:
            raise InvalidRecords(
                MESSAGE_TOO_LARGE,
                f"record batch of {size} bytes exceeds the maximum of {max_batch_bytes} (max.message.bytes)",
            )
        if crc32c(mv[pos + ATTRIBUTES_OFFSET : end]) != h.crc:
            raise InvalidRecords(CORRUPT_MESSAGE, f"record batch at byte {pos} is corrupt (CRC mismatch)")
        count = h.records_count
        if count < 0:
            raise InvalidRecords(INVALID_RECORD, f"invalid record count {count}")
        if client_origin:
            if headers:
                raise InvalidRecords(INVALID_RECORD, "produce requests may contain exactly one record batch per partition")
            if h.base_offset != 0:
                raise InvalidRecords(INVALID_RECORD, f"base offset of a produced batch must be 0, got {h.base_offset}")
            if count <= 0:
                raise InvalidRecords(INVALID_RECORD, f"invalid record count {count} in produced batch")
            if h.last_offset_delta + 1 != count:
                raise InvalidRecords(
                    INVALID_RECORD,
                    f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} with {count} records",
                )
            if h.attributes & _CONTROL_BIT:
                raise InvalidRecords(INVALID_RECORD, "clients may not write control records")
            if h.producer_id >= 0 and h.base_sequence < 0:
                raise InvalidRecords(INVALID_RECORD, f"invalid sequence {h.base_sequence} for producer id {h.producer_id}")
        elif count > h.last_offset_delta + 1:
            # Compaction leaves fewer records than offsets; more records than offsets is corrupt.
            raise InvalidRecords(
                INVALID_RECORD, f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} with {count} records"
            )
        elif h.last_offset_delta < 0:
            raise InvalidRecords(INVALID_RECORD, f"negative lastOffsetDelta {h.last_offset_delta}")
        if h.attributes & _COMPRESSION_MASK > COMPRESSION_ZSTD:
            raise InvalidRecords(UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {h.attributes & 7}")
        headers.append(h)
        pos = end
    return headers


class ScanResult(NamedTuple):
    """Result of :func:`scan_batches`: the valid headers and where validity ends.

    ``valid_bytes`` is the length of the valid prefix (relative to the scan start
    position, i.e. ``end_position - start``); ``error`` describes why scanning
    stopped early, or is None when the whole range was valid.
    """

    headers: list[BatchHeader]
    valid_bytes: int
    error: str | None


def scan_batches(
    buf: Buffer,
    start: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
    base_offset_at_least: int | None = None,
    position_base: int = 0,
) -> ScanResult:
    """Walk the batches in ``buf[start:end]``, stopping cleanly at the first bad one.

    Used by recovery: a torn write or garbage tail ends the scan; the caller truncates
    to ``start + valid_bytes``. Checks completeness, BatchLength >= 49, magic 2, the
    CRC (unless ``check_crc`` is False), and that offsets increase (each batch's base
    offset >= the previous batch's next offset and >= ``base_offset_at_least``).
    Header positions are ``position_base + offset in buf``.
    """
    if end is None:
        end = len(buf)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    headers: list[BatchHeader] = []
    pos = start
    expect = base_offset_at_least
    while pos < end:
        if end - pos < HEADER_SIZE:
            return ScanResult(headers, pos - start, f"{end - pos} trailing bytes shorter than a batch header")
        h = BatchHeader(*_unpack_header(mv, pos), pos + position_base)
        if h.length < MIN_BATCH_LENGTH:
            return ScanResult(headers, pos - start, f"invalid batch length {h.length}")
        if h.magic != 2:
            return ScanResult(headers, pos - start, f"invalid magic {h.magic}")
        bend = pos + h.length + LOG_OVERHEAD
        if bend > end:
            return ScanResult(headers, pos - start, "truncated batch")
        if h.last_offset_delta < 0 or h.records_count < 0:
            return ScanResult(headers, pos - start, "invalid offset delta or record count")
        if expect is not None and h.base_offset < expect:
            return ScanResult(headers, pos - start, f"non-monotonic base offset {h.base_offset} < {expect}")
        if check_crc and crc32c(mv[pos + ATTRIBUTES_OFFSET : bend]) != h.crc:
            return ScanResult(headers, pos - start, "CRC mismatch")
        headers.append(h)
        expect = h.base_offset + h.last_offset_delta + 1
        pos = bend
    return ScanResult(headers, pos - start, None)


def iter_headers(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
    """Yield the headers of the complete batches in ``buf[start:end]`` (no CRC check).

    Stops silently at an incomplete or malformed batch.
    """
    if end is None:
        end = len(buf)
    pos = start
    while end - pos >= HEADER_SIZE:
        h = BatchHeader(*_unpack_header(buf, pos), pos)
        size = h.length + LOG_OVERHEAD
        if h.length < MIN_BATCH_LENGTH or pos + size > end:
            return
        yield h
        pos += size


# --------------------------------------------------------------------------------------
# Compression

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a batch's records section.

    Snappy accepts both xerial framing (Java clients, magic ``\\x82SNAPPY\\x00``) and
    raw snappy (some librdkafka builds); LZ4 is the LZ4 frame format.
    Raises :class:`InvalidRecords` (CORRUPT_MESSAGE) on malformed data.
    """
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == COMPRESSION_SNAPPY:
            raw = bytes(data)
            if raw[:8] == _XERIAL_MAGIC:
                out = bytearray()
                pos = 16
                while pos < len(raw):
                    (blen,) = _I32.unpack_from(raw, pos)
                    pos += 4
                    out += cramjam.snappy.decompress_raw(raw[pos : pos + blen])
                    pos += blen
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except InvalidRecords:
        raise
    except Exception as e:  # cramjam raises its own DecompressionError, struct errors...
        raise InvalidRecords(CORRUPT_MESSAGE, f"cannot decompress records (codec {codec}): {e}") from e
    raise InvalidRecords(UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a records section the way the Java client does (xerial snappy, LZ4 frame).
    ``level`` (gzip, lz4, zstd; None = the codec's Kafka default) is Kafka's
    ``compression.<codec>.level``; snappy has none."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data, level=6 if level in (None, -1) else level))
    if codec == COMPRESSION_SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK) or [0]:
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        # Kafka: the default level (9) uses lz4's fast compressor, any other the HC one.
        return bytes(cramjam.lz4.compress(data, level=0 if level in (None, 9) else level))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise ValueError(f"unknown compression codec {codec}")


def recompress_batch(batch: Buffer, codec: int, level: int | None = None) -> bytes:
    """One v2 batch with its records section recompressed to ``codec`` (Kafka's broker-side
    ``compression.type``): the records themselves are not parsed (their encoding does not
    depend on the codec), every header field but Length, CRC and the compression bits of
    Attributes is kept. Raises :class:`InvalidRecords` (CORRUPT_MESSAGE) when the records
    cannot be decompressed."""
    h = parse_header(batch, 0)
    view = memoryview(batch)
    body = view[HEADER_SIZE:h.size]
    raw = decompress(h.compression, body) if h.compression else bytes(body)
    packed = compress(codec, raw, level)
    out = bytearray(view[:HEADER_SIZE])
    out += packed
    struct.pack_into(">i", out, _LENGTH_AT, len(out) - LOG_OVERHEAD)
    struct.pack_into(">h", out, _ATTRIBUTES_AT, (h.attributes & ~_COMPRESSION_MASK) | codec)
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


_LENGTH_AT, _CRC_AT, _ATTRIBUTES_AT = 8, 17, 21  # byte offsets in the batch header


# --------------------------------------------------------------------------------------
# Varints (zigzag) — cold path only


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a zigzag varint/varlong at ``pos``; return (value, new position)."""
    shift = 0
    result = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise InvalidRecords(CORRUPT_MESSAGE, "truncated varint in record") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidRecords(CORRUPT_MESSAGE, "varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise InvalidRecords(CORRUPT_MESSAGE, "truncated record field")
    return buf[pos:end], end


def decode_records(batch: Buffer) -> list[Record]:
    """Decode all records of one batch (decompressing) with absolute offsets/timestamps.

    For LogAppendTime batches every record's timestamp is the batch's MaxTimestamp
    (as Kafka's clients report it). Raises :class:`InvalidRecords` on malformed data.
    Cold path only.
    """
    h = parse_header(batch, 0)
    size = h.length + LOG_OVERHEAD
    if h.length < MIN_BATCH_LENGTH or size > len(batch):
        raise InvalidRecords(CORRUPT_MESSAGE, "truncated record batch")
    body_view = memoryview(batch)[HEADER_SIZE:size]
    body = decompress(h.compression, body_view) if h.compression else bytes(body_view)
    log_append = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    records: list[Record] = []
    pos = 0
    for _ in range(h.records_count):
        length, pos = _read_varint(body, pos)
        rec_end = pos + length
        if length < 0 or rec_end > len(body):
            raise InvalidRecords(CORRUPT_MESSAGE, "truncated record")
        pos += 1  # attributes (unused)
        ts_delta, pos = _read_varint(body, pos)
        off_delta, pos = _read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        nh, pos = _read_varint(body, pos)
        hdrs: list[tuple[str, bytes | None]] = []
        for _ in range(nh):
            hk, pos = _read_bytes(body, pos)
            hv, pos = _read_bytes(body, pos)
            hdrs.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != rec_end:
            raise InvalidRecords(CORRUPT_MESSAGE, "record length does not match its contents")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        records.append(Record(h.base_offset + off_delta, ts, key, value, hdrs))
    return records


RecordInput = tuple[bytes | None, bytes | None, Sequence[tuple[str | bytes, bytes | None]], int]


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``records`` — (key, value, headers, timestamp) tuples — as one v2 batch.

    BaseTimestamp is the first record's timestamp (Kafka's convention), MaxTimestamp the
    maximum; an empty ``records`` produces a count-0 batch with timestamps -1.
    """
    body = bytearray()
    base_ts = records[0][3] if records else -1
    max_ts = max((r[3] for r in records), default=-1)
    for i, (key, value, headers, ts) in enumerate(records):
        rec = bytearray(b"\x00")
        _write_varint(rec, ts - base_ts)
        _write_varint(rec, i)
        if key is None:
            _write_varint(rec, -1)
        else:
            _write_varint(rec, len(key))
            rec += key
        if value is None:
            _write_varint(rec, -1)
        else:
            _write_varint(rec, len(value))
            rec += value
        _write_varint(rec, len(headers))
        for hk, hv in headers:
            hkb = hk.encode() if isinstance(hk, str) else hk
            _write_varint(rec, len(hkb))
            rec += hkb
            if hv is None:
                _write_varint(rec, -1)
            else:
                _write_varint(rec, len(hv))
                rec += hv
        _write_varint(body, len(rec))
        body += rec
    payload = compress(compression, bytes(body)) if compression else bytes(body)
    attributes = compression & _COMPRESSION_MASK
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    last_delta = len(records) - 1 if records else 0
    tail = bytearray(40 + len(payload))
    struct.pack_into(
        ">hiqqqhii",
        tail,
        0,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    tail[40:] = payload
    crc = crc32c(tail)
    head = struct.pack(">qiibI", base_offset, len(tail) + 9, partition_leader_epoch, 2, crc)
    return head + bytes(tail)
