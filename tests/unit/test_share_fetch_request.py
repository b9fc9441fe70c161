"""The hand-written ShareFetch / ShareAcknowledge request decoders against kio's schema
walker (the reference): random requests, random corruptions of valid ones, hostile
lengths, unknown tagged fields."""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.protocol.build import materialize
from hightide.protocol.codec import decode_request, encode_request, parse_header, request_schema
from hightide.protocol.errors import PeerProtocolError
from hightide.protocol.share_fetch_request import (
    ShareAcknowledgeRequestBody,
    ShareFetchRequestBody,
    decode_share_fetch_request,
)
from hightide.protocol.tolerant import read_tolerant

_topic_ids = st.one_of(st.just(None), st.uuids(), st.just(uuid.UUID(int=7)))
_batches = st.lists(st.fixed_dictionaries({
    "first_offset": st.integers(-2**63, 2**63 - 1), "last_offset": st.integers(-2**63, 2**63 - 1),
    "acknowledge_types": st.lists(st.integers(-128, 127), max_size=6)}), max_size=4)
_partitions = st.lists(st.fixed_dictionaries({"partition_index": st.integers(-2**31, 2**31 - 1),
                                              "acknowledgement_batches": _batches}), max_size=3)
_topics = st.lists(st.fixed_dictionaries({"topic_id": _topic_ids, "partitions": _partitions}), max_size=3)
_forgotten = st.lists(st.fixed_dictionaries({"topic_id": _topic_ids, "partitions": st.lists(
    st.integers(-2**31, 2**31 - 1), max_size=4)}), max_size=2)
_i32 = st.integers(-2**31, 2**31 - 1)
_text = st.one_of(st.none(), st.text(max_size=12))


def _fetch_body(version: int, draw: Any) -> dict:
    body = {"group_id": draw(_text), "member_id": draw(_text), "share_session_epoch": draw(_i32),
            "max_wait": draw(st.integers(-2**31, 2**31 - 1)), "min_bytes": draw(_i32), "max_bytes": draw(_i32),
            "max_records": draw(_i32), "batch_size": draw(_i32), "topics": draw(_topics),
            "forgotten_topics_data": draw(_forgotten)}
    if version >= 2:
        body["share_acquire_mode"] = draw(st.integers(-128, 127))
        body["is_renew_ack"] = draw(st.booleans())
    return body


def _ack_body(version: int, draw: Any) -> dict:
    body = {"group_id": draw(_text), "member_id": draw(_text), "share_session_epoch": draw(_i32),
            "topics": draw(_topics)}
    if version >= 2:
        body["is_renew_ack"] = draw(st.booleans())
    return body


@st.composite
def requests(draw: Any) -> bytes:
    api = draw(st.sampled_from([78, 79]))
    version = draw(st.sampled_from([1, 2]))
    body = (_fetch_body if api == 78 else _ack_body)(version, draw)
    if api == 78:
        body["max_wait"] = datetime.timedelta(milliseconds=body["max_wait"])
    return encode_request(api, version, 5, "c", materialize(request_schema(api, version), body))


def _fields(req: Any, unknown: dict) -> Any:
    """Every field with the unknown tags of each level, read by kio's field names (so kio's
    entities and the hand decoder's tuples compare equal; v1 entities have no v2 fields:
    their defaults)."""
    def tags(o: Any) -> dict:
        return unknown.get(id(o), {})

    def batches(p: Any) -> list:
        return [(b.first_offset, b.last_offset, tuple(b.acknowledge_types), tags(b)) for b in p.acknowledgement_batches]

    topics = [(t.topic_id, [(p.partition_index, batches(p), tags(p)) for p in t.partitions], tags(t))
              for t in req.topics]
    head = (req.group_id, req.member_id, req.share_session_epoch, getattr(req, "is_renew_ack", False))
    if not hasattr(req, "max_wait"):  # ShareAcknowledge
        return head, topics, tags(req)
    forgotten = [(f.topic_id, tuple(f.partitions), tags(f)) for f in req.forgotten_topics_data]
    return (head, req.max_wait, req.min_bytes, req.max_bytes, req.max_records, req.batch_size,
            getattr(req, "share_acquire_mode", 0), topics, forgotten, tags(req))


def _generic(frame: bytes) -> Any:
    header, off = parse_header(memoryview(frame))
    unknown: dict = {}
    entity = read_tolerant(request_schema(header.api_key, header.api_version), memoryview(frame).toreadonly(), off,
                           unknown)[0]
    return _fields(entity, unknown)


def _fast(frame: bytes, data: bytes | None = None) -> Any:
    header, off = parse_header(memoryview(frame))
    unknown: dict = {}
    body = decode_request(header, memoryview(frame) if data is None else data, off, unknown)
    assert isinstance(body, ShareFetchRequestBody if header.api_key == 78 else ShareAcknowledgeRequestBody)
    return _fields(body, unknown)


