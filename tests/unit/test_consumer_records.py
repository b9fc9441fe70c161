"""KIP-848 ``__consumer_offsets`` records: exact bytes and hypothesis round trips."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hightide.group import consumer_records as CR
from hightide.group.records import OffsetKey, RecordFormatError
from hightide.group.records import encode_key as encode_offset_key

TID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")

strings = st.text(max_size=20)
opt_strings = st.none() | strings
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.uuids()
tps = st.lists(st.tuples(uuids, st.lists(i32, max_size=5).map(tuple)), max_size=4).map(tuple)

keys = st.one_of(
    st.builds(CR.ConsumerGroupMetadataKey, strings),
    st.builds(CR.ConsumerGroupPartitionMetadataKey, strings),
    st.builds(CR.ConsumerGroupMemberMetadataKey, strings, strings),
    st.builds(CR.ConsumerGroupTargetAssignmentMetadataKey, strings),
    st.builds(CR.ConsumerGroupTargetAssignmentMemberKey, strings, strings),
    st.builds(CR.ConsumerGroupCurrentMemberAssignmentKey, strings, strings),
)

topic_metadata = st.builds(CR.TopicMetadata, uuids, strings, i32,
                           st.lists(st.tuples(i32, st.lists(strings, max_size=3).map(tuple)), max_size=3).map(tuple))

values = {
    CR.ConsumerGroupMetadataKey: st.builds(CR.ConsumerGroupMetadataValue, i32, i64, i64),
    CR.ConsumerGroupPartitionMetadataKey: st.builds(CR.ConsumerGroupPartitionMetadataValue,
                                                    st.lists(topic_metadata, max_size=3).map(tuple)),
    CR.ConsumerGroupMemberMetadataKey: st.builds(CR.ConsumerGroupMemberMetadataValue, opt_strings, opt_strings,
                                                 strings, strings, st.lists(strings, max_size=4).map(tuple),
                                                 opt_strings, i32, opt_strings),
    CR.ConsumerGroupTargetAssignmentMetadataKey: st.builds(CR.ConsumerGroupTargetAssignmentMetadataValue, i32),
    CR.ConsumerGroupTargetAssignmentMemberKey: st.builds(CR.ConsumerGroupTargetAssignmentMemberValue, tps),
    CR.ConsumerGroupCurrentMemberAssignmentKey: st.builds(CR.ConsumerGroupCurrentMemberAssignmentValue, i32, i32,
                                                          st.integers(-128, 127), tps, tps),
}


@given(keys)
def test_key_round_trip(key: CR.ConsumerKey) -> None:
    assert CR.decode_key(CR.encode_key(key)) == key


@given(st.data())
def test_value_round_trip(data: st.DataObject) -> None:
    key = data.draw(keys)
    value = data.draw(values[type(key)])
    assert CR.decode_value(key, CR.encode_value(value)) == value
    assert CR.decode_value(key, None) is None and CR.encode_value(None) is None


def test_key_bytes_match_kafka() -> None:
    assert CR.encode_key(CR.ConsumerGroupMetadataKey("g")) == b"\x00\x03\x00\x01g"
    assert CR.encode_key(CR.ConsumerGroupCurrentMemberAssignmentKey("g", "m")) == b"\x00\x08\x00\x01g\x00\x01m"
    assert CR.encode_key(CR.ConsumerGroupTargetAssignmentMemberKey("g", "m"))[:2] == b"\x00\x07"


def test_value_bytes_match_kafka() -> None:
    # version 0, epoch, empty tag buffer
    assert CR.encode_value(CR.ConsumerGroupMetadataValue(5)) == b"\x00\x00\x00\x00\x00\x05\x00"
    # epoch 2, previous 1, state 1, assigned [(TID, [0, 3])], pending [] ; tags
    v = CR.ConsumerGroupCurrentMemberAssignmentValue(2, 1, 1, ((TID, (0, 3)),), ())
    expected = (b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01" + b"\x01"
                + b"\x02" + TID.bytes + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03" + b"\x00"
                + b"\x01" + b"\x00")
    assert CR.encode_value(v) == expected
    member = CR.ConsumerGroupMemberMetadataValue(None, "r", "c", "h", ("t",), None, 300, "uniform")
    assert CR.encode_value(member) == (b"\x00\x00" + b"\x00" + b"\x02r" + b"\x02c" + b"\x02h" + b"\x02" + b"\x02t"
                                       + b"\x00" + b"\x00\x00\x01\x2c" + b"\x08uniform" + b"\x00")


def test_tagged_fields_are_read_and_unknown_ones_skipped() -> None:
    v = CR.ConsumerGroupMetadataValue(7, metadata_hash=42, creation_time_ms=1000)
    data = CR.encode_value(v)
    assert data is not None and data[6:9] == b"\x02\x00\x08"  # two tags; tag 0 has 8 bytes
    assert CR.decode_value(CR.ConsumerGroupMetadataKey("g"), data) == v
    # a member written by Kafka with ClassicMemberMetadata (tag 0) and an unknown tag 5
    member = CR.encode_value(CR.ConsumerGroupMemberMetadataValue("i", None, "c", "h", (), "a.*", -1, None))
    assert member is not None
    with_tags = member[:-1] + b"\x02" + b"\x00\x03\x01\x00\x00" + b"\x05\x01\xff"
    decoded = CR.decode_value(CR.ConsumerGroupMemberMetadataKey("g", "m"), with_tags)
    assert isinstance(decoded, CR.ConsumerGroupMemberMetadataValue) and decoded.subscribed_topic_regex == "a.*"


def test_other_key_versions_are_not_ours() -> None:
    assert CR.decode_key(encode_offset_key(OffsetKey("g", "t", 0))) is None
    assert CR.decode_key(b"\x00\x02\x00\x01g") is None
    assert CR.decode_key(b"\x00\x09\x00\x01g") is None


def test_bad_values_raise() -> None:
    key = CR.ConsumerGroupMetadataKey("g")
    with pytest.raises(RecordFormatError):
        CR.decode_value(key, b"\x00\x01\x00\x00\x00\x05\x00")  # unknown version
    with pytest.raises(RecordFormatError):
        CR.decode_value(key, b"\x00\x00\x00\x00")  # truncated
    # bytes after the known fields (a newer writer's) are ignored, as Kafka does
    assert CR.decode_value(key, b"\x00\x00\x00\x00\x00\x05\x00\x00") == CR.decode_value(key, b"\x00\x00\x00\x00\x00\x05\x00")
