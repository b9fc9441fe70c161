"""A hand-written OffsetFetch response encoder and decoder (versions 1-9) carrying
hightide's extension: per partition, on flexible versions (v6+), tagged fields

* 10000 HighWatermark (int64), 10001 LogStartOffset (int64), 10002 LastStableOffset (int64),

so lag = HighWatermark - committed costs one round trip (seed 000). They are sent only
when the request asks: its top-level tagged field 10000 IncludeLogOffsets (a boolean,
:data:`INCLUDE_LOG_OFFSETS`); Kafka sends no tag there, and librdkafka before 2.2 cannot
skip them. Without extension values the bytes equal kio's encoder's (a
unit test checks every version). The decoder is the client's: a struct-based walk that
returns plain tuples, about 7x faster than the generic tolerant reader on large
responses (a lag scrape decodes 50,000 partitions). See docs/protocol-extensions.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .primitives import array_len, read_compact_str, read_uvarint, skip_tags, string, uvarint

TAG_HIGH_WATERMARK = 10000
TAG_LOG_START_OFFSET = 10001
TAG_LAST_STABLE_OFFSET = 10002
TAG_INCLUDE_LOG_OFFSETS = 10000
"""The request's top-level tag (v6+) asking for the three partition tags: one byte, 1."""
INCLUDE_LOG_OFFSETS: dict[int, bytes] = {TAG_INCLUDE_LOG_OFFSETS: b"\x01"}
"""The request tags of an OffsetFetch that asks for them (``encode_request(..., tags=)``)."""


def asks_log_offsets(request_tags: dict[int, bytes] | None) -> bool:
    """Whether an OffsetFetch request's top-level unknown tags ask for the partition
    tags (IncludeLogOffsets: a one-byte boolean, true when not zero)."""
    raw = request_tags.get(TAG_INCLUDE_LOG_OFFSETS) if request_tags else None
    return raw is not None and len(raw) == 1 and raw != b"\x00"

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


PartitionTuple = tuple[int, int, int, "str | None", int, "int | None", "int | None", "int | None"]
"""A partition entry as a plain tuple, in :class:`PartitionOffset`'s field order:
(partition, committed offset, leader epoch, metadata, error code, high watermark, log
start offset, last stable offset; the last three None when not sent); what the decoder
returns and the encoder also takes."""


PartitionEntry = PartitionOffset | PartitionTuple | bytes
"""A partition entry of :class:`GroupOffsets`: an object, a :data:`PartitionTuple`, or
the entry already encoded for the response's version (:func:`extended_entry`)."""


@dataclass(slots=True)
class GroupOffsets:
    group_id: str
    error_code: int = 0
    topics: list[tuple[str, list[PartitionEntry]]] = field(default_factory=list)


# A partition entry in one struct (v6+): empty metadata, the three extension tags in order, 8 bytes each.
_PART_EXT = struct.Struct(">iqiBhB3sq3sq3sq")
_EXT_KEYS = (uvarint(TAG_HIGH_WATERMARK) + b"\x08", uvarint(TAG_LOG_START_OFFSET) + b"\x08",
             uvarint(TAG_LAST_STABLE_OFFSET) + b"\x08")
_EXT_PACK = _PART_EXT.pack
_K1, _K2, _K3 = _EXT_KEYS


def extended_entry(partition: int, offset: int, leader_epoch: int, error_code: int, high_watermark: int,
                   log_start_offset: int, last_stable_offset: int) -> bytes:
    """A flexible (v6+) partition entry with empty metadata and the three extension
    tags, encoded: the same bytes the encoder writes for the equal
    :data:`PartitionTuple` ``(partition, offset, epoch, "", error_code, hw, lso, lst)``.
    A handler may put it in :attr:`GroupOffsets.topics` instead of the tuple (v6+
    responses only)."""
    return _EXT_PACK(partition, offset, leader_epoch, 1, error_code, 3, _K1, high_watermark, _K2,
                     log_start_offset, _K3, last_stable_offset)






