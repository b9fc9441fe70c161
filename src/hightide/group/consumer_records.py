"""KIP-848 consumer group records of ``__consumer_offsets``, byte-compatible with Kafka.

Key versions (the int16 that starts every key) and their record types:

* 3 — group metadata: ``{group}`` → group epoch (tagged: metadata hash, creation time);
* 4 — subscription (partition) metadata: ``{group}`` → the subscribed topics' ids, names
  and partition counts (Kafka 4.0 writes it; 4.1+ only reads it);
* 5 — member metadata: ``{group, member}`` → instance/rack/client ids, subscription,
  rebalance timeout, server assignor;
* 6 — target assignment metadata: ``{group}`` → the target assignment epoch;
* 7 — target assignment of a member: ``{group, member}`` → partitions;
* 8 — current member assignment: ``{group, member}`` → member epoch, previous epoch,
  state, assigned partitions and partitions pending revocation.

Keys are non-flexible (int16-length strings). Values start with int16 version 0 and use
the flexible encoding: compact (uvarint length + 1) strings and arrays, 16-byte uuids and
a tagged-field section after every struct. Tagged fields hightide does not model (the
classic member metadata of a member, per-partition assignment epochs, assignment
timestamps) are skipped on read and not written. A null value is a tombstone.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from .records import _R, _W, RecordFormatError

_I8 = struct.Struct(">b")

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""An assignment on the wire: ``((topic_id, (partition, ...)), ...)``."""


# -- keys -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str
    VERSION = 3


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str
    VERSION = 4


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str
    VERSION = 5


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str
    VERSION = 6


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str
    VERSION = 7


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str
    VERSION = 8


ConsumerKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
               | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
               | ConsumerGroupCurrentMemberAssignmentKey)

_GROUP_KEYS = {3: ConsumerGroupMetadataKey, 4: ConsumerGroupPartitionMetadataKey,
               6: ConsumerGroupTargetAssignmentMetadataKey}
_MEMBER_KEYS = {5: ConsumerGroupMemberMetadataKey, 7: ConsumerGroupTargetAssignmentMemberKey,
                8: ConsumerGroupCurrentMemberAssignmentKey}


# -- values ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # tag 0 (Kafka 4.1+)
    creation_time_ms: int = -1  # tag 1


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One subscribed topic as the group last saw it. ``partition_racks`` is deprecated in
    Kafka (and always empty when hightide writes it)."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: 0 stable, 1 unrevoked, 2 unreleased (127 unknown)
    assigned_partitions: TopicPartitions = ()
    partitions_pending_revocation: TopicPartitions = ()


ConsumerValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue | ConsumerGroupMemberMetadataValue
                 | ConsumerGroupTargetAssignmentMetadataValue | ConsumerGroupTargetAssignmentMemberValue
                 | ConsumerGroupCurrentMemberAssignmentValue)


# -- flexible writer / reader -----------------------------------------------------------------
class _FW(_W):
    """``_W`` plus the flexible (compact) encodings."""

    __slots__ = ()

    def i8(self, v: int) -> _FW:
        self.b += _I8.pack(v)
        return self

    def uvarint(self, v: int) -> _FW:
        while v >= 0x80:
            self.b.append((v & 0x7F) | 0x80)
            v >>= 7
        self.b.append(v)
        return self

    def cstring(self, s: str | None) -> _FW:
        if s is None:
            return self.uvarint(0)
        data = s.encode()
        self.uvarint(len(data) + 1)
        self.b += data
        return self

    def uuid(self, u: uuid.UUID) -> _FW:
        self.b += u.bytes
        return self

    def alen(self, n: int) -> _FW:
        return self.uvarint(n + 1)

    def tags(self, fields: list[tuple[int, bytes]] | None = None) -> _FW:
        fields = fields or []
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag).uvarint(len(data))
            self.b += data
        return self

    def topic_partitions(self, tps: TopicPartitions) -> _FW:
        self.alen(len(tps))
        for topic_id, parts in tps:
            self.uuid(topic_id).alen(len(parts))
            for p in parts:
                self.i32(p)
            self.tags()
        return self


