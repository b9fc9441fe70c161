"""A hand-written Fetch response encoder (versions 4 to 17).

Fetch responses carry the bulk of the bytes a broker sends, so they are built as a
list of buffers: small encoded headers interleaved with the record bytes exactly as
read from the segment files -- bytes, or a :class:`~.regions.Region` of a segment file
that the IO shell sends with ``sendfile`` -- never copied here. The layout matches kio's generated encoder byte for byte (a unit test
checks every version).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from .primitives import array_len, string, uvarint
from .regions import Region, ResponseBuffer

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_FIXED = struct.Struct(">ihq")  # partition, error, high watermark
_Q = struct.Struct(">q")


@dataclass(slots=True)
class PartitionData:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1
    #: Always an array, empty when there is nothing to send (errors too): Kafka never sends
    #: null records, and librdkafka rejects a whole response holding one ("invalid
    #: MessageSetSize -1"), so it would never see the partition's error code.
    #: Bytes, or a region of a segment file (its length goes in the size field; the
    #: encoder passes it on in the buffers, uncopied and unread).
    records: bytes | memoryview | Region = b""
    current_leader: tuple[int, int] | None = None  # (leader id, epoch), tagged field 1 (v12+)
    #: (epoch, end offset) for a follower whose log diverged, tagged field 0 (v12+)
    diverging_epoch: tuple[int, int] | None = None


@dataclass(slots=True)
class TopicData:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[PartitionData] = field(default_factory=list)


def encode_fetch_response(version: int, correlation_id: int, topics: list[TopicData], *,
                          throttle_ms: int = 0, error_code: int = 0, session_id: int = 0,
                          node_endpoints: list[tuple[int, str, int, str | None]] | None = None,
                          ) -> tuple[list[ResponseBuffer], int]:
    """Return (buffers, total size) of the response frame *without* the 4-byte size
    prefix (header + body). ``version`` must be 4..17. Every region among the
    partitions' records is in the buffers (the caller owns them)."""
    flexible = version >= 12
    out: list[ResponseBuffer] = []
    head = bytearray(_I32.pack(correlation_id))
    if flexible:
        head += b"\x00"  # response header v1 tag section
    head += _I32.pack(throttle_ms)
    if version >= 7:
        head += _I16.pack(error_code) + _I32.pack(session_id)
    head += array_len(len(topics), flexible)
    cur = head
    for t in topics:
        if version >= 13:
            cur += (t.topic_id or uuid.UUID(int=0)).bytes
        else:
            cur += string(t.name or "", flexible)
        cur += array_len(len(t.partitions), flexible)
        for p in t.partitions:
            cur += _PART_FIXED.pack(p.partition, p.error_code, p.high_watermark)
            cur += _Q.pack(p.last_stable_offset)
            if version >= 5:
                cur += _Q.pack(p.log_start_offset)
            if p.aborted is None:
                cur += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                cur += array_len(len(p.aborted), flexible)
                for pid, first in p.aborted:
                    cur += struct.pack(">qq", pid, first)
                    if flexible:
                        cur += b"\x00"
            if version >= 11:
                cur += _I32.pack(p.preferred_read_replica)
            rec = p.records
            cur += uvarint(len(rec) + 1) if flexible else _I32.pack(len(rec))
            if len(rec):
                out.append(bytes(cur))
                out.append(rec)
                cur = bytearray()
            if flexible:
                tags = []  # ascending tag numbers
                if p.diverging_epoch is not None:
                    tag = _I32.pack(p.diverging_epoch[0]) + _Q.pack(p.diverging_epoch[1]) + b"\x00"
                    tags.append(uvarint(0) + uvarint(len(tag)) + tag)
                if p.current_leader is not None:
                    tag = _I32.pack(p.current_leader[0]) + _I32.pack(p.current_leader[1]) + b"\x00"
                    tags.append(uvarint(1) + uvarint(len(tag)) + tag)
                cur += uvarint(len(tags)) + b"".join(tags)
        if flexible:
            cur += b"\x00"
    if flexible:
        if version >= 16 and node_endpoints:
            body = bytearray(array_len(len(node_endpoints), True))
            for node_id, host, port, rack in node_endpoints:
                body += _I32.pack(node_id) + string(host, True) + _I32.pack(port)
                body += b"\x00" if rack is None else string(rack, True)
                body += b"\x00"
            cur += b"\x01" + uvarint(0) + uvarint(len(body)) + body
        else:
            cur += b"\x00"
    if cur:
        out.append(bytes(cur))
    return out, sum(len(b) for b in out)
