"""OffsetCommit v8/v9 requests carrying hightide's ``ExpectedOffset`` extension
(tagged field 10000, int64, per partition): the commit succeeds only if the stored
offset equals it (-1 = no commit yet), giving optimistic locking (seed 001). Without
expected offsets the bytes equal kio's encoder's. Used by hightide's client and tests.

Also the broker's side, hand-written like OffsetFetch's codec: a decoder of v8/v9
requests (the flexible versions current clients send) and the response encoder
(v2-v9, the same bytes as kio's encoder; unit tests check both against kio). A broker
under an offset-commit load spent ~11 % of its event loop in the generic request
reader and ~15 % in the generic response writer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from .primitives import (
    Unknown,
    array_len,
    collect_tags,
    read_compact_array_len,
    read_compact_str,
    read_tags,
    string,
    uvarint,
)

TAG_EXPECTED_OFFSET = 10000
_HDR = struct.Struct(">hhih")


@dataclass(slots=True)
class CommitPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    expected_offset: int | None = None






def _c(s: str | None) -> bytes:
    return string(s, True)


def encode_offset_commit_request(version: int, correlation_id: int, client_id: str | None, group_id: str,
                                 generation: int, member_id: str, group_instance_id: str | None,
                                 topics: list[tuple[str, list[CommitPartition]]]) -> bytes:
    """A complete OffsetCommit v8 or v9 request frame (size prefix included)."""
    if version not in (8, 9):
        raise ValueError("the ExpectedOffset extension needs a flexible version (8 or 9)")
    cid = None if client_id is None else client_id.encode()
    out = bytearray(b"\x00\x00\x00\x00")
    out += _HDR.pack(8, version, correlation_id, -1 if cid is None else len(cid)) + (cid or b"") + b"\x00"
    out += _c(group_id) + struct.pack(">i", generation) + _c(member_id) + _c(group_instance_id)
    out += uvarint(len(topics) + 1)
    for name, parts in topics:
        out += _c(name) + uvarint(len(parts) + 1)
        for p in parts:
            out += struct.pack(">iqi", p.partition, p.offset, p.leader_epoch) + _c(p.metadata)
            if p.expected_offset is None:
                out += b"\x00"
            else:
                out += b"\x01" + uvarint(TAG_EXPECTED_OFFSET) + uvarint(8) + struct.pack(">q", p.expected_offset)
        out += b"\x00"
    out += b"\x00"
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


_I32 = struct.Struct(">i")
_PART_FLEX = struct.Struct(">ihB")  # partition index, error code, empty tag section
_PART = struct.Struct(">ih")


def encode_offset_commit_response(version: int, correlation_id: int,
                                  topics: list[tuple[str, list[tuple[int, int]]]], throttle_ms: int = 0) -> bytes:
    """A complete OffsetCommit response frame (size prefix included) for versions 2-9:
    ``topics`` is ``[(name, [(partition index, error code), ...]), ...]``. Raises
    ValueError for other versions and struct.error for out-of-range numbers."""
    if not 2 <= version <= 9:
        raise ValueError(f"OffsetCommit v{version} responses are not supported")
    flexible = version >= 8
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\x00"  # response header v1: no tagged fields
    if version >= 3:
        out += _I32.pack(throttle_ms)
    out += array_len(len(topics), flexible)
    part = _PART_FLEX if flexible else _PART
    for name, parts in topics:
        out += string(name, flexible) + array_len(len(parts), flexible)
        if flexible:
            out += b"".join([part.pack(i, code, 0) for i, code in parts]) + b"\x00"
        else:
            out += b"".join([part.pack(i, code) for i, code in parts])
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


class CommitPartitionRequest(NamedTuple):
    """A decoded request partition: kio's field names (ExpectedOffset is also collected as
    an unknown tag, as the generic reader does), and first its topic's name and last the
    ExpectedOffset (tag 10000 holding 8 bytes, else None): the fields, in order, of
    :class:`hightide.group.offsets.CommitRequest`, so the broker commits these tuples as
    they are."""

    topic: str
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str | None
    expected_offset: int | None = None


class CommitTopicRequest(NamedTuple):
    name: str
    partitions: list[CommitPartitionRequest]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestBody:
    """A decoded OffsetCommit v8/v9 request body, with kio's field names."""

    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None
    topics: list[CommitTopicRequest]


_PART_HEAD = struct.Struct(">iqi")  # partition index, committed offset, committed leader epoch
_I64 = struct.Struct(">q")
_GEN = struct.Struct(">i")


def decode_offset_commit_request(version: int, frame: bytes | memoryview, pos: int,
                                 unknown: Unknown | None = None) -> OffsetCommitRequestBody:
    """Decode an OffsetCommit v8 or v9 request body starting at ``pos`` (after the
    request header). Tagged fields are collected in ``unknown`` keyed by ``id()`` of
    the request, topic or partition object that carries them (ExpectedOffset is tag
    10000 of a partition). Trailing bytes are ignored, as the generic reader does.
    Raises ValueError, IndexError, UnicodeDecodeError or struct.error on malformed input."""
    if version not in (8, 9):
        raise ValueError(f"OffsetCommit v{version} is decoded by the generic reader")
    # one copy of the (small) frame: slicing and decoding bytes costs half of what a
    # memoryview slice does, and a request carries a string per partition (metadata)
    buf = frame if isinstance(frame, bytes) else bytes(frame)
    group_id, pos = read_compact_str(buf, pos, False)
    generation = _GEN.unpack_from(buf, pos)[0]
    member_id, pos = read_compact_str(buf, pos + 4, False)
    instance_id, pos = read_compact_str(buf, pos, True)
    ntopics, pos = read_compact_array_len(buf, pos, 3)
    head, head_size = _PART_HEAD.unpack_from, _PART_HEAD.size
    new = tuple.__new__  # the NamedTuple without its Python-level __new__
    topics: list[CommitTopicRequest] = []
    for _ in range(ntopics):
        name, pos = read_compact_str(buf, pos, False)
        topic_name = name or ""
        nparts, pos = read_compact_array_len(buf, pos, head_size + 2)
        parts: list[CommitPartitionRequest] = []
        for _ in range(nparts):
            index, offset, epoch = head(buf, pos)
            pos += head_size
            n = buf[pos]
            if 1 < n < 0x80 and pos + n <= len(buf):  # metadata of 1-126 bytes: a one-byte length
                metadata: str | None = buf[pos + 1:pos + n].decode()
                pos += n
            elif n == 1:  # the usual empty metadata
                metadata = ""
                pos += 1
            else:
                metadata, pos = read_compact_str(buf, pos, True)
            if buf[pos] == 0:  # no tagged fields
                pos += 1
                parts.append(new(CommitPartitionRequest, (topic_name, index, offset, epoch, metadata, None)))
                continue
            found, pos = read_tags(buf, pos)
            raw = found.get(TAG_EXPECTED_OFFSET)
            expected = _I64.unpack(raw)[0] if raw is not None and len(raw) == 8 else None
            p = new(CommitPartitionRequest, (topic_name, index, offset, epoch, metadata, expected))
            if unknown is not None:
                unknown[id(p)] = found
            parts.append(p)
        topic = CommitTopicRequest(topic_name, parts)
        pos = collect_tags(buf, pos, topic, unknown)
        topics.append(topic)
    body = OffsetCommitRequestBody(group_id or "", generation, member_id or "", instance_id, topics)
    collect_tags(buf, pos, body, unknown)
    return body