class _FR(_R):
    """``_R`` plus uuids, int8 and tagged fields that are returned instead of skipped."""

    __slots__ = ()

    def i8(self) -> int:
        return self._take(_I8)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._raw(16))

    def cstring(self) -> str | None:
        return self.string(flexible=True)

    def req_string(self) -> str:
        s = self.cstring()
        if s is None:
            raise RecordFormatError("null in a non-nullable string")
        return s

    def count(self) -> int:
        n = self.array_len(True)
        if n < 0:
            raise RecordFormatError("null in a non-nullable array")
        return n

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._raw(self.uvarint())
        return out

    def topic_partitions(self) -> TopicPartitions:
        out = []
        for _ in range(self.count()):
            topic_id = self.uuid()
            parts = tuple(self.i32() for _ in range(self.count()))
            self.tags()
            out.append((topic_id, parts))
        return tuple(out)


def _end(r: _FR) -> None:
    if r.pos != len(r.buf):
        raise RecordFormatError("trailing bytes after the record")


# -- keys: encode / decode ----------------------------------------------------------------------
def encode_group_key(key: Any) -> bytes:
    """Key bytes of a consumer or share group record: int16 version, the group id, then
    the member id for member-scoped keys (those with a ``member_id`` field)."""
    w = _W().i16(key.VERSION).string(key.group_id)
    member_id = getattr(key, "member_id", None)
    if member_id is not None:
        w.string(member_id)
    return bytes(w.b)


def decode_group_key(data: bytes, group_keys: dict[int, type], member_keys: dict[int, type]) -> Any:
    """Decode a key whose version is in ``group_keys`` ({group}) or ``member_keys``
    ({group, member}); None for any other version. Raises RecordFormatError if truncated."""
    r = _R(data)
    version = r.i16()
    if version in group_keys:
        return group_keys[version](r.string() or "")
    if version in member_keys:
        return member_keys[version](r.string() or "", r.string() or "")
    return None


def encode_key(key: ConsumerKey) -> bytes:
    """The key bytes: int16 version then the group id (and member id for 5, 7, 8)."""
    return encode_group_key(key)


def decode_key(data: bytes) -> ConsumerKey | None:
    """Decode a key of versions 3–8; None for any other version (offsets, classic groups,
    share groups, transactions, regex records...). Raises RecordFormatError if truncated."""
    return decode_group_key(data, _GROUP_KEYS, _MEMBER_KEYS)


# -- values: encode ------------------------------------------------------------------------------
def _i64(v: int) -> bytes:
    return struct.pack(">q", v)


def _enc_group(v: ConsumerGroupMetadataValue, w: _FW) -> None:
    tags = []
    if v.metadata_hash != 0:
        tags.append((0, _i64(v.metadata_hash)))
    if v.creation_time_ms != -1:
        tags.append((1, _i64(v.creation_time_ms)))
    w.i32(v.epoch).tags(tags)


def _enc_partition_metadata(v: ConsumerGroupPartitionMetadataValue, w: _FW) -> None:
    w.alen(len(v.topics))
    for t in v.topics:
        w.uuid(t.topic_id).cstring(t.topic_name).i32(t.num_partitions).alen(len(t.partition_racks))
        for partition, racks in t.partition_racks:
            w.i32(partition).alen(len(racks))
            for rack in racks:
                w.cstring(rack)
            w.tags()
        w.tags()
    w.tags()


def _enc_member(v: ConsumerGroupMemberMetadataValue, w: _FW) -> None:
    w.cstring(v.instance_id).cstring(v.rack_id).cstring(v.client_id).cstring(v.client_host)
    w.alen(len(v.subscribed_topic_names))
    for name in v.subscribed_topic_names:
        w.cstring(name)
    w.cstring(v.subscribed_topic_regex).i32(v.rebalance_timeout_ms).cstring(v.server_assignor).tags()


