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
Laid out exactly as the consumer group records (:mod:`.modern_records` describes the
encoding); this module only declares the records. A null value is a tombstone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from . import modern_records as M
from .modern_records import (
    INT8,
    INT32,
    INT64,
    NULLABLE_STRING,
    STRING,
    TOPIC_PARTITIONS,
    UUID,
    Array,
    GroupRecordKey,
    MemberRecordKey,
    TopicPartitions,
    schema,
)


# -- keys -----------------------------------------------------------------------------------
class ShareGroupMemberMetadataKey(MemberRecordKey):
    __slots__ = ()
    VERSION = 10


class ShareGroupMetadataKey(GroupRecordKey):
    __slots__ = ()
    VERSION = 11


class ShareGroupTargetAssignmentMetadataKey(GroupRecordKey):
    __slots__ = ()
    VERSION = 12


class ShareGroupTargetAssignmentMemberKey(MemberRecordKey):
    __slots__ = ()
    VERSION = 13


class ShareGroupCurrentMemberAssignmentKey(MemberRecordKey):
    __slots__ = ()
    VERSION = 14


class ShareGroupStatePartitionMetadataKey(GroupRecordKey):
    __slots__ = ()
    VERSION = 15


ShareKey = (ShareGroupMemberMetadataKey | ShareGroupMetadataKey | ShareGroupTargetAssignmentMetadataKey
            | ShareGroupTargetAssignmentMemberKey | ShareGroupCurrentMemberAssignmentKey
            | ShareGroupStatePartitionMetadataKey)
SHARE_KEY_TYPES = (ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
                   ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey,
                   ShareGroupStatePartitionMetadataKey)


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


ShareGroupTargetAssignmentMetadataValue = M.TargetAssignmentMetadataValue
ShareGroupTargetAssignmentMemberValue = M.TargetAssignmentMemberValue


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


# -- schemas (Kafka's field order) ----------------------------------------------------------------
_PARTITIONS_INFO = Array(schema(TopicPartitionsInfo, ("topic_id", UUID), ("topic_name", STRING),
                                ("partitions", Array(INT32))))
_CODEC = M.Codec({
    ShareGroupMemberMetadataKey: schema(
        ShareGroupMemberMetadataValue, ("rack_id", NULLABLE_STRING), ("client_id", STRING),
        ("client_host", STRING), ("subscribed_topic_names", Array(STRING))),
    ShareGroupMetadataKey: schema(ShareGroupMetadataValue, ("epoch", INT32), ("metadata_hash", INT64)),
    ShareGroupTargetAssignmentMetadataKey: M.TARGET_ASSIGNMENT_METADATA,
    ShareGroupTargetAssignmentMemberKey: M.TARGET_ASSIGNMENT_MEMBER,
    ShareGroupCurrentMemberAssignmentKey: schema(
        ShareGroupCurrentMemberAssignmentValue, ("member_epoch", INT32), ("previous_member_epoch", INT32),
        ("state", INT8), ("assigned_partitions", TOPIC_PARTITIONS)),
    ShareGroupStatePartitionMetadataKey: schema(
        ShareGroupStatePartitionMetadataValue, ("initializing_topics", _PARTITIONS_INFO),
        ("initialized_topics", _PARTITIONS_INFO),
        ("deleting_topics", Array(schema(TopicInfo, ("topic_id", UUID), ("topic_name", STRING))))),
})


# -- encode / decode ------------------------------------------------------------------------------
# Key and value bytes of record versions 10–15 (:class:`.modern_records.Codec`): decode_key
# answers None for any other version; errors are RecordFormatError.
encode_key = _CODEC.encode_key
decode_key = _CODEC.decode_key
encode_value = _CODEC.encode_value
decode_value = _CODEC.decode_value
