"""Share group (KIP-932) records of ``__consumer_offsets``, byte-compatible with Kafka 4.1+.

Key versions (the int16 that starts every key; Kafka's ``apiKey`` of the record) and
their record types:

* 10 — member metadata: ``{group, member}`` → rack id, client id, client host,
  subscribed topic names;
* 11 — group metadata: ``{group}`` → group epoch and the metadata hash of the
  subscribed topics (a plain field here, not tagged as in the consumer group record);
* 12 — target assignment metadata: ``{group}`` → the target assignment epoch;
* 13 — target assignment of a member: ``{group, member}`` → partitions;
* 14 — current member assignment: ``{group, member}`` → member epoch, previous epoch,
  state and assigned partitions (no revocation: share partitions are shared);
* 15 — state partition metadata: ``{group}`` → topics whose share-group state is
  initializing, initialized, or being deleted.

Version 9 (ShareGroupPartitionMetadata, written only by pre-4.1 previews) is skipped.
Keys are non-flexible; values are int16 version 0 then the flexible encoding, exactly
as :mod:`.consumer_records` (whose writer and reader this module reuses). A null value
is a tombstone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .consumer_records import _FR, _FW, TopicPartitions, _end, decode_group_key, encode_group_key
from .records import RecordFormatError


# -- keys -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str
    VERSION = 10


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str
    VERSION = 11


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str
    VERSION = 12


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str
    VERSION = 13


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str
    VERSION = 14


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str
    VERSION = 15


ShareKey = (ShareGroupMemberMetadataKey | ShareGroupMetadataKey | ShareGroupTargetAssignmentMetadataKey
            | ShareGroupTargetAssignmentMemberKey | ShareGroupCurrentMemberAssignmentKey
            | ShareGroupStatePartitionMetadataKey)
SHARE_KEY_TYPES = (ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
                   ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey,
                   ShareGroupStatePartitionMetadataKey)

_GROUP_KEYS = {11: ShareGroupMetadataKey, 12: ShareGroupTargetAssignmentMetadataKey,
               15: ShareGroupStatePartitionMetadataKey}
_MEMBER_KEYS = {10: ShareGroupMemberMetadataKey, 13: ShareGroupTargetAssignmentMemberKey,
                14: ShareGroupCurrentMemberAssignmentKey}


# -- values ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions = ()


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState (share members are always STABLE = 0)
    assigned_partitions: TopicPartitions = ()


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


ShareValue = (ShareGroupMemberMetadataValue | ShareGroupMetadataValue | ShareGroupTargetAssignmentMetadataValue
              | ShareGroupTargetAssignmentMemberValue | ShareGroupCurrentMemberAssignmentValue
              | ShareGroupStatePartitionMetadataValue)


# -- keys: encode / decode ----------------------------------------------------------------------
def encode_key(key: ShareKey) -> bytes:
    """The key bytes: int16 version then the group id (and member id for 10, 13, 14)."""
    return encode_group_key(key)


def decode_key(data: bytes) -> ShareKey | None:
    """Decode a key of versions 10–15; None for any other version. Raises
    RecordFormatError if truncated."""
    return decode_group_key(data, _GROUP_KEYS, _MEMBER_KEYS)


# -- values: encode ------------------------------------------------------------------------------
def _enc_partitions_info(w: _FW, topics: tuple[TopicPartitionsInfo, ...]) -> None:
    w.alen(len(topics))
    for t in topics:
        w.uuid(t.topic_id).cstring(t.topic_name).alen(len(t.partitions))
        for p in t.partitions:
            w.i32(p)
        w.tags()


def _enc_value(value: ShareValue, w: _FW) -> None:
    match value:
        case ShareGroupMemberMetadataValue():
            w.cstring(value.rack_id).cstring(value.client_id).cstring(value.client_host)
            w.alen(len(value.subscribed_topic_names))
            for name in value.subscribed_topic_names:
                w.cstring(name)
        case ShareGroupMetadataValue():
            w.i32(value.epoch).i64(value.metadata_hash)
        case ShareGroupTargetAssignmentMetadataValue():
            w.i32(value.assignment_epoch)
        case ShareGroupTargetAssignmentMemberValue():
            w.topic_partitions(value.topic_partitions)
        case ShareGroupCurrentMemberAssignmentValue():
            w.i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
            w.topic_partitions(value.assigned_partitions)
        case ShareGroupStatePartitionMetadataValue():
            _enc_partitions_info(w, value.initializing_topics)
            _enc_partitions_info(w, value.initialized_topics)
            w.alen(len(value.deleting_topics))
            for t in value.deleting_topics:
                w.uuid(t.topic_id).cstring(t.topic_name).tags()
    w.tags()


def encode_value(value: ShareValue | None) -> bytes | None:
    """The value bytes (version 0, flexible); None for a tombstone."""
    if value is None:
        return None
    w = _FW().i16(0)
    _enc_value(value, w)
    return bytes(w.b)


# -- values: decode ------------------------------------------------------------------------------
def _dec_partitions_info(r: _FR) -> tuple[TopicPartitionsInfo, ...]:
    out = []
    for _ in range(r.count()):
        topic_id, name = r.uuid(), r.req_string()
        parts = tuple(r.i32() for _ in range(r.count()))
        r.tags()
        out.append(TopicPartitionsInfo(topic_id, name, parts))
    return tuple(out)


def _dec_value(key: ShareKey, r: _FR) -> ShareValue:
    match key:
        case ShareGroupMemberMetadataKey():
            rack, client, host = r.cstring(), r.req_string(), r.req_string()
            return ShareGroupMemberMetadataValue(rack, client, host, tuple(r.req_string() for _ in range(r.count())))
        case ShareGroupMetadataKey():
            return ShareGroupMetadataValue(r.i32(), r.i64())
        case ShareGroupTargetAssignmentMetadataKey():
            return ShareGroupTargetAssignmentMetadataValue(r.i32())
        case ShareGroupTargetAssignmentMemberKey():
            return ShareGroupTargetAssignmentMemberValue(r.topic_partitions())
        case ShareGroupCurrentMemberAssignmentKey():
            epoch, previous, state = r.i32(), r.i32(), r.i8()
            return ShareGroupCurrentMemberAssignmentValue(epoch, previous, state, r.topic_partitions())
        case _:
            initializing, initialized = _dec_partitions_info(r), _dec_partitions_info(r)
            deleting = []
            for _ in range(r.count()):
                deleting.append(TopicInfo(r.uuid(), r.req_string()))
                r.tags()
            return ShareGroupStatePartitionMetadataValue(initializing, initialized, tuple(deleting))


def decode_value(key: ShareKey, data: bytes | None) -> ShareValue | None:
    """Decode the value belonging to ``key`` (None for a tombstone). Raises
    RecordFormatError for an unknown value version, truncation or trailing bytes."""
    if data is None:
        return None
    r = _FR(data)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
    value = _dec_value(key, r)
    r.tags()
    _end(r)
    return value
