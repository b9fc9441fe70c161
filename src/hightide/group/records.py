"""Records of the ``__consumer_offsets`` topic, byte-compatible with Apache Kafka.

Keys start with an int16 version that says what the record is:

* 0, 1 — offset commit: ``{group, topic, partition}``; value versions 0–4
  (hightide writes v3: offset, leaderEpoch, metadata, commitTimestamp);
* 2 — classic group metadata: ``{group}``; value versions 0–4 (hightide writes v3);

A record with a null value is a tombstone (offset deleted / group deleted). Tools that
read ``__consumer_offsets`` (Kafka's ``GroupMetadataMessageFormatter``, hightide's Spark
source) decode these exactly. Groups map to partitions with Java's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

OFFSETS_TOPIC = "__consumer_offsets"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value that is not a valid ``__consumer_offsets`` record."""


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 arithmetic)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs`` of an int32: ``abs(n)``, and 0 for ``Integer.MIN_VALUE``
    (whose absolute value does not fit). Not ``n & 0x7FFFFFFF`` (``Utils.toPositive``, the
    producer partitioner's function), which differs for every negative ``n``."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``."""
    return java_abs(java_string_hash(group_id)) % num_partitions


# -- records ------------------------------------------------------------------------------
# Offset keys and values are NamedTuples: immutable like the frozen dataclasses of the
# other records, and built per committed partition, where a NamedTuple costs half of a
# frozen dataclass's ``__init__`` (a fifth built with ``tuple.__new__``, as the commit
# path does). No other record key is a tuple, so no two keys of different types can
# compare equal.
class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class OffsetValue(NamedTuple):
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only in value v1 (legacy)


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


Key = OffsetKey | GroupKey
Value = OffsetValue | GroupValue


# -- writer ---------------------------------------------------------------------------------
class _W:
    __slots__ = ("b",)

    def __init__(self) -> None:
        self.b = bytearray()

    def i16(self, v: int) -> "_W":
        self.b += _I16.pack(v)
        return self

    def i32(self, v: int) -> "_W":
        self.b += _I32.pack(v)
        return self

    def i64(self, v: int) -> "_W":
        self.b += _I64.pack(v)
        return self

    def string(self, s: str | None) -> "_W":
        if s is None:
            return self.i16(-1)
        data = s.encode()
        self.i16(len(data))
        self.b += data
        return self

    def bytes_(self, data: bytes | None) -> "_W":
        if data is None:
            return self.i32(-1)
        self.i32(len(data))
        self.b += data
        return self


_KEY_HEAD = struct.Struct(">hh")  # version, group length
_OFFSET_V3_HEAD = struct.Struct(">hqih")  # version 3, offset, leader epoch, metadata length


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        if key.group is not None and key.topic is not None:  # the usual key, in three packs
            g, t = key.group.encode(), key.topic.encode()
            return _KEY_HEAD.pack(1, len(g)) + g + _I16.pack(len(t)) + t + _I32.pack(key.partition)
        return bytes(_W().i16(1).string(key.group).string(key.topic).i32(key.partition).b)
    return bytes(_W().i16(2).string(key.group).b)


def encode_value(value: Value | None) -> bytes | None:
    """Encode a value (None for a tombstone). Offsets as v3 (v1 when an expire timestamp
    is set, as Kafka does), group metadata as v3."""
    if value is None:
        return None
    if isinstance(value, OffsetValue):
        if value.expire_timestamp >= 0:
            return bytes(_W().i16(1).i64(value.offset).string(value.metadata).i64(value.commit_timestamp)
                         .i64(value.expire_timestamp).b)
        if value.metadata is not None:  # = the _W chain below, in two packs
            meta = value.metadata.encode()
            return (_OFFSET_V3_HEAD.pack(3, value.offset, value.leader_epoch, len(meta)) + meta
                    + _I64.pack(value.commit_timestamp))
        return bytes(_W().i16(3).i64(value.offset).i32(value.leader_epoch).string(value.metadata)
                     .i64(value.commit_timestamp).b)
    w = _W().i16(3).string(value.protocol_type).i32(value.generation).string(value.protocol)
    w.string(value.leader).i64(value.current_state_timestamp).i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.b)


