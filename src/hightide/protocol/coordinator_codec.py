"""The one bounded reader (and the writer helpers) of the coordinator records.

The codecs of ``__consumer_offsets``, ``__share_group_state`` and ``__transaction_state``
are generated from the layouts of Kafka's records (``tools/coordinator_records.json``,
``tools/gen_records.py``); the generated code reads through this module only. A reader
is a pair ``(buf, pos)``: each function takes the bytes and a position and returns the
value and the position after it.

Contract (the bytes are of unknown origin: a log written by any broker, or damaged):

* every length, count and varint is checked against the bytes that remain before
  anything is taken or allocated — a string or bytes field must fit, an array's count
  times its element's least wire size must fit (a declared count never sizes a list);
* an unsigned varint is at most 5 bytes (Kafka's ``readUnsignedVarint`` guard);
* fixed-width fields are read with ``struct.unpack_from``, whose ``struct.error`` on a
  short buffer the generated decoder turns into :class:`RecordFormatError`;
* every error is :class:`RecordFormatError` (never IndexError or UnicodeDecodeError);
* bytes after the fields a version knows (a newer writer's additions) are ignored, as
  Kafka's generated readers do.
"""

from __future__ import annotations

import struct

__all__ = [
    "RecordFormatError", "bytes_", "compact_bytes", "compact_count", "compact_nullable_bytes",
    "compact_nullable_string", "compact_string", "count", "nullable_bytes", "nullable_string",
    "skip_tags", "string", "tagged", "tags", "uvarint", "w_compact_bytes", "w_compact_nullable_bytes",
    "w_compact_nullable_string", "w_compact_string", "w_uvarint",
]


class RecordFormatError(ValueError):
    """A key or value that is not a valid coordinator record: truncated, a length or
    count beyond the bytes, a null where the schema forbids one, bad UTF-8, an unknown
    version, a tagged field of the wrong size. (Bytes after a record's known fields are
    not an error: they are ignored, as Kafka's readers do.)"""


# -- reading ---------------------------------------------------------------------------------------
def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes."""
    n = len(buf)
    result = shift = 0
    while True:
        if pos >= n:
            raise RecordFormatError("record truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise RecordFormatError("malformed unsigned varint (more than 5 bytes)")


def _take(buf: bytes, pos: int, n: int) -> bytes:
    if n < 0 or pos + n > len(buf):
        raise RecordFormatError(f"a length of {n} bytes at {pos}: beyond the record's {len(buf)} bytes")
    return buf[pos:pos + n]


def string(buf: bytes, pos: int, n: int) -> tuple[str, int]:
    """A non-nullable string of ``n`` bytes (``n`` as read before it; -1 is null: an error)."""
    if n < 0:
        raise RecordFormatError("null in a non-nullable string")
    try:
        return _take(buf, pos, n).decode(), pos + n
    except UnicodeDecodeError as exc:
        raise RecordFormatError(f"a string that is not UTF-8: {exc}") from None


def nullable_string(buf: bytes, pos: int, n: int) -> tuple[str | None, int]:
    """A string of ``n`` bytes; None for a negative ``n``."""
    return (None, pos) if n < 0 else string(buf, pos, n)


def compact_string(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = uvarint(buf, pos)
    return string(buf, pos, n - 1)


def compact_nullable_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    n, pos = uvarint(buf, pos)
    return nullable_string(buf, pos, n - 1)


def bytes_(buf: bytes, pos: int, n: int) -> tuple[bytes, int]:
    """Non-nullable bytes of length ``n``."""
    if n < 0:
        raise RecordFormatError("null in a non-nullable bytes field")
    return bytes(_take(buf, pos, n)), pos + n


def nullable_bytes(buf: bytes, pos: int, n: int) -> tuple[bytes | None, int]:
    return (None, pos) if n < 0 else bytes_(buf, pos, n)


def compact_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = uvarint(buf, pos)
    return bytes_(buf, pos, n - 1)


def compact_nullable_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = uvarint(buf, pos)
    return nullable_bytes(buf, pos, n - 1)


def count(buf: bytes, pos: int, n: int, least: int, nullable: bool = False) -> int:
    """An array count ``n`` (as read before ``pos``), checked: -1 only if ``nullable``
    (returned as is), and ``n`` elements of at least ``least`` bytes each must fit in the
    bytes after ``pos``."""
    if n < 0:
        if nullable and n == -1:
            return -1
        raise RecordFormatError(f"an array count of {n}")
    if n * least > len(buf) - pos:
        raise RecordFormatError(f"an array of {n} elements at {pos}: beyond the record's {len(buf)} bytes")
    return n


def compact_count(buf: bytes, pos: int, least: int, nullable: bool = False) -> tuple[int, int]:
    """A compact array's count (uvarint count + 1; 0 is null), checked as :func:`count`."""
    n, pos = uvarint(buf, pos)
    return count(buf, pos, n - 1, least, nullable), pos


def tags(buf: bytes, pos: int) -> tuple[dict[int, bytes], int]:
    """A tagged-field section: ``{tag: its bytes}``."""
    n, pos = uvarint(buf, pos)
    out: dict[int, bytes] = {}
    for _ in range(count(buf, pos, n, 2)):
        tag, pos = uvarint(buf, pos)
        size, pos = uvarint(buf, pos)
        out[tag] = bytes(_take(buf, pos, size))
        pos += size
    return out, pos


def skip_tags(buf: bytes, pos: int) -> int:
    """Past a tagged-field section whose fields are all unknown to the schema."""
    if pos < len(buf) and buf[pos] == 0:
        return pos + 1
    return tags(buf, pos)[1]


def tagged(fields: dict[int, bytes], tag: int, s: struct.Struct, default: int) -> int:
    """The fixed-width tagged field ``tag`` (``default`` when absent); its size must be ``s``'s."""
    raw = fields.get(tag)
    if raw is None:
        return default
    if len(raw) != s.size:
        raise RecordFormatError(f"tagged field {tag}: {len(raw)} bytes, expected {s.size}")
    return int(s.unpack(raw)[0])


# -- writing ---------------------------------------------------------------------------------------
def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL = [_uvarint(v) for v in range(256)]


def w_uvarint(v: int) -> bytes:
    return _SMALL[v] if 0 <= v < 256 else _uvarint(v)


def w_compact_string(s: str) -> bytes:
    data = s.encode()
    return w_uvarint(len(data) + 1) + data


def w_compact_nullable_string(s: str | None) -> bytes:
    return b"\x00" if s is None else w_compact_string(s)


def w_compact_bytes(b: bytes) -> bytes:
    return w_uvarint(len(b) + 1) + b


def w_compact_nullable_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else w_compact_bytes(b)
