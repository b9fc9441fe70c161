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

Laid out as :mod:`.modern_records` describes (non-flexible keys; values int16 version 0
then the flexible encoding); this module only declares the records. Tagged fields
hightide does not model (the classic member metadata of a member, per-partition
assignment epochs, assignment timestamps) are skipped on read and not written. A null
value is a tombstone.
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
    Tagged,
    Tuple,
    TopicPartitions,
    schema,
)

__all__ = ["TopicPartitions"]


# -- keys -----------------------------------------------------------------------------------
class ConsumerGroupMetadataKey(GroupRecordKey):
    __slots__ = ()
    VERSION = 3


class ConsumerGroupPartitionMetadataKey(GroupRecordKey):
    __slots__ = ()
    VERSION = 4


class ConsumerGroupMemberMetadataKey(MemberRecordKey):
    __slots__ = ()
    VERSION = 5


class ConsumerGroupTargetAssignmentMetadataKey(GroupRecordKey):
    __slots__ = ()
    VERSION = 6


class ConsumerGroupTargetAssignmentMemberKey(MemberRecordKey):
    __slots__ = ()
    VERSION = 7


class ConsumerGroupCurrentMemberAssignmentKey(MemberRecordKey):
    __slots__ = ()
    VERSION = 8


ConsumerKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
               | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
               | ConsumerGroupCurrentMemberAssignmentKey)

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


ConsumerGroupTargetAssignmentMetadataValue = M.TargetAssignmentMetadataValue
ConsumerGroupTargetAssignmentMemberValue = M.TargetAssignmentMemberValue


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


# -- schemas (Kafka's field order) ----------------------------------------------------------------
_TOPIC_METADATA = schema(TopicMetadata, ("topic_id", UUID), ("topic_name", STRING), ("num_partitions", INT32),
                         ("partition_racks", Array(Tuple(INT32, Array(STRING)))))
_CODEC = M.Codec({
    ConsumerGroupMetadataKey: schema(ConsumerGroupMetadataValue, ("epoch", INT32), tagged=(
        Tagged(0, "metadata_hash", INT64, 0), Tagged(1, "creation_time_ms", INT64, -1))),
    ConsumerGroupPartitionMetadataKey: schema(ConsumerGroupPartitionMetadataValue,
                                              ("topics", Array(_TOPIC_METADATA))),
    ConsumerGroupMemberMetadataKey: schema(
        ConsumerGroupMemberMetadataValue, ("instance_id", NULLABLE_STRING), ("rack_id", NULLABLE_STRING),
        ("client_id", STRING), ("client_host", STRING), ("subscribed_topic_names", Array(STRING)),
        ("subscribed_topic_regex", NULLABLE_STRING), ("rebalance_timeout_ms", INT32),
        ("server_assignor", NULLABLE_STRING)),  # tag 0, ClassicMemberMetadata: not modelled, skipped
    ConsumerGroupTargetAssignmentMetadataKey: M.TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupTargetAssignmentMemberKey: M.TARGET_ASSIGNMENT_MEMBER,
    ConsumerGroupCurrentMemberAssignmentKey: schema(
        ConsumerGroupCurrentMemberAssignmentValue, ("member_epoch", INT32), ("previous_member_epoch", INT32),
        ("state", INT8), ("assigned_partitions", TOPIC_PARTITIONS),
        ("partitions_pending_revocation", TOPIC_PARTITIONS)),
})


# -- encode / decode ------------------------------------------------------------------------------
# Key and value bytes of record versions 3–8 (:class:`.modern_records.Codec`): decode_key
# answers None for any other version; errors are RecordFormatError.
encode_key = _CODEC.encode_key
decode_key = _CODEC.decode_key
encode_value = _CODEC.encode_value
decode_value = _CODEC.decode_value
