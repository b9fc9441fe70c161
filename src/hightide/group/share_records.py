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
Laid out exactly as the consumer group records (:mod:`.consumer_records`); the classes
and codecs are generated from Kafka's record definitions (:mod:`.records_gen`). A null
value is a tombstone.
"""

from __future__ import annotations

from . import records_gen as G
from .records_gen import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicInfo,
    TopicPartitionsInfo,
)

__all__ = ["SHARE_KEY_TYPES", "ShareGroupCurrentMemberAssignmentKey", "ShareGroupCurrentMemberAssignmentValue",
           "ShareGroupMemberMetadataKey", "ShareGroupMemberMetadataValue", "ShareGroupMetadataKey",
           "ShareGroupMetadataValue", "ShareGroupStatePartitionMetadataKey", "ShareGroupStatePartitionMetadataValue",
           "ShareGroupTargetAssignmentMemberKey", "ShareGroupTargetAssignmentMemberValue",
           "ShareGroupTargetAssignmentMetadataKey", "ShareGroupTargetAssignmentMetadataValue", "ShareKey", "ShareValue",
           "TopicInfo", "TopicPartitionsInfo", "decode_key", "decode_value", "encode_key", "encode_value"]

ShareGroupTargetAssignmentMetadataValue = TargetAssignmentMetadataValue
ShareGroupTargetAssignmentMemberValue = TargetAssignmentMemberValue

ShareKey = (ShareGroupMemberMetadataKey | ShareGroupMetadataKey | ShareGroupTargetAssignmentMetadataKey
            | ShareGroupTargetAssignmentMemberKey | ShareGroupCurrentMemberAssignmentKey
            | ShareGroupStatePartitionMetadataKey)
SHARE_KEY_TYPES = (ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
                   ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey,
                   ShareGroupStatePartitionMetadataKey)
ShareValue = (ShareGroupMemberMetadataValue | ShareGroupMetadataValue | TargetAssignmentMetadataValue
              | TargetAssignmentMemberValue | ShareGroupCurrentMemberAssignmentValue
              | ShareGroupStatePartitionMetadataValue)

encode_key = G.encode_key
encode_value = G.encode_value
decode_value = G.decode_value


def decode_key(data: bytes) -> ShareKey | None:
    """The key of a share group record (key versions 10–15); None for any other record
    type. Raises RecordFormatError."""
    key = G.decode_key(data)
    return key if isinstance(key, SHARE_KEY_TYPES) else None
