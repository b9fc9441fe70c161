"""A hand-written Produce response encoder (versions 3-11): one answer per produce
request is on the hot path, and kio's generic writer plus building version-specific
entities cost ~7 % of the broker's CPU at 10 KB records. Byte-identical to kio's encoder
(a unit test checks every version). Tagged fields (current leader, node endpoints) are
never sent: a single node is always the leader.
"""

from __future__ import annotations

import struct

from .primitives import string, uvarint

_PART = struct.Struct(">ihqq")  # index, error, base offset, log append time
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")

# (index, error_code, base_offset, log_append_time, log_start_offset, error_message, record_errors)
PartitionResult = tuple[int, int, int, int, int, "str | None", "list[tuple[int, str | None]]"]






def encode_produce_response(version: int, correlation_id: int,
                            topics: list[tuple[str, list[PartitionResult]]], throttle_ms: int = 0) -> bytes:
    """A complete response frame (size prefix included)."""
    flexible = version >= 9
    out = bytearray(8)
    _I32.pack_into(out, 4, correlation_id)
    if flexible:
        out += b"\x00"
    out += uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, parts in topics:
        out += string(name, flexible)
        out += uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for index, error, base, append_time, log_start, message, record_errors in parts:
            out += _PART.pack(index, error, base, append_time)
            if version >= 5:
                out += _I64.pack(log_start)
            if version >= 8:
                out += uvarint(len(record_errors) + 1) if flexible else _I32.pack(len(record_errors))
                for batch_index, batch_message in record_errors:
                    out += _I32.pack(batch_index) + string(batch_message, flexible)
                    if flexible:
                        out += b"\x00"
                out += string(message, flexible)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(throttle_ms)
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
