"""Kafka wire primitives shared by the hand-written encoders and decoders
(Fetch, Produce and OffsetFetch responses, OffsetCommit requests, request headers)."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


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
