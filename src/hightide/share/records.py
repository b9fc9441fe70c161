"""Records of the ``__share_group_state`` topic (seed 002), byte-compatible with Kafka.

Keys start with an int16 record type, then the non-flexible key fields
``{GroupId: string, TopicId: uuid, Partition: int32}``:

* 0 — ShareSnapshot: the complete state of one share partition;
* 1 — ShareUpdate: state batches changed since the last snapshot (merged on replay).

Values start with int16 version 0 and use the flexible encoding (compact arrays and a
tagged-field section after every struct):

* ShareSnapshotValue: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
  StartOffset int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches;
* ShareUpdateValue: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64, StateBatches;
* StateBatch: FirstOffset int64, LastOffset int64, DeliveryState int8, DeliveryCount int16.

DeliveryCompleteCount is tagged field 0 (int32) of both values, default -1: written only
when it is not -1, and a record without it (written by a broker that predates the field)
reads as -1, so the value version never changes. Unknown tags are skipped. A null value
(always with a ShareSnapshot key) is a tombstone: the share partition's state is deleted.
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass, field

from ..group.records import java_abs, java_string_hash
from ..protocol.primitives import uvarint as _uvarint
from .types import ShareStateKey, StateBatch

STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
TAG_DELIVERY_COMPLETE_COUNT = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_BATCH = struct.Struct(">qqbh")
_BATCH_NO_TAGS = struct.Struct(">qqbhB")  # a batch and its tag count (0)
_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")  # version, then the ShareSnapshotValue fields before the batches
_UPDATE_HEAD = struct.Struct(">hiiq")  # version, then the ShareUpdateValue fields before the batches
_DCC_TAG = struct.Struct(">BBBi")  # one tagged field: tag 0, size 4, the int32


class ShareRecordError(ValueError):
    """A key or value that is not a valid ``__share_group_state`` record."""


class ShareSnapshotKey(ShareStateKey):
    """Key of record type 0: the share partition whose complete state the value is."""

    __slots__ = ()


class ShareUpdateKey(ShareStateKey):
    """Key of record type 1: the share partition whose changed batches the value holds."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = field(default_factory=tuple)
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = field(default_factory=tuple)
    delivery_complete_count: int = -1


ShareKey = ShareSnapshotKey | ShareUpdateKey
ShareValue = ShareSnapshotValue | ShareUpdateValue


# -- encoding -----------------------------------------------------------------------------
def encode_key(key: ShareKey) -> bytes:
    record_type = SNAPSHOT_TYPE if isinstance(key, ShareSnapshotKey) else UPDATE_TYPE
    gid = key.group_id.encode()
    return b"".join((_I16.pack(record_type), _I16.pack(len(gid)), gid, key.topic_id.bytes,
                     _I32.pack(key.partition)))


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    if not batches:
        return b"\x01"
    pack = _BATCH_NO_TAGS.pack  # each batch with its (empty) tagged fields
    return _uvarint(len(batches) + 1) + b"".join(
        [pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count, 0) for b in batches])


def _tags(delivery_complete_count: int) -> bytes:
    if delivery_complete_count == -1:
        return b"\x00"
    return _DCC_TAG.pack(1, TAG_DELIVERY_COMPLETE_COUNT, 4, delivery_complete_count)


def encode_value(value: ShareValue | None) -> bytes | None:
    """Value bytes (version 0); None for a tombstone."""
    if value is None:
        return None
    if isinstance(value, ShareSnapshotValue):
        head = _SNAPSHOT_HEAD.pack(0, value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                   value.start_offset, value.create_timestamp, value.write_timestamp)
    else:
        head = _UPDATE_HEAD.pack(0, value.snapshot_epoch, value.leader_epoch, value.start_offset)
    return head + _batches(value.state_batches) + _tags(value.delivery_complete_count)


# -- decoding -----------------------------------------------------------------------------
class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, s: struct.Struct) -> tuple:
        if self.pos + s.size > len(self.buf):
            raise ShareRecordError("record truncated")
        v = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ShareRecordError("record truncated")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise ShareRecordError("malformed unsigned varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out

    def batches(self) -> tuple[StateBatch, ...]:
        n = self.uvarint() - 1
        if n < 0:
            raise ShareRecordError("null StateBatches")
        end = self.pos + n * _BATCH_NO_TAGS.size
        if end <= len(self.buf):  # fast path: no batch has tagged fields (what every writer sends)
            rows = list(_BATCH_NO_TAGS.iter_unpack(memoryview(self.buf)[self.pos:end]))
            if not any(row[4] for row in rows):
                self.pos = end
                return tuple(StateBatch(first, last, state, count) for first, last, state, count, _ in rows)
        out = []
        for _ in range(n):
            first, last, state, count = self.take(_BATCH)
            self.tags()
            out.append(StateBatch(first, last, state, count))
        return tuple(out)


def decode_key(data: bytes) -> ShareKey | None:
    """The key, or None for a record type other than 0/1 (not share state). Raises
    ShareRecordError when truncated."""
    r = _Reader(data)
    (record_type,) = r.take(_I16)
    if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
        return None
    (n,) = r.take(_I16)
    if n < 0:
        raise ShareRecordError("null group id")
    gid = r.raw(n).decode()
    topic_id = uuid.UUID(bytes=r.raw(16))
    (partition,) = r.take(_I32)
    cls = ShareSnapshotKey if record_type == SNAPSHOT_TYPE else ShareUpdateKey
    return cls(gid, topic_id, partition)


def _dcc(tags: dict[int, bytes]) -> int:
    raw = tags.get(TAG_DELIVERY_COMPLETE_COUNT)
    if raw is None:
        return -1
    if len(raw) != 4:
        raise ShareRecordError("DeliveryCompleteCount: expected 4 bytes")
    return _I32.unpack(raw)[0]


def decode_value(key: ShareKey, data: bytes | None) -> ShareValue | None:
    """The value belonging to ``key`` (None for a tombstone). Raises ShareRecordError for
    an unknown version, truncation or trailing bytes."""
    if data is None:
        return None
    r = _Reader(data)
    (version,) = r.take(_I16)
    if version != 0:
        raise ShareRecordError(f"unknown {type(key).__name__} value version {version}")
    if isinstance(key, ShareSnapshotKey):
        snapshot_epoch, state_epoch, leader_epoch = r.take(struct.Struct(">iii"))
        start, created, written = r.take(struct.Struct(">qqq"))
        batches = r.batches()
        value: ShareValue = ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start, created,
                                               written, batches, _dcc(r.tags()))
    else:
        snapshot_epoch, leader_epoch, start = r.take(struct.Struct(">iiq"))
        batches = r.batches()
        value = ShareUpdateValue(snapshot_epoch, leader_epoch, start, batches, _dcc(r.tags()))
    if r.pos != len(data):
        raise ShareRecordError("trailing bytes after the record")
    return value


def partition_for(key_text: str, num_partitions: int) -> int:
    """The ``__share_group_state`` partition of a share partition, by Kafka's
    ``Utils.abs(hash("group:topicId:partition")) % n`` (the FindCoordinator key of type SHARE)."""
    return java_abs(java_string_hash(key_text)) % num_partitions


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey string ``group:topicId:partition`` (topic id in Kafka's
    url-safe base64 form)."""
    tid = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"{group_id}:{tid}:{partition}"
