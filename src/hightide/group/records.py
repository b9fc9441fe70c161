"""Records of the ``__consumer_offsets`` topic, byte-compatible with Apache Kafka.

Keys start with an int16 version that says what the record is:

* 0, 1 — offset commit: ``{group, topic, partition}``; value versions 0–4
  (hightide writes v3: offset, leaderEpoch, metadata, commitTimestamp; v1 when an
  expire timestamp is set, as Kafka does);
* 2 — classic group metadata: ``{group}``; value versions 0–4 (hightide writes v3);
* 3–8, 10–15 — KIP-848 consumer group and KIP-932 share group records
  (:mod:`.consumer_records`, :mod:`.share_records`).

The codecs of every record type are generated from the layouts of Kafka's records
(:mod:`.records_gen`, ``tools/coordinator_records.json``, ``tools/gen_records.py``); this module adds hightide's choices of
version and the OffsetCommit fast path. A record with a null value is a tombstone
(offset deleted / group deleted). Tools that read ``__consumer_offsets`` (Kafka's
``GroupMetadataMessageFormatter``, hightide's Spark source) decode these exactly. Groups
map to partitions with Java's ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..protocol.coordinator_codec import RecordFormatError
from . import records_gen as G
from .records_gen import GroupKey, GroupValue, MemberMetadata, OffsetKey, OffsetValue, decode_key, decode_value

__all__ = ["OFFSETS_TOPIC", "GroupKey", "GroupValue", "Key", "MemberMetadata", "OffsetKey", "OffsetValue",
           "RecordFormatError", "Value", "decode_group_value", "decode_key", "decode_offset_value", "decode_value",
           "encode_key", "encode_offset_records", "encode_value", "java_abs", "java_string_hash", "partition_for"]

OFFSETS_TOPIC = "__consumer_offsets"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


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
# Offset keys and values are NamedTuples (generated): immutable like the frozen dataclasses
# of the other records, and built per committed partition, where a NamedTuple costs half
# of a frozen dataclass's ``__init__`` (a fifth built with ``tuple.__new__``, as the commit
# path does). No other record key is a tuple, so no two keys of different types can
# compare equal.
Key = OffsetKey | GroupKey
Value = OffsetValue | GroupValue

decode_offset_value = G.decode_offset_value
decode_group_value = G.decode_group_value
encode_key = G.encode_key
"""Key bytes of any ``__consumer_offsets`` record (offset keys as version 1)."""


def encode_value(value: G.Value | None) -> bytes | None:
    """Value bytes of any ``__consumer_offsets`` record (None for a tombstone): offsets as
    v3 (v1 when an expire timestamp is set, as Kafka does), group metadata as v3."""
    if type(value) is OffsetValue and value.expire_timestamp >= 0:
        return G.encode_offset_value(value, 1)
    return G.encode_value(value)


_KEY_HEAD = struct.Struct(">hh")  # version 1, group length
_OFFSET_V3_HEAD = struct.Struct(">hqih")  # version 3, offset, leader epoch, metadata length


def encode_offset_records(records: Sequence[tuple[OffsetKey, OffsetValue | None]]
                          ) -> list[tuple[bytes | None, bytes | None]]:
    """:func:`encode_key` and :func:`encode_value` of offset records, the same bytes (a
    unit test compares them): the key's group and topic are encoded once per run of
    records that share them (an OffsetCommit's), and so are a value's metadata and commit
    timestamp when they repeat the record before's. Hand-written for the commit path: a
    50-partition commit in about half the generated encoders' time."""
    out: list[tuple[bytes | None, bytes | None]] = []
    group = topic = metadata = None
    timestamp = -2  # (no timestamp is -2: the first value encodes its own)
    head = meta = tail = b""
    i32, v3 = _I32.pack, _OFFSET_V3_HEAD.pack
    for key, value in records:
        if key.group != group or key.topic != topic:
            group, topic = key.group, key.topic
            g, t = group.encode(), topic.encode()
            head = _KEY_HEAD.pack(1, len(g)) + g + _I16.pack(len(t)) + t
        if value is None:
            out.append((head + i32(key.partition), None))
        elif value.expire_timestamp >= 0:
            out.append((head + i32(key.partition), encode_value(value)))
        else:
            if value.metadata != metadata or value.commit_timestamp != timestamp:
                metadata, timestamp = value.metadata, value.commit_timestamp
                meta = metadata.encode()
                tail = meta + _I64.pack(timestamp)
            out.append((head + i32(key.partition), v3(3, value.offset, value.leader_epoch, len(meta)) + tail))
    return out