@settings(max_examples=400)
@given(requests())
def test_decoder_matches_the_generic_reader(frame: bytes) -> None:
    frame = frame[4:]
    assert _fast(frame) == _generic(frame)
    assert _fast(frame, frame) == _generic(frame)  # bytes as well as a view


@settings(max_examples=3000)
@given(requests(), st.data())
def test_corrupted_requests_fail_or_decode_like_the_generic_reader(frame: bytes, data: st.DataObject) -> None:
    """Mutations of valid requests (bytes replaced, inserted, removed; the tail cut):
    the hand decoder raises PeerProtocolError exactly when kio's walker fails, and
    otherwise decodes the same fields and unknown tags."""
    work = bytearray(frame[4:])
    _, off = parse_header(memoryview(bytes(work)))
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        at = data.draw(st.integers(off, max(off, len(work) - 1)))
        if kind == "set" and at < len(work):
            work[at] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            work[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del work[at:at + data.draw(st.integers(1, 3))]
        else:
            del work[at:]
    frame = bytes(work)
    try:
        expected = _generic(frame)
    except Exception:
        expected = None
    if expected is None:
        with pytest.raises(PeerProtocolError):
            _fast(frame)
    else:
        assert _fast(frame) == expected


def _fetch_frame(version: int = 1, **over: Any) -> bytes:
    body: dict[str, Any] = {"group_id": "g", "member_id": "m", "share_session_epoch": 3, "max_wait": 500, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "topics": [], "forgotten_topics_data": []}
    body.update(over)
    body["max_wait"] = datetime.timedelta(milliseconds=int(body["max_wait"]))
    return encode_request(78, version, 1, "c", materialize(request_schema(78, version), body))[4:]


def test_fields_and_acknowledgement_batches_are_plain_tuples() -> None:
    tid = uuid.uuid4()
    frame = _fetch_frame(2, share_acquire_mode=1, is_renew_ack=True, topics=[{"topic_id": tid, "partitions": [
        {"partition_index": 4, "acknowledgement_batches": [
            {"first_offset": 10, "last_offset": 19, "acknowledge_types": [1]},
            {"first_offset": 20, "last_offset": 22, "acknowledge_types": [1, 2, 3]}]}]}],
        forgotten_topics_data=[{"topic_id": tid, "partitions": [1, 2]}])
    header, off = parse_header(frame)
    req = decode_request(header, frame, off)
    assert (req.group_id, req.member_id, req.share_session_epoch, req.max_wait.total_seconds(), req.max_records,
            req.share_acquire_mode, req.is_renew_ack) == ("g", "m", 3, 0.5, 500, 1, True)
    (topic,) = req.topics
    assert topic.topic_id == tid
    assert topic.partitions == [(4, [(10, 19, (1,)), (20, 22, (1, 2, 3))])]
    assert req.forgotten_topics_data == [(tid, (1, 2))]


def test_a_hostile_array_length_is_refused_before_allocating() -> None:
    frame = bytearray(_fetch_frame())
    # topics is the byte before forgotten (empty: 0x01) and the tag section (0x00)
    assert frame[-3:] == b"\x01\x01\x00"
    frame[-3:-2] = b"\xff\xff\xff\xff\x0f"  # 2**32 - 1 topics
    header, off = parse_header(bytes(frame))
    with pytest.raises(PeerProtocolError, match="exceeds the frame"):
        decode_request(header, bytes(frame), off)


def test_unknown_tags_are_collected_per_entity() -> None:
    frame = bytearray(_fetch_frame(topics=[{"topic_id": uuid.uuid4(), "partitions": [
        {"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 1, "last_offset": 2, "acknowledge_types": [1]}]}]}]))
    # the batch's tag section is the byte after its one type: 8+8 offsets, 0x02 length, 0x01
    at = frame.index(struct.pack(">qq", 1, 2) + b"\x02\x01") + 18
    assert frame[at] == 0
    frame[at:at + 1] = b"\x01\x90\x4e\x02\xab\xcd"  # tag 10000, two bytes
    header, off = parse_header(bytes(frame))
    unknown: dict = {}
    req = decode_request(header, bytes(frame), off, unknown)
    batch = req.topics[0].partitions[0].acknowledgement_batches[0]
    assert unknown == {id(batch): {10000: b"\xab\xcd"}}


@pytest.mark.parametrize("version", [0, 3])
def test_other_versions_are_refused(version: int) -> None:
    with pytest.raises(ValueError):
        decode_share_fetch_request(version, _fetch_frame(), 0)