def _enc_current(v: ConsumerGroupCurrentMemberAssignmentValue, w: _FW) -> None:
    w.i32(v.member_epoch).i32(v.previous_member_epoch).i8(v.state)
    w.topic_partitions(v.assigned_partitions).topic_partitions(v.partitions_pending_revocation).tags()


def encode_value(value: ConsumerValue | None) -> bytes | None:
    """The value bytes (version 0, flexible); None for a tombstone."""
    if value is None:
        return None
    w = _FW().i16(0)
    if isinstance(value, ConsumerGroupMetadataValue):
        _enc_group(value, w)
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        _enc_partition_metadata(value, w)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        _enc_member(value, w)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        w.i32(value.assignment_epoch).tags()
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        w.topic_partitions(value.topic_partitions).tags()
    else:
        _enc_current(value, w)
    return bytes(w.b)


# -- values: decode ------------------------------------------------------------------------------
def _tag_i64(tags: dict[int, bytes], tag: int, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != 8:
        raise RecordFormatError(f"tagged field {tag}: expected 8 bytes")
    return struct.unpack(">q", data)[0]


def _dec_group(r: _FR) -> ConsumerGroupMetadataValue:
    epoch = r.i32()
    tags = r.tags()
    return ConsumerGroupMetadataValue(epoch, _tag_i64(tags, 0, 0), _tag_i64(tags, 1, -1))


def _dec_partition_metadata(r: _FR) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(r.count()):
        topic_id, name, n = r.uuid(), r.req_string(), r.i32()
        racks = []
        for _ in range(r.count()):
            partition = r.i32()
            racks.append((partition, tuple(r.req_string() for _ in range(r.count()))))
            r.tags()
        r.tags()
        topics.append(TopicMetadata(topic_id, name, n, tuple(racks)))
    r.tags()
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _dec_member(r: _FR) -> ConsumerGroupMemberMetadataValue:
    instance, rack, client, host = r.cstring(), r.cstring(), r.req_string(), r.req_string()
    names = tuple(r.req_string() for _ in range(r.count()))
    regex, timeout, assignor = r.cstring(), r.i32(), r.cstring()
    r.tags()  # tag 0: ClassicMemberMetadata (members on the classic protocol), not modelled
    return ConsumerGroupMemberMetadataValue(instance, rack, client, host, names, regex, timeout, assignor)


def _dec_current(r: _FR) -> ConsumerGroupCurrentMemberAssignmentValue:
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    assigned, pending = r.topic_partitions(), r.topic_partitions()
    r.tags()
    return ConsumerGroupCurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)


def _dec_target_epoch(r: _FR) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = r.i32()
    r.tags()
    return ConsumerGroupTargetAssignmentMetadataValue(epoch)


def _dec_target_member(r: _FR) -> ConsumerGroupTargetAssignmentMemberValue:
    tps = r.topic_partitions()
    r.tags()
    return ConsumerGroupTargetAssignmentMemberValue(tps)


_DECODERS = {
    ConsumerGroupMetadataKey: _dec_group,
    ConsumerGroupPartitionMetadataKey: _dec_partition_metadata,
    ConsumerGroupMemberMetadataKey: _dec_member,
    ConsumerGroupTargetAssignmentMetadataKey: _dec_target_epoch,
    ConsumerGroupTargetAssignmentMemberKey: _dec_target_member,
    ConsumerGroupCurrentMemberAssignmentKey: _dec_current,
}


def decode_value(key: ConsumerKey, data: bytes | None) -> ConsumerValue | None:
    """Decode the value belonging to ``key`` (None for a tombstone). Raises
    RecordFormatError for an unknown value version, truncation or trailing bytes."""
    if data is None:
        return None
    r = _FR(data)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
    value = _DECODERS[type(key)](r)
    _end(r)
    return value
