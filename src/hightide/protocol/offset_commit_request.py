"""OffsetCommit v8/v9 requests carrying hightide's ``ExpectedOffset`` extension
(tagged field 10000, int64, per partition): the commit succeeds only if the stored
offset equals it (-1 = no commit yet), giving optimistic locking (seed 001). Without
expected offsets the bytes equal kio's encoder's. Used by hightide's client and tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .primitives import string, uvarint

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