def _partition(out: bytearray, p: PartitionOffset | PartitionTuple, version: int, flexible: bool) -> None:
    if isinstance(p, PartitionOffset):
        p = (p.partition, p.offset, p.leader_epoch, p.metadata, p.error_code, p.high_watermark,
             p.log_start_offset, p.last_stable_offset)
    partition, offset, epoch, metadata, error_code, hw, lso, lst = p
    if flexible and metadata == "" and hw is not None and lso is not None and lst is not None:
        # the common case, in one pack: same bytes as the general path below
        out += _PART_EXT.pack(partition, offset, epoch, 1, error_code, 3,
                              _EXT_KEYS[0], hw, _EXT_KEYS[1], lso, _EXT_KEYS[2], lst)
        return
    out += _I32.pack(partition) + _I64.pack(offset)
    if version >= 5:
        out += _I32.pack(epoch)
    out += string(metadata, flexible) + _I16.pack(error_code)
    if flexible:
        tags = [(t, v) for t, v in ((TAG_HIGH_WATERMARK, hw), (TAG_LOG_START_OFFSET, lso),
                                    (TAG_LAST_STABLE_OFFSET, lst)) if v is not None]
        out += uvarint(len(tags))
        for tag, v in tags:
            out += uvarint(tag) + uvarint(8) + _I64.pack(v)


def _topics(out: bytearray, topics: list[tuple[str, list[PartitionEntry]]], version: int,
            flexible: bool) -> None:
    out += array_len(len(topics), flexible)
    for name, parts in topics:
        out += string(name, flexible) + array_len(len(parts), flexible)
        for p in parts:
            if isinstance(p, bytes):
                if not flexible:
                    raise ValueError(f"an encoded (v6+) partition entry in an OffsetFetch v{version} response")
                out += p
            else:
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
        out += array_len(len(groups), True)
        for g in groups:
            out += string(g.group_id, True)
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


# -- decoding ---------------------------------------------------------------------------------
_PART_V5 = struct.Struct(">iqi")  # partition, committed offset, committed leader epoch
_PART_V1 = struct.Struct(">iq")

GroupTuple = tuple["str | None", int, list[tuple[str, list[PartitionTuple]]]]
"""(group id, error code, [(topic, [partition, ...]), ...]); the group id is None below v8."""




