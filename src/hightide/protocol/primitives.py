"""Kafka wire primitives shared by the hand-written encoders and decoders
(Fetch, Produce and OffsetFetch responses; Produce, ShareFetch, ShareAcknowledge and
OffsetCommit requests; request headers).

The readers take ``buf`` (bytes or a memoryview of the frame) and a position and return
``(value, next position)``. They read only inside ``buf``: a length that runs past its
end raises ValueError (a truncated fixed-size field raises IndexError or struct.error),
and an array length is bounded by the bytes left before the caller allocates anything,
so a hostile length costs nothing. Varints of one byte (nearly all lengths and counts)
are read inline, without a call to :func:`read_uvarint`."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Unknown = dict[int, dict[int, bytes]]
"""Unknown tagged fields by ``id()`` of the entity that carries them: ``{tag: raw bytes}``
(the shape of :func:`hightide.protocol.tolerant.read_tolerant`'s ``unknown_tags``)."""


def uvarint(n: int) -> bytes:
    """Unsigned varint (compact lengths, tag numbers)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s: str | None, flexible: bool) -> bytes:
    """A (nullable) string: compact on flexible versions, int16-prefixed otherwise."""
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    b = s.encode()
    return (uvarint(len(b) + 1) if flexible else _I16.pack(len(b))) + b


def array_len(n: int, flexible: bool) -> bytes:
    """An array length (-1 = null): compact on flexible versions, int32 otherwise."""
    return uvarint(n + 1) if flexible else _I32.pack(n)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, next position). Raises ValueError on a truncated or over-long varint."""
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError("malformed unsigned varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def skip_tags(buf: bytes | memoryview, pos: int) -> int:
    """Skip a tagged-field section; return the next position. Raises ValueError when it
    runs past the end of ``buf``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged fields run past the end of the frame")
    return pos


def int64_tag_section(tag: int, value: int | None) -> bytes:
    """A tagged-field section holding one int64 field ``tag`` (empty when ``value`` is
    None): how hightide's extension tags travel on responses it encodes by hand."""
    if value is None:
        return b"\x00"
    return b"\x01" + uvarint(tag) + uvarint(8) + struct.pack(">q", value)


def read_int64_tag(buf: bytes | memoryview, pos: int, tag: int, name: str) -> tuple[int | None, int]:
    """Read a tagged-field section, returning (the int64 field ``tag`` or None, next
    position); other tags are skipped. Raises ValueError when a field runs past the end
    of ``buf`` or ``tag`` is not 8 bytes (``name`` says which field)."""
    value: int | None = None
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        t, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise ValueError(f"tagged field {t} runs past the end of the frame")
        if t == tag:
            if size != 8:
                raise ValueError(f"{name} is {size} bytes, expected 8")
            value = struct.unpack_from(">q", buf, pos)[0]
        pos += size
    return value, pos


def read_compact_str(buf: bytes | memoryview, pos: int, nullable: bool = True) -> tuple[str | None, int]:
    """A compact (flexible-version) string: ``(str or None for null, next position)``.
    Raises ValueError for a null when not ``nullable`` and for a string that runs past
    the end of ``buf``, UnicodeDecodeError for invalid UTF-8, IndexError at the end."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        if not nullable:
            raise ValueError("null in a non-nullable string")
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise ValueError("string runs past the end of the frame")
    return str(buf[pos:end], "utf-8"), end


def read_legacy_str(buf: bytes | memoryview, pos: int, nullable: bool = True) -> tuple[str | None, int]:
    """An int16-prefixed string (-1 = null): ``(str or None, next position)``. Raises
    ValueError for a length below -1, for a null when not ``nullable`` and for a string
    that runs past the end of ``buf``; UnicodeDecodeError for invalid UTF-8;
    struct.error when the length itself is truncated."""
    n = _I16.unpack_from(buf, pos)[0]
    pos += 2
    if n < 0:
        if n < -1:
            raise ValueError(f"negative string length {n}")
        if not nullable:
            raise ValueError("null in a non-nullable string")
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ValueError("string runs past the end of the frame")
    return str(buf[pos:end], "utf-8"), end


def _array_bound(n: int, pos: int, left: int, min_entry: int) -> tuple[int, int]:
    if n < 0:
        raise ValueError("null in a non-nullable array")
    if n * min_entry > left:
        raise ValueError(f"array of {n} elements exceeds the frame ({left} bytes left)")
    return n, pos


def read_compact_array_len(buf: bytes | memoryview, pos: int, min_entry: int) -> tuple[int, int]:
    """A non-null compact array's length: ``(element count, next position)``. Raises
    ValueError for a null array and when ``count * min_entry`` (``min_entry``: the
    smallest encoded element, >= 1) exceeds the bytes left, so a hostile length is
    refused before anything is allocated; IndexError at the end of ``buf``."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if 0 < n and (n - 1) * min_entry <= len(buf) - pos:  # the usual case, in one test
        return n - 1, pos
    return _array_bound(n - 1, pos, len(buf) - pos, min_entry)


def read_int32_array_len(buf: bytes | memoryview, pos: int, min_entry: int) -> tuple[int, int]:
    """A non-null int32-prefixed (legacy) array's length, bounded as
    :func:`read_compact_array_len`: ``(element count, next position)``. Raises ValueError
    for a negative (null) length or one that exceeds the bytes left; struct.error when
    the length is truncated."""
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if 0 <= n and n * min_entry <= len(buf) - pos:
        return n, pos
    return _array_bound(n, pos, len(buf) - pos, min_entry)


def read_tags(buf: bytes | memoryview, pos: int) -> tuple[dict[int, bytes], int]:
    """A tagged-field section: ``({tag: raw bytes (a copy)}, next position)``. Raises
    ValueError when a field (or the section) runs past the end of ``buf``."""
    count, pos = read_uvarint(buf, pos)
    found: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise ValueError(f"tagged field {tag} of {size} bytes runs past the end of the frame")
        found[tag] = bytes(buf[pos:pos + size])
        pos += size
    return found, pos


def collect_tags(buf: bytes | memoryview, pos: int, owner: object, unknown: Unknown | None) -> int:
    """A tagged-field section whose tags are all unknown to the schema, stored in
    ``unknown[id(owner)]`` when there are any (as the tolerant reader does; nothing is
    stored when ``unknown`` is None); returns the next position. The usual empty section
    (one zero byte) costs one test. Raises as :func:`read_tags`, IndexError at the end."""
    if buf[pos] == 0:
        return pos + 1
    found, pos = read_tags(buf, pos)
    if unknown is not None and found:
        unknown[id(owner)] = found
    return pos
