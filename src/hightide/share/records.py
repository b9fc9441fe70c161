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

The classes and codecs are generated from the layouts of Kafka's records (:mod:`.records_gen`,
``tools/coordinator_records.json``, ``tools/gen_records.py``).
"""

from __future__ import annotations

import base64
import uuid

from ..group.records import java_abs, java_string_hash
from ..protocol.coordinator_codec import RecordFormatError
from .records_gen import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = ["STATE_TOPIC", "ShareKey", "ShareRecordError", "ShareSnapshotKey", "ShareSnapshotValue", "ShareUpdateKey",
           "ShareUpdateValue", "ShareValue", "coordinator_key", "decode_key", "decode_value", "encode_key",
           "encode_value", "partition_for"]

STATE_TOPIC = "__share_group_state"

ShareRecordError = RecordFormatError
"""A key or value that is not a valid ``__share_group_state`` record."""

ShareKey = ShareSnapshotKey | ShareUpdateKey
ShareValue = ShareSnapshotValue | ShareUpdateValue


def partition_for(key_text: str, num_partitions: int) -> int:
    """The ``__share_group_state`` partition of a share partition, by Kafka's
    ``Utils.abs(hash("group:topicId:partition")) % n`` (the FindCoordinator key of type SHARE)."""
    return java_abs(java_string_hash(key_text)) % num_partitions


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey string ``group:topicId:partition`` (topic id in Kafka's
    url-safe base64 form)."""
    tid = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"{group_id}:{tid}:{partition}"
