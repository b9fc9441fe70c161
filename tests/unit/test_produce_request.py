"""The hand-written Produce request decoder against kio's schema walker (the reference),
field by field, on valid, tagged, mutated and random frames of every version."""

import struct
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.protocol.build import materialize
from hightide.protocol.codec import FAST_DECODERS, decode_request, encode_request, parse_header, request_schema
from hightide.protocol.errors import PeerProtocolError
from hightide.protocol.primitives import string, uvarint
from hightide.protocol.produce_request import ProduceRequestBody, decode_produce_request
from hightide.protocol.tolerant import read_tolerant

VERSIONS = range(3, 12)


def _kio_frame(version, txn, acks, timeout_ms, topics):
    body = {"transactional_id": txn, "acks": acks, "timeout": timedelta(milliseconds=timeout_ms),
            "topic_data": [{"name": n, "partition_data": [{"index": i, "records": r} for i, r in parts]}
                           for n, parts in topics]}
    return encode_request(0, version, 9, "client", materialize(request_schema(0, version), body))


def _tagged(tags):
    """A tag section with the given {tag: bytes}."""
    return uvarint(len(tags)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in sorted(tags.items()))


def _flexible_frame(version, txn, acks, timeout_ms, topics, tags):
    """A flexible (v9+) frame whose entities carry unknown tagged fields: ``tags`` maps
    "body", ("topic", i) and ("part", i, j) to {tag: bytes}."""
    out = bytearray(struct.pack(">hhih", 0, version, 9, 1) + b"c" + b"\x00")
    out += string(txn, True) + struct.pack(">hi", acks, timeout_ms) + uvarint(len(topics) + 1)
    for i, (name, parts) in enumerate(topics):
        out += string(name, True) + uvarint(len(parts) + 1)
        for j, (index, records) in enumerate(parts):
            out += struct.pack(">i", index) + (b"\x00" if records is None else uvarint(len(records) + 1) + records)
            out += _tagged(tags.get(("part", i, j), {}))
        out += _tagged(tags.get(("topic", i), {}))
    out += _tagged(tags.get("body", {}))
    return struct.pack(">i", len(out)) + bytes(out)


def _fields(req, unknown):
    return (req.transactional_id, req.acks, req.timeout, unknown.get(id(req), {}),
            [(t.name, unknown.get(id(t), {}),
              [(p.index, None if p.records is None else bytes(p.records), unknown.get(id(p), {}))
               for p in t.partition_data]) for t in req.topic_data])


def _generic(frame):
    header, off = parse_header(memoryview(frame)[4:])
    unknown: dict = {}
    return _fields(read_tolerant(request_schema(0, header.api_version), memoryview(frame)[4:].toreadonly(), off,
                                 unknown)[0], unknown)


def _fast(frame, writable=False):
    view = memoryview(bytearray(frame) if writable else frame)[4:]
    header, off = parse_header(view)
    unknown: dict = {}
    req = decode_request(header, view, off, unknown)
    assert type(req) is ProduceRequestBody
    return req, _fields(req, unknown)


_records = st.one_of(st.none(), st.binary(max_size=64))
_topics = st.lists(st.tuples(st.text(max_size=12),
                             st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), _records), max_size=4)), max_size=3)
_common = (st.sampled_from(VERSIONS), st.one_of(st.none(), st.text(max_size=12)), st.integers(-2**15, 2**15 - 1),
           st.integers(0, 2**31 - 1), _topics)


def test_every_version_is_dispatched_to_the_hand_decoder():
    versions, _, decoder = FAST_DECODERS[0]
    assert list(versions) == list(VERSIONS) and decoder is decode_produce_request


@given(*_common)
def test_matches_the_generic_reader(version, txn, acks, timeout_ms, topics):
    frame = _kio_frame(version, txn, acks, timeout_ms, topics)
    req, fields = _fast(frame)
    assert fields == _generic(frame)
    assert isinstance(req.timeout, timedelta)


@given(*_common, st.dictionaries(st.integers(0, 20000), st.binary(max_size=9), max_size=3), st.data())
def test_unknown_tags_are_collected_like_the_generic_reader(version, txn, acks, timeout_ms, topics, some, data):
    version = max(version, 9)
    tags = {"body": some}
    for i, (_, parts) in enumerate(topics):
        tags[("topic", i)] = data.draw(st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=2))
        for j in range(len(parts)):
            tags[("part", i, j)] = data.draw(st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=2))
    frame = _flexible_frame(version, txn, acks, timeout_ms, topics, tags)
    assert _fast(frame)[1] == _generic(frame)


