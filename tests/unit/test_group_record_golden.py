"""Golden bytes of every ``__consumer_offsets`` record hightide writes or reads (and of
the share coordinator's ``__share_group_state`` records).

Each expected value is assembled here field by field, in the order of Kafka's message
definitions (group-coordinator ``*Key.json`` / ``*Value.json``), with small helpers that
know nothing of hightide's codecs: keys are non-flexible (int16 version, int16-length
strings); KIP-848 and KIP-932 values are int16 version 0 then the flexible encoding
(uvarint-length compact strings and arrays, 16-byte uuids, a tag buffer after every
struct). The records are on disk in users' data directories: a refactor of the codecs
must leave every byte as it is, in both directions.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from hightide.group import consumer_records as CR
from hightide.group import records as R
from hightide.group import share_records as SR
from hightide.group.records import RecordFormatError
from hightide.group.shard import decode_record, encode_record
from hightide.share import records as SS
from hightide.share.types import StateBatch

T1 = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
T2 = uuid.UUID("f0e0d0c0-b0a0-9080-7060-504030201000")


# -- independent byte helpers ----------------------------------------------------------------------
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def string(s: str | None) -> bytes:
    """Non-flexible (int16 length) string; -1 for null."""
    if s is None:
        return i16(-1)
    return i16(len(s.encode())) + s.encode()


def cstring(s: str | None) -> bytes:
    """Compact string: uvarint(length + 1), 0 for null."""
    if s is None:
        return b"\x00"
    return uvarint(len(s.encode()) + 1) + s.encode()


def carray(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"
V0 = i16(0)


def tps(*topics: tuple[uuid.UUID, list[int]]) -> bytes:
    """[]TopicPartitions: topic id, []int32 partitions, tags."""
    return carray([t.bytes + carray([i32(p) for p in parts]) + NO_TAGS for t, parts in topics])


# -- KIP-848 consumer group records (key versions 3-8) --------------------------------------------
CONSUMER = [
    (CR.ConsumerGroupMetadataKey("grp"), i16(3) + string("grp"),
     CR.ConsumerGroupMetadataValue(7), V0 + i32(7) + NO_TAGS),
    (CR.ConsumerGroupMetadataKey("grp"), i16(3) + string("grp"),
     CR.ConsumerGroupMetadataValue(7, metadata_hash=-2, creation_time_ms=1700000000000),
     V0 + i32(7) + uvarint(2) + uvarint(0) + uvarint(8) + i64(-2) + uvarint(1) + uvarint(8) + i64(1700000000000)),
    (CR.ConsumerGroupMetadataKey("grp"), i16(3) + string("grp"),
     CR.ConsumerGroupMetadataValue(1, creation_time_ms=5),
     V0 + i32(1) + uvarint(1) + uvarint(1) + uvarint(8) + i64(5)),
    (CR.ConsumerGroupPartitionMetadataKey("grp"), i16(4) + string("grp"),
     CR.ConsumerGroupPartitionMetadataValue((CR.TopicMetadata(T1, "orders", 3, ((0, ("r1", "r2")),)),
                                             CR.TopicMetadata(T2, "b", 1))),
     V0 + carray([T1.bytes + cstring("orders") + i32(3)
                  + carray([i32(0) + carray([cstring("r1"), cstring("r2")]) + NO_TAGS]) + NO_TAGS,
                  T2.bytes + cstring("b") + i32(1) + carray([]) + NO_TAGS]) + NO_TAGS),
    (CR.ConsumerGroupMemberMetadataKey("grp", "m-1"), i16(5) + string("grp") + string("m-1"),
     CR.ConsumerGroupMemberMetadataValue("inst", None, "client", "/10.0.0.1", ("a", "b"), "t.*", 30000, None),
     V0 + cstring("inst") + cstring(None) + cstring("client") + cstring("/10.0.0.1")
     + carray([cstring("a"), cstring("b")]) + cstring("t.*") + i32(30000) + cstring(None) + NO_TAGS),
    (CR.ConsumerGroupTargetAssignmentMetadataKey("grp"), i16(6) + string("grp"),
     CR.ConsumerGroupTargetAssignmentMetadataValue(9), V0 + i32(9) + NO_TAGS),
    (CR.ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"), i16(7) + string("grp") + string("m-1"),
     CR.ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 2)), (T2, (1,)))),
     V0 + tps((T1, [0, 2]), (T2, [1])) + NO_TAGS),
    (CR.ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"), i16(8) + string("grp") + string("m-1"),
     CR.ConsumerGroupCurrentMemberAssignmentValue(4, 3, 1, ((T1, (0,)),), ((T2, (5, 6)),)),
     V0 + i32(4) + i32(3) + i8(1) + tps((T1, [0])) + tps((T2, [5, 6])) + NO_TAGS),
]

# -- KIP-932 share group records (key versions 10-15) ---------------------------------------------
SHARE = [
    (SR.ShareGroupMemberMetadataKey("sg", "m"), i16(10) + string("sg") + string("m"),
     SR.ShareGroupMemberMetadataValue(None, "cl", "/127.0.0.1", ("t1",)),
     V0 + cstring(None) + cstring("cl") + cstring("/127.0.0.1") + carray([cstring("t1")]) + NO_TAGS),
    (SR.ShareGroupMetadataKey("sg"), i16(11) + string("sg"),
     SR.ShareGroupMetadataValue(3, -8), V0 + i32(3) + i64(-8) + NO_TAGS),
    (SR.ShareGroupTargetAssignmentMetadataKey("sg"), i16(12) + string("sg"),
     SR.ShareGroupTargetAssignmentMetadataValue(3), V0 + i32(3) + NO_TAGS),
    (SR.ShareGroupTargetAssignmentMemberKey("sg", "m"), i16(13) + string("sg") + string("m"),
     SR.ShareGroupTargetAssignmentMemberValue(((T2, (0, 1, 2)),)), V0 + tps((T2, [0, 1, 2])) + NO_TAGS),
    (SR.ShareGroupCurrentMemberAssignmentKey("sg", "m"), i16(14) + string("sg") + string("m"),
     SR.ShareGroupCurrentMemberAssignmentValue(3, 2, 0, ((T1, (1,)),)),
     V0 + i32(3) + i32(2) + i8(0) + tps((T1, [1])) + NO_TAGS),
    (SR.ShareGroupStatePartitionMetadataKey("sg"), i16(15) + string("sg"),
     SR.ShareGroupStatePartitionMetadataValue((SR.TopicPartitionsInfo(T1, "a", (0, 1)),),
                                              (SR.TopicPartitionsInfo(T2, "b", (2,)),),
                                              (SR.TopicInfo(T1, "old"),)),
     V0 + carray([T1.bytes + cstring("a") + carray([i32(0), i32(1)]) + NO_TAGS])
     + carray([T2.bytes + cstring("b") + carray([i32(2)]) + NO_TAGS])
     + carray([T1.bytes + cstring("old") + NO_TAGS]) + NO_TAGS),
]

# -- offsets and classic groups (key versions 1 and 2; non-flexible values) -----------------------
MEMBER = R.MemberMetadata("m-1", None, "cl", "/h", 300000, 45000, b"\x00\x01sub", b"asg")
CLASSIC = [
    (R.OffsetKey("grp", "orders", 2), i16(1) + string("grp") + string("orders") + i32(2),
     R.OffsetValue(42, 5, "meta", 1700000000000),
     i16(3) + i64(42) + i32(5) + string("meta") + i64(1700000000000)),
    (R.OffsetKey("grp", "orders", 2), i16(1) + string("grp") + string("orders") + i32(2),
     R.OffsetValue(42, -1, "", 10, expire_timestamp=20),
     i16(1) + i64(42) + string("") + i64(10) + i64(20)),
    (R.GroupKey("grp"), i16(2) + string("grp"),
     R.GroupValue("consumer", 4, "range", "m-1", 99, (MEMBER,)),
     i16(3) + string("consumer") + i32(4) + string("range") + string("m-1") + i64(99) + i32(1)
     + string("m-1") + string(None) + string("cl") + string("/h") + i32(300000) + i32(45000)
     + i32(5) + b"\x00\x01sub" + i32(3) + b"asg"),
]

ALL = CONSUMER + SHARE + CLASSIC
IDS = [f"{type(v).__name__}-{i}" for i, (_, _, v, _) in enumerate(ALL)]


@pytest.mark.parametrize(("key", "key_bytes", "value", "value_bytes"), ALL, ids=IDS)
def test_encode_is_byte_identical(key, key_bytes: bytes, value, value_bytes: bytes) -> None:
    assert encode_record(key, value) == (key_bytes, value_bytes)
    assert encode_record(key, None) == (key_bytes, None)  # the tombstone


@pytest.mark.parametrize(("key", "key_bytes", "value", "value_bytes"), ALL, ids=IDS)
def test_decode_of_golden_bytes(key, key_bytes: bytes, value, value_bytes: bytes) -> None:
    assert decode_record(key_bytes, value_bytes) == (key, value)
    assert decode_record(key_bytes, None) == (key, None)


EMPTY_TOP_TAGS = [row for row in CONSUMER + SHARE if row[3].endswith(NO_TAGS)
                  and not (isinstance(row[2], CR.ConsumerGroupMetadataValue)
                           and (row[2].metadata_hash, row[2].creation_time_ms) != (0, -1))]


@pytest.mark.parametrize(("key", "key_bytes", "value", "value_bytes"), EMPTY_TOP_TAGS,
                         ids=[type(r[2]).__name__ for r in EMPTY_TOP_TAGS])
def test_unknown_tagged_field_is_skipped(key, key_bytes: bytes, value, value_bytes: bytes) -> None:
    """A newer Kafka may add tagged fields (tag 0 of member metadata: the classic member
    metadata; tag 7 here): they are read past. Replaces the top-level tag buffer."""
    extended = value_bytes[:-1] + uvarint(1) + uvarint(7) + uvarint(3) + b"xyz"
    assert decode_record(key_bytes, extended) == (key, value)


@pytest.mark.parametrize(("key", "key_bytes", "value", "value_bytes"), CONSUMER + SHARE,
                         ids=IDS[:len(CONSUMER + SHARE)])
def test_malformed_values_raise(key, key_bytes: bytes, value, value_bytes: bytes) -> None:
    # bytes after the known fields (a newer writer's) are ignored, as Kafka's readers do
    assert decode_record(key_bytes, value_bytes + b"\x00") == decode_record(key_bytes, value_bytes)
    with pytest.raises(RecordFormatError):
        decode_record(key_bytes, value_bytes[:-2])  # truncated
    with pytest.raises(RecordFormatError):
        decode_record(key_bytes, i16(1) + value_bytes[2:])  # unknown value version


def test_group_metadata_hash_tag_must_be_eight_bytes() -> None:
    with pytest.raises(RecordFormatError):
        decode_record(i16(3) + string("g"), V0 + i32(1) + uvarint(1) + uvarint(0) + uvarint(4) + i32(1))


def test_record_types_hightide_does_not_interpret_decode_to_none() -> None:
    for version in (9, 16, 17, 100):  # old share partition metadata, streams groups, ...
        assert decode_record(i16(version) + string("g"), V0) is None


# -- __share_group_state records (share coordinator; record types 0 and 1) ------------------------
def batch(first: int, last: int, state: int, count: int) -> bytes:
    return i64(first) + i64(last) + i8(state) + i16(count) + NO_TAGS


SHARE_STATE = [
    (SS.ShareSnapshotKey("sg", T1, 3), i16(0) + string("sg") + T1.bytes + i32(3),
     SS.ShareSnapshotValue(1, 2, 5, 100, 1000, 2000, (StateBatch(100, 104, 2, 1), StateBatch(105, 105, 0, 3)), 5),
     V0 + i32(1) + i32(2) + i32(5) + i64(100) + i64(1000) + i64(2000)
     + carray([batch(100, 104, 2, 1), batch(105, 105, 0, 3)]) + uvarint(1) + uvarint(0) + uvarint(4) + i32(5)),
    (SS.ShareSnapshotKey("sg", T1, 3), i16(0) + string("sg") + T1.bytes + i32(3),
     SS.ShareSnapshotValue(0, 0, -1, -1, 7, 7), V0 + i32(0) + i32(0) + i32(-1) + i64(-1) + i64(7) + i64(7)
     + carray([]) + NO_TAGS),
    (SS.ShareUpdateKey("sg", T2, 0), i16(1) + string("sg") + T2.bytes + i32(0),
     SS.ShareUpdateValue(1, 5, 120, (StateBatch(120, 130, 4, 2),)),
     V0 + i32(1) + i32(5) + i64(120) + carray([batch(120, 130, 4, 2)]) + NO_TAGS),
]


@pytest.mark.parametrize(("key", "key_bytes", "value", "value_bytes"), SHARE_STATE,
                         ids=[f"{type(r[2]).__name__}-{i}" for i, r in enumerate(SHARE_STATE)])
def test_share_state_records_are_byte_identical(key, key_bytes: bytes, value, value_bytes: bytes) -> None:
    assert (SS.encode_key(key), SS.encode_value(value)) == (key_bytes, value_bytes)
    decoded_key = SS.decode_key(key_bytes)
    assert decoded_key == key and type(decoded_key) is type(key)
    assert SS.decode_value(key, value_bytes) == value
    assert SS.encode_value(None) is None and SS.decode_value(key, None) is None