def _read_str(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[str | None, int]:
    """A nullable string (any negative legacy length reads as null)."""
    if flexible:
        return read_compact_str(buf, pos)
    n = _I16.unpack_from(buf, pos)[0]
    pos += 2
    if n < 0:
        return None, pos
    if n == 0:
        return "", pos
    end = pos + n
    if end > len(buf):
        raise ValueError("string runs past the end of the frame")
    return str(buf[pos:end], "utf-8"), end


def _read_len(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """Array length (-1: null)."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return _I32.unpack_from(buf, pos)[0], pos + 4




def read_extension_tags(buf: bytes | memoryview, pos: int) -> tuple[int | None, int | None, int | None, int]:
    """A partition's tagged-field section: ``(high watermark, log start offset, last
    stable offset, next position)``, each extension value None when absent or not 8
    bytes; other tags are skipped by their size. Raises ValueError when a field runs
    past the end of ``buf``, IndexError at its end."""
    hw = lso = lst = None
    ntags = buf[pos]
    if ntags >= 0x80:
        ntags, pos = read_uvarint(buf, pos)
    else:
        pos += 1
    end = len(buf)
    for _ in range(ntags):
        tag, pos = read_uvarint(buf, pos)
        size = buf[pos]
        if size >= 0x80:
            size, pos = read_uvarint(buf, pos)
        else:
            pos += 1
        if pos + size > end:
            raise ValueError(f"tagged field {tag} runs past the end of the frame")
        if size == 8:
            if tag == TAG_HIGH_WATERMARK:
                hw = _I64.unpack_from(buf, pos)[0]
            elif tag == TAG_LOG_START_OFFSET:
                lso = _I64.unpack_from(buf, pos)[0]
            elif tag == TAG_LAST_STABLE_OFFSET:
                lst = _I64.unpack_from(buf, pos)[0]
        pos += size
    return hw, lso, lst, pos


def _read_topics(buf: bytes | memoryview, pos: int, version: int, flexible: bool
                 ) -> tuple[list[tuple[str, list[PartitionTuple]]], int]:
    ntopics, pos = _read_len(buf, pos, flexible)
    topics: list[tuple[str, list[PartitionTuple]]] = []
    fixed = _PART_V5 if version >= 5 else _PART_V1
    fixed_unpack, fixed_size = fixed.unpack_from, fixed.size
    i16 = _I16.unpack_from
    end = len(buf)
    ext_unpack, ext_size = _PART_EXT.unpack_from, _PART_EXT.size
    k1, k2, k3 = _EXT_KEYS
    for _ in range(max(ntopics, 0)):
        name, pos = _read_str(buf, pos, flexible)
        nparts, pos = _read_len(buf, pos, flexible)
        parts: list[PartitionTuple] = []
        append = parts.append
        for _ in range(max(nparts, 0)):
            if flexible and pos + ext_size <= end:
                (partition, offset, epoch, mlen, error_code, ntags,
                 t1, hw, t2, lso, t3, lst) = ext_unpack(buf, pos)
                if mlen == 1 and ntags == 3 and t1 == k1 and t2 == k2 and t3 == k3:
                    append((partition, offset, epoch, "", error_code, hw, lso, lst))
                    pos += ext_size
                    continue
            if version >= 5:
                partition, offset, epoch = fixed_unpack(buf, pos)
            else:
                partition, offset = fixed_unpack(buf, pos)
                epoch = -1
            pos += fixed_size
            # metadata: nullable string; the empty string (one byte) is by far the most common
            if flexible and buf[pos] == 1:
                metadata: str | None = ""
                pos += 1
            else:
                metadata, pos = _read_str(buf, pos, flexible)
            error_code = i16(buf, pos)[0]
            pos += 2
            hw = lso = lst = None
            if flexible:
                if buf[pos] == 0:  # no tagged fields
                    pos += 1
                else:
                    hw, lso, lst, pos = read_extension_tags(buf, pos)
            append((partition, offset, epoch, metadata, error_code, hw, lso, lst))
        if flexible:
            pos = skip_tags(buf, pos)
        topics.append((name or "", parts))
    return topics, pos


def decode_offset_fetch_response(version: int, frame: bytes | memoryview
                                 ) -> tuple[int, int, list[GroupTuple]]:
    """Decode an OffsetFetch response frame *without* its size prefix (as read from the
    socket: correlation id first). Returns ``(correlation id, throttle ms, groups)``;
    below v8 ``groups`` holds one group, with id None and the top-level error code
    (0 below v2). The extension tags 10000-10002 are returned per partition (None when
    absent or not 8 bytes); other tagged fields are skipped. Raises ValueError,
    IndexError or struct.error on a malformed frame, and when bytes are left over."""
    if not 1 <= version <= 9:
        raise ValueError(f"OffsetFetch v{version} is not supported")
    buf = frame
    flexible = version >= 6
    corr = _I32.unpack_from(buf, 0)[0]
    pos = 4
    if flexible:
        pos = skip_tags(buf, pos)
    throttle = 0
    if version >= 3:
        throttle = _I32.unpack_from(buf, pos)[0]
        pos += 4
    groups: list[GroupTuple] = []
    if version >= 8:
        ngroups, pos = _read_len(buf, pos, True)
        for _ in range(max(ngroups, 0)):
            gid, pos = _read_str(buf, pos, True)
            topics, pos = _read_topics(buf, pos, version, True)
            code = _I16.unpack_from(buf, pos)[0]
            pos = skip_tags(buf, pos + 2)
            groups.append((gid or "", code, topics))
    else:
        topics, pos = _read_topics(buf, pos, version, flexible)
        code = 0
        if version >= 2:
            code = _I16.unpack_from(buf, pos)[0]
            pos += 2
        groups.append((None, code, topics))
    if flexible:
        pos = skip_tags(buf, pos)
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} bytes left over after OffsetFetch v{version}")
    return corr, throttle, groups