def encode_offset_records(records: Sequence[tuple[OffsetKey, OffsetValue | None]]
                          ) -> list[tuple[bytes | None, bytes | None]]:
    """:func:`encode_key` and :func:`encode_value` of offset records, the same bytes:
    the key's group and topic are encoded once per run of records that share them
    (an OffsetCommit's), and so are a value's metadata and commit timestamp when they
    repeat the record before's."""
    out: list[tuple[bytes | None, bytes | None]] = []
    group = topic = metadata = None
    timestamp = -2  # (no timestamp is -2: the first value encodes its own)
    head = meta = tail = b""
    i32, v3 = _I32.pack, _OFFSET_V3_HEAD.pack
    for key, value in records:
        if key.group is None or key.topic is None:  # not the usual key: the general encoder
            out.append((encode_key(key), encode_value(value)))
            continue
        if key.group != group or key.topic != topic:
            group, topic = key.group, key.topic
            g, t = group.encode(), topic.encode()
            head = _KEY_HEAD.pack(1, len(g)) + g + _I16.pack(len(t)) + t
        if value is None:
            out.append((head + i32(key.partition), None))
        elif value.expire_timestamp >= 0 or value.metadata is None:
            out.append((head + i32(key.partition), encode_value(value)))
        else:
            if value.metadata != metadata or value.commit_timestamp != timestamp:
                metadata, timestamp = value.metadata, value.commit_timestamp
                meta = metadata.encode()
                tail = meta + _I64.pack(timestamp)
            out.append((head + i32(key.partition), v3(3, value.offset, value.leader_epoch, len(meta)) + tail))
    return out


# -- reader ---------------------------------------------------------------------------------
class _R:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise RecordFormatError("record truncated")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise RecordFormatError("record truncated")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def _raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record truncated")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self, flexible: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        return None if n < 0 else self._raw(n).decode()

    def bytes_(self, flexible: bool = False) -> bytes | None:
        n = self.uvarint() - 1 if flexible else self.i32()
        return None if n < 0 else self._raw(n)

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.i32()

    def skip_tags(self, flexible: bool) -> None:
        if flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._raw(self.uvarint())


def decode_key(data: bytes) -> Key | None:
    """Decode a key; None for record types hightide does not interpret (KIP-848 and
    share/transaction records written by other brokers, versions >= 3)."""
    r = _R(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    return None


def _value_version(r: _R, what: str) -> int:
    """The int16 value version, 0-4 (4: flexible). Raises RecordFormatError otherwise."""
    v = r.i16()
    if not 0 <= v <= 4:
        raise RecordFormatError(f"unknown {what} value version {v}")
    return v


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _R(data)
    v = _value_version(r, "offset commit")
    flexible = v >= 4
    offset = r.i64()
    epoch = r.i32() if v >= 3 else -1
    metadata = r.string(flexible) or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if v == 1 else -1
    r.skip_tags(flexible)
    return OffsetValue(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_value(data: bytes) -> GroupValue:
    r = _R(data)
    v = _value_version(r, "group metadata")
    flex = v >= 4
    protocol_type = r.string(flex) or ""
    generation = r.i32()
    protocol = r.string(flex)
    leader = r.string(flex)
    state_ts = r.i64() if v >= 2 else -1
    members = []
    for _ in range(max(r.array_len(flex), 0)):
        member_id = r.string(flex) or ""
        instance = r.string(flex) if v >= 3 else None
        client_id = r.string(flex) or ""
        host = r.string(flex) or ""
        rebalance = r.i32() if v >= 1 else -1
        session = r.i32()
        sub = r.bytes_(flex) or b""
        assignment = r.bytes_(flex) or b""
        r.skip_tags(flex)
        members.append(MemberMetadata(member_id, instance, client_id, host, rebalance if v >= 1 else session,
                                      session, sub, assignment))
    r.skip_tags(flex)
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """Decode the value belonging to ``key`` (None for a tombstone)."""
    if data is None:
        return None
    if isinstance(key, OffsetKey):
        return decode_offset_value(data)
    return decode_group_value(data)
