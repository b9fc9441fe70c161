"""A hand-written OffsetFetch response encoder (versions 1-9) carrying hightide's
extension: per partition, on flexible versions (v6+), tagged fields

* 10000 HighWatermark (int64), 10001 LogStartOffset (int64), 10002 LastStableOffset (int64),

so lag = HighWatermark - committed costs one round trip (seed 000). Clients that do not
know the tags skip them. Without extension values the bytes equal kio's encoder's (a
unit test checks every version). See docs/protocol-extensions.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

TAG_HIGH_WATERMARK = 10000
TAG_LOG_START_OFFSET = 10001
TAG_LAST_STABLE_OFFSET = 10002

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class PartitionOffset:
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0
    high_watermark: int | None = None  # extension values; None = not sent
    log_start_offset: int | None = None
    last_stable_offset: int | None = None


@dataclass(slots=True)
class GroupOffsets:
    group_id: str
    error_code: int = 0
    topics: list[tuple[str, list[PartitionOffset]]] = field(default_factory=list)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _str(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else _I16.pack(-1)
    b = s.encode()
    return (_uvarint(len(b) + 1) if flexible else _I16.pack(len(b))) + b


def _len(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _partition(out: bytearray, p: PartitionOffset, version: int, flexible: bool) -> None:
    out += _I32.pack(p.partition) + _I64.pack(p.offset)
    if version >= 5:
        out += _I32.pack(p.leader_epoch)
    out += _str(p.metadata, flexible) + _I16.pack(p.error_code)
    if flexible:
        tags = [(t, v) for t, v in ((TAG_HIGH_WATERMARK, p.high_watermark),
                                    (TAG_LOG_START_OFFSET, p.log_start_offset),
                                    (TAG_LAST_STABLE_OFFSET, p.last_stable_offset)) if v is not None]
        out += _uvarint(len(tags))
        for tag, v in tags:
            out += _uvarint(tag) + _uvarint(8) + _I64.pack(v)


def _topics(out: bytearray, topics: list[tuple[str, list[PartitionOffset]]], version: int, flexible: bool) -> None:
    out += _len(len(topics), flexible)
    for name, parts in topics:
        out += _str(name, flexible) + _len(len(parts), flexible)
        for p in parts:
            _partition(out, p, version, flexible)
        if flexible:
            out += b"\x00"


def encode_offset_fetch_response(version: int, correlation_id: int, groups: list[GroupOffsets],
                                 throttle_ms: int = 0) -> bytes:
    """A complete response frame (size prefix included). Versions < 8 carry exactly one
    group, whose error code becomes the top-level error code (v2+)."""
    flexible = version >= 6
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\x00"
    if version >= 3:
        out += _I32.pack(throttle_ms)
    if version >= 8:
        out += _len(len(groups), True)
        for g in groups:
            out += _str(g.group_id, True)
            _topics(out, g.topics, version, True)
            out += _I16.pack(g.error_code) + b"\x00"
    else:
        (g,) = groups
        _topics(out, g.topics, version, flexible)
        if version >= 2:
            out += _I16.pack(g.error_code)
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
