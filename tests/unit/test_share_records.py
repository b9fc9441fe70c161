"""Share group ``__consumer_offsets`` records (key versions 10–15): exact bytes as Kafka's
message definitions lay them out, and hypothesis round trips."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hightide.group import consumer_records as CR
from hightide.group import share_records as SR
from hightide.group.records import RecordFormatError

TID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")

strings = st.text(max_size=20)
opt_strings = st.none() | strings
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
tps = st.lists(st.tuples(st.uuids(), st.lists(i32, max_size=5).map(tuple)), max_size=4).map(tuple)
infos = st.lists(st.builds(SR.TopicPartitionsInfo, st.uuids(), strings, st.lists(i32, max_size=4).map(tuple)),
                 max_size=3).map(tuple)

keys = st.one_of(
    st.builds(SR.ShareGroupMemberMetadataKey, strings, strings),
    st.builds(SR.ShareGroupMetadataKey, strings),
    st.builds(SR.ShareGroupTargetAssignmentMetadataKey, strings),
    st.builds(SR.ShareGroupTargetAssignmentMemberKey, strings, strings),
    st.builds(SR.ShareGroupCurrentMemberAssignmentKey, strings, strings),
    st.builds(SR.ShareGroupStatePartitionMetadataKey, strings),
)

values = {
    SR.ShareGroupMemberMetadataKey: st.builds(SR.ShareGroupMemberMetadataValue, opt_strings, strings, strings,
                                              st.lists(strings, max_size=4).map(tuple)),
    SR.ShareGroupMetadataKey: st.builds(SR.ShareGroupMetadataValue, i32, i64),
    SR.ShareGroupTargetAssignmentMetadataKey: st.builds(SR.ShareGroupTargetAssignmentMetadataValue, i32),
    SR.ShareGroupTargetAssignmentMemberKey: st.builds(SR.ShareGroupTargetAssignmentMemberValue, tps),
    SR.ShareGroupCurrentMemberAssignmentKey: st.builds(SR.ShareGroupCurrentMemberAssignmentValue, i32, i32,
                                                       st.integers(-128, 127), tps),
    SR.ShareGroupStatePartitionMetadataKey: st.builds(
        SR.ShareGroupStatePartitionMetadataValue, infos, infos,
        st.lists(st.builds(SR.TopicInfo, st.uuids(), strings), max_size=3).map(tuple)),
}


@given(keys)
def test_key_round_trip(key) -> None:
    assert SR.decode_key(SR.encode_key(key)) == key
    assert CR.decode_key(SR.encode_key(key)) is None  # never mistaken for a consumer group record


@given(st.data())
def test_value_round_trip(data: st.DataObject) -> None:
    key = data.draw(keys)
    value = data.draw(values[type(key)])
    assert SR.decode_value(key, SR.encode_value(value)) == value
    assert SR.decode_value(key, None) is None and SR.encode_value(None) is None


def _s(text: str) -> bytes:  # non-flexible int16-length string
    return struct.pack(">h", len(text)) + text.encode()


def test_key_bytes() -> None:
    assert SR.encode_key(SR.ShareGroupMetadataKey("g")) == b"\x00\x0b" + _s("g")
    assert SR.encode_key(SR.ShareGroupMemberMetadataKey("g", "m")) == b"\x00\x0a" + _s("g") + _s("m")
    assert SR.encode_key(SR.ShareGroupTargetAssignmentMetadataKey("g")) == b"\x00\x0c" + _s("g")
    assert SR.encode_key(SR.ShareGroupTargetAssignmentMemberKey("g", "m")) == b"\x00\x0d" + _s("g") + _s("m")
    assert SR.encode_key(SR.ShareGroupCurrentMemberAssignmentKey("g", "m")) == b"\x00\x0e" + _s("g") + _s("m")
    assert SR.encode_key(SR.ShareGroupStatePartitionMetadataKey("g")) == b"\x00\x0f" + _s("g")
    # version 9 (ShareGroupPartitionMetadata of the pre-4.1 preview) is not interpreted
    assert SR.decode_key(b"\x00\x09" + _s("g")) is None


def test_value_bytes() -> None:
    # ShareGroupMetadataValue v0: Epoch int32, MetadataHash int64 (a regular field), no tags
    assert SR.encode_value(SR.ShareGroupMetadataValue(5, 7)) == \
        b"\x00\x00" + struct.pack(">iq", 5, 7) + b"\x00"
    # member metadata: nullable RackId, ClientId, ClientHost, SubscribedTopicNames (compact)
    assert SR.encode_value(SR.ShareGroupMemberMetadataValue(None, "c", "/h", ("t",))) == \
        b"\x00\x00" + b"\x00" + b"\x02c" + b"\x03/h" + b"\x02" + b"\x02t" + b"\x00"
    # current assignment: epochs, int8 state, [TopicId uuid, Partitions []int32, tags], tags
    assert SR.encode_value(SR.ShareGroupCurrentMemberAssignmentValue(3, 2, 0, ((TID, (0, 1)),))) == \
        b"\x00\x00" + struct.pack(">iib", 3, 2, 0) + b"\x02" + TID.bytes + b"\x03" + struct.pack(">ii", 0, 1) \
        + b"\x00" + b"\x00"
    # state partition metadata: Initializing, Initialized [TopicId, TopicName, Partitions], Deleting [TopicId, TopicName]
    value = SR.ShareGroupStatePartitionMetadataValue((), (SR.TopicPartitionsInfo(TID, "t", (0,)),),
                                                     (SR.TopicInfo(TID, "d"),))
    assert SR.encode_value(value) == b"\x00\x00" + b"\x01" + b"\x02" + TID.bytes + b"\x02t" + b"\x02" \
        + struct.pack(">i", 0) + b"\x00" + b"\x02" + TID.bytes + b"\x02d" + b"\x00" + b"\x00"


def test_malformed_values_are_refused() -> None:
    key = SR.ShareGroupMetadataKey("g")
    good = SR.encode_value(SR.ShareGroupMetadataValue(1, 2))
    with pytest.raises(RecordFormatError):
        SR.decode_value(key, b"\x00\x01" + good[2:])  # unknown value version
    assert SR.decode_value(key, good + b"\x00") == SR.ShareGroupMetadataValue(1, 2)  # trailing bytes: ignored
    with pytest.raises(RecordFormatError):
        SR.decode_value(key, good[:-3])  # truncated
