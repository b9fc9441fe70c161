"""The coordinator records' one bounded reader (``protocol/coordinator_codec``), through the
records modules' public decoders: bytes of any origin decode or raise the module's record
error — never another exception — and every length, count and varint is checked.

Uses only the decoders' public names (``group.records``, ``share.records``,
``txn.records``), which the hand-written codecs had too.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.group import records as R
from hightide.group.shard import decode_record
from hightide.share import records as SS
from hightide.share.types import StateBatch
from hightide.txn import records as TX
from hightide.txn.state import TxnMetadata, TxnState

TID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


SIX_BYTE_ONE = b"\x81\x80\x80\x80\x80\x00"  # 1 as a 6-byte unsigned varint: Kafka refuses it


def test_a_string_that_is_not_utf8_is_a_record_error() -> None:
    key = i16(1) + i16(2) + b"\xff\xfe" + i16(1) + b"t" + i32(0)
    with pytest.raises(R.RecordFormatError):
        decode_record(key, None)
    with pytest.raises(TX.TxnRecordError):
        TX.decode_key(i16(0) + i16(2) + b"\xc3\x28")
    with pytest.raises(SS.ShareRecordError):
        SS.decode_key(i16(0) + i16(1) + b"\x80" + TID.bytes + i32(0))


def test_a_varint_of_more_than_five_bytes_is_refused() -> None:
    # GroupMetadataValue v4 (flexible): protocolType "x" with its length as a 6-byte varint
    good = i16(4) + b"\x02x" + i32(1) + b"\x00" + b"\x00" + i64(-1) + b"\x01" + b"\x00"
    assert R.decode_value(R.GroupKey("g"), good) == R.GroupValue("x", 1, None, None, -1, ())
    with pytest.raises(R.RecordFormatError):
        R.decode_value(R.GroupKey("g"), i16(4) + b"\x82\x80\x80\x80\x80\x00x" + good[4:])
    # TransactionLogValue v1: TransactionPartitions count as a 6-byte varint (1: an empty array)
    head = i16(1) + i64(9) + i16(0) + i32(1000) + b"\x00"
    tail = i64(5) + i64(4) + b"\x00"
    assert TX.decode_value("t", head + b"\x01" + tail) is not None
    with pytest.raises(TX.TxnRecordError):
        TX.decode_value("t", head + SIX_BYTE_ONE + tail)


def test_a_declared_count_beyond_the_bytes_is_refused() -> None:
    # ShareUpdateValue with 2**31 state batches declared, none present
    value = i16(0) + i32(0) + i32(0) + i64(5) + b"\xff\xff\xff\xff\x07" + b"\x00"
    with pytest.raises(SS.ShareRecordError):
        SS.decode_value(SS.ShareUpdateKey("g", TID, 0), value)
    # GroupMetadataValue v3 with 2**31 - 1 members declared
    members = i16(3) + i16(1) + b"c" + i32(1) + i16(-1) + i16(-1) + i64(0) + i32(2**31 - 1)
    with pytest.raises(R.RecordFormatError):
        R.decode_value(R.GroupKey("g"), members)


def test_null_where_the_schema_forbids_it_is_refused() -> None:
    with pytest.raises(R.RecordFormatError):  # a null group id in an offset key
        decode_record(i16(1) + i16(-1) + i16(1) + b"t" + i32(0), None)
    with pytest.raises(R.RecordFormatError):  # a null (non-nullable) member array
        R.decode_value(R.GroupKey("g"), i16(3) + i16(1) + b"c" + i32(1) + i16(-1) + i16(-1) + i64(0) + i32(-1))


def test_bytes_after_the_known_fields_are_ignored() -> None:
    """As Kafka's generated readers do: a newer writer's additions after the fields this
    version knows are not read, in keys and values of every topic."""
    for topic, key, value in _valid_records():
        assert _decoded(topic, key + b"\x00\x07junk", value) == _decoded(topic, key, value)
        assert _decoded(topic, key, value + b"\x00\x07junk") == _decoded(topic, key, value)
    offset = R.encode_value(R.OffsetValue(5, 1, "m", 7))
    assert offset is not None
    assert R.decode_value(R.OffsetKey("g", "t", 0), offset + b"\x00") == R.OffsetValue(5, 1, "m", 7)
    meta = TxnMetadata("t", 1, 0, 10, TxnState.EMPTY)
    assert TX.decode_value("t", (TX.encode_value(meta) or b"") + b"\x00") == meta


def _valid_records() -> list[tuple[str, bytes, bytes]]:
    out = []
    for key, value in [(R.OffsetKey("g", "t", 1), R.OffsetValue(5, 1, "meta", 7)),
                       (R.GroupKey("g"), R.GroupValue("consumer", 2, "range", "m", 9, (
                           R.MemberMetadata("m", "i", "c", "h", 10, 20, b"s", b"a"),)))]:
        out.append(("group", R.encode_key(key), R.encode_value(value) or b""))
    skey = SS.ShareSnapshotKey("g", TID, 3)
    out.append(("share", SS.encode_key(skey), SS.encode_value(SS.ShareSnapshotValue(
        1, 2, 3, 4, 5, 6, (StateBatch(4, 9, 2, 1), StateBatch(10, 11, 0, 2)), 3)) or b""))
    meta = TxnMetadata("tx", 5, 1, 60000, TxnState.ONGOING, frozenset({("a", 0), ("b", 1)}), 100, 200)
    out.append(("txn", TX.encode_key("tx"), TX.encode_value(meta) or b""))
    return out


VALID = _valid_records()


def _decoded(topic: str, key: bytes, value: bytes) -> object:
    """The topic's decoded (key, value)."""
    if topic == "group":
        return decode_record(key, value)
    if topic == "share":
        k = SS.decode_key(key)
        return k, None if k is None else SS.decode_value(k, value)
    tid = TX.decode_key(key)
    return tid, None if tid is None else TX.decode_value(tid, value)


def _decode(topic: str, key: bytes, value: bytes) -> None:
    """Decode or raise the topic's record error (anything else escapes: a test failure)."""
    try:
        _decoded(topic, key, value)
    except (R.RecordFormatError, SS.ShareRecordError, TX.TxnRecordError):
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_damaged_records_decode_or_raise_the_record_error(record: tuple[str, bytes, bytes], data: st.DataObject) -> None:
    topic, key, value = record
    which = data.draw(st.sampled_from(["key", "value"]))
    raw = bytearray(key if which == "key" else value)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[i:]
        else:
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=6))
    if which == "key":
        _decode(topic, bytes(raw), value)
    else:
        _decode(topic, key, bytes(raw))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), st.binary(max_size=80))
def test_arbitrary_bytes_decode_or_raise_the_record_error(record: tuple[str, bytes, bytes], junk: bytes) -> None:
    topic, key, value = record
    _decode(topic, key[:2] + junk, value)
    _decode(topic, key, value[:2] + junk)
