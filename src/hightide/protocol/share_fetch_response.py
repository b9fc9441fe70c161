"""A hand-written ShareFetch response encoder (api 78, versions 1 and 2).

Like the Fetch encoder (:mod:`hightide.protocol.fetch_response`) it returns a list of
buffers: the encoded fields around the record bytes exactly as read from the log, which
are never copied or re-encoded. The layout matches kio's generated encoder byte for byte
(a unit test checks both versions).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from .primitives import array_len, string, uvarint
from .regions import ResponseBuffer

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACQ = struct.Struct(">qqh")
_ZERO_UUID = uuid.UUID(int=0).bytes


def _nullable(s: str | None) -> bytes:
    return b"\x00" if s is None else string(s, True)


@dataclass(slots=True)
class SharePartitionData:
    partition: int
    error_code: int = 0
    error_message: str | None = None
    acknowledge_error_code: int = 0
    acknowledge_error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    records: list[bytes | memoryview] = field(default_factory=list)  # concatenated on the wire
    acquired: list[tuple[int, int, int]] = field(default_factory=list)  # (first, last, delivery count)


@dataclass(slots=True)
class ShareTopicData:
    topic_id: uuid.UUID
    partitions: list[SharePartitionData] = field(default_factory=list)


def encode_share_fetch_response(version: int, correlation_id: int, topics: list[ShareTopicData], *,
                                throttle_ms: int = 0, error_code: int = 0, error_message: str | None = None,
                                acquisition_lock_timeout_ms: int = 0,
                                node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
                                ) -> list[ResponseBuffer]:
    """Buffers of the response frame without the 4-byte size prefix (header + body)."""
    if version not in (1, 2):
        raise ValueError(f"ShareFetch response version {version} is not supported")
    out: list[ResponseBuffer] = []
    cur = bytearray(_I32.pack(correlation_id))
    cur += b"\x00"  # response header v1 tags
    cur += _I32.pack(throttle_ms) + _I16.pack(error_code) + _nullable(error_message)
    cur += _I32.pack(acquisition_lock_timeout_ms)
    cur += array_len(len(topics), True)
    for t in topics:
        cur += t.topic_id.bytes if t.topic_id is not None else _ZERO_UUID
        cur += array_len(len(t.partitions), True)
        for p in t.partitions:
            cur += _I32.pack(p.partition) + _I16.pack(p.error_code) + _nullable(p.error_message)
            cur += _I16.pack(p.acknowledge_error_code) + _nullable(p.acknowledge_error_message)
            cur += _I32.pack(p.leader_id) + _I32.pack(p.leader_epoch) + b"\x00"
            size = sum(len(r) for r in p.records)
            cur += uvarint(size + 1)
            if size:
                out.append(bytes(cur))
                out.extend(r for r in p.records if len(r))
                cur = bytearray()
            cur += array_len(len(p.acquired), True)
            for first, last, count in p.acquired:
                cur += _ACQ.pack(first, last, count) + b"\x00"
            cur += b"\x00"
        cur += b"\x00"
    cur += array_len(len(node_endpoints), True)
    for node_id, host, port, rack in node_endpoints:
        cur += _I32.pack(node_id) + string(host, True) + _I32.pack(port) + _nullable(rack) + b"\x00"
    cur += b"\x00"
    out.append(bytes(cur))
    return out
