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

Keys are non-flexible (int16 version, group id, member id); values are int16 version 0
then the flexible encoding. The classes and codecs are generated from Kafka's record
definitions (:mod:`.records_gen`); tagged fields hightide does not model (the classic
member metadata of a member, and any a newer Kafka adds) are skipped on read and not
written. A null value is a tombstone. Errors are :class:`~.records.RecordFormatError`.
"""

from __future__ import annotations

import uuid

from . import records_gen as G
from .records_gen import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicMetadata,
)

__all__ = ["CONSUMER_KEY_TYPES", "ConsumerGroupCurrentMemberAssignmentKey", "ConsumerGroupCurrentMemberAssignmentValue",
           "ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue", "ConsumerGroupMetadataKey",
           "ConsumerGroupMetadataValue", "ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue",
           "ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue",
           "ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMetadataValue", "ConsumerKey",
           "ConsumerValue", "TargetAssignmentMemberValue", "TargetAssignmentMetadataValue", "TopicMetadata",
           "TopicPartitions", "decode_key", "decode_value", "encode_key", "encode_value"]

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""An assignment on the wire: ``((topic_id, (partition, ...)), ...)``."""

# the target assignment records of consumer and share groups have one layout, one class
ConsumerGroupTargetAssignmentMetadataValue = TargetAssignmentMetadataValue
ConsumerGroupTargetAssignmentMemberValue = TargetAssignmentMemberValue

ConsumerKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
               | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
               | ConsumerGroupCurrentMemberAssignmentKey)
CONSUMER_KEY_TYPES = (ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupMemberMetadataKey,
                      ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                      ConsumerGroupCurrentMemberAssignmentKey)
ConsumerValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue | ConsumerGroupMemberMetadataValue
                 | TargetAssignmentMetadataValue | TargetAssignmentMemberValue
                 | ConsumerGroupCurrentMemberAssignmentValue)

encode_key = G.encode_key
encode_value = G.encode_value
decode_value = G.decode_value


def decode_key(data: bytes) -> ConsumerKey | None:
    """The key of a consumer group record (key versions 3–8); None for any other record
    type. Raises RecordFormatError."""
    key = G.decode_key(data)
    return key if isinstance(key, CONSUMER_KEY_TYPES) else None