@settings(max_examples=400)
@given(*_common, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, 10**6))
def test_mutated_frames_fail_exactly_when_the_generic_reader_fails(version, txn, acks, timeout_ms, topics,
                                                                   edits, cut):
    """Bytes of a valid frame overwritten (lengths, counts, varints, string bytes) and the
    frame cut short: the hand decoder raises PeerProtocolError exactly when kio's schema
    walker fails, and otherwise decodes the same fields."""
    frame = bytearray(_kio_frame(version, txn, acks, timeout_ms, topics))
    header_end = 4 + parse_header(memoryview(frame)[4:])[1]
    body = len(frame) - header_end
    for at, value in edits:
        if body:
            frame[header_end + at % body] = value
    del frame[header_end + cut % (body + 1):]
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    try:
        expected = _generic(bytes(frame))
    except Exception:
        expected = None
    if expected is None:
        with pytest.raises(PeerProtocolError):
            _fast(bytes(frame))
    else:
        assert _fast(bytes(frame))[1] == expected


@given(st.sampled_from(VERSIONS), st.binary(max_size=120))
def test_random_bodies_fail_like_the_generic_reader(version, tail):
    frame = bytearray(_kio_frame(version, None, 1, 1000, []))
    header_end = 4 + parse_header(memoryview(frame)[4:])[1]
    frame = frame[:header_end] + tail
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    try:
        expected = _generic(bytes(frame))
    except Exception:
        expected = None
    if expected is None:
        with pytest.raises(PeerProtocolError):
            _fast(bytes(frame))
    else:
        assert _fast(bytes(frame))[1] == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_records_are_views_of_the_frame_not_copies(version):
    frame = bytearray(_kio_frame(version, "tx", -1, 30000, [("t", [(0, b"abcdef"), (1, None)])]))
    view = memoryview(frame)[4:]
    header, off = parse_header(view)
    req = decode_request(header, view, off, {})
    records = req.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and not records.readonly and records.obj is frame
    assert req.topic_data[0].partition_data[1].records is None
    records[0:1] = b"X"  # writable: the log patches offsets in place
    assert b"Xbcdef" in frame


@pytest.mark.parametrize("version", VERSIONS)
def test_hostile_array_lengths_allocate_nothing(version):
    """A topic or partition count of 2**31-1 (or a huge varint) is refused before any
    list is built."""
    flexible = version >= 9
    head = _kio_frame(version, None, 1, 10, [])
    header_end = 4 + parse_header(memoryview(head)[4:])[1]
    body = (string(None, flexible) + struct.pack(">hi", 1, 10)
            + (uvarint(2**31) if flexible else struct.pack(">i", 2**31 - 1)))
    frame = head[4:header_end] + body
    with pytest.raises(PeerProtocolError, match="array of"):
        header, off = parse_header(memoryview(frame))
        decode_request(header, memoryview(frame), off, {})
    parts = (string(None, flexible) + struct.pack(">hi", 1, 10) + (uvarint(2) if flexible else struct.pack(">i", 1))
             + string("t", flexible) + (uvarint(2**31) if flexible else struct.pack(">i", 2**31 - 1)))
    frame = head[4:header_end] + parts
    with pytest.raises(PeerProtocolError, match="array of"):
        header, off = parse_header(memoryview(frame))
        decode_request(header, memoryview(frame), off, {})


@pytest.mark.parametrize("version", VERSIONS)
def test_records_longer_than_the_frame_are_refused(version):
    flexible = version >= 9
    head = _kio_frame(version, None, 1, 10, [])
    header_end = 4 + parse_header(memoryview(head)[4:])[1]
    body = (string(None, flexible) + struct.pack(">hi", 1, 10) + (uvarint(2) if flexible else struct.pack(">i", 1))
            + string("t", flexible) + (uvarint(2) if flexible else struct.pack(">i", 1)) + struct.pack(">i", 0)
            + (uvarint(1000) if flexible else struct.pack(">i", 999)) + b"short")
    frame = head[4:header_end] + body
    header, off = parse_header(memoryview(frame))
    with pytest.raises(PeerProtocolError, match="run past the end"):
        decode_request(header, memoryview(frame), off, {})


def test_other_versions_are_refused():
    with pytest.raises(ValueError):
        decode_produce_request(2, b"", 0)
    with pytest.raises(ValueError):
        decode_produce_request(12, b"", 0)


@pytest.mark.parametrize("version", range(3, 9))
@pytest.mark.parametrize(("txn_len", "records_len", "refused"), [(-1, -1, False), (-2, -1, True), (-1, -2, True),
                                                                  (-1, -2**31, True)])
def test_negative_lengths_other_than_null_are_refused(version, txn_len, records_len, refused):
    head = _kio_frame(version, None, 1, 10, [])
    header_end = 4 + parse_header(memoryview(head)[4:])[1]
    body = (struct.pack(">hhi", txn_len, 1, 10) + struct.pack(">i", 1) + string("t", False) + struct.pack(">i", 1)
            + struct.pack(">ii", 0, records_len))
    frame = head[:header_end] + body
    frame = struct.pack(">i", len(frame) - 4) + frame[4:]
    try:
        expected = _generic(frame)
    except Exception:
        expected = None
    assert (expected is None) == refused
    if refused:
        with pytest.raises(PeerProtocolError):
            _fast(frame)
    else:
        assert _fast(frame)[1] == expected
