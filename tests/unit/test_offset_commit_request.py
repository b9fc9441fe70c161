import pytest
from hypothesis import given
from hypothesis import strategies as st

from hightide.protocol.build import materialize
from hightide.protocol.errors import PeerProtocolError
from hightide.protocol.tolerant import read_tolerant
from hightide.protocol.codec import (
    decode_request,
    encode_request,
    encode_response,
    parse_header,
    request_schema,
    response_schema,
)
from hightide.protocol.offset_commit_request import (
    TAG_EXPECTED_OFFSET,
    CommitPartition,
    encode_offset_commit_request,
    encode_offset_commit_response,
)


@pytest.mark.parametrize("version", [8, 9])
def test_matches_kio_without_extension(version):
    topics = [("t", [CommitPartition(0, 5, 2, "m"), CommitPartition(3, 9, -1, None)])]
    mine = encode_offset_commit_request(version, 7, "c", "g", 3, "m-1", None, topics)
    body = {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m-1", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 2, "committed_metadata": "m"},
                {"partition_index": 3, "committed_offset": 9, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]}
    assert mine == encode_request(8, version, 7, "c", materialize(request_schema(8, version), body))


def test_expected_offset_is_decoded_as_unknown_tag():
    frame = encode_offset_commit_request(9, 1, "c", "g", -1, "", None,
                                         [("t", [CommitPartition(0, 5, expected_offset=-1)])])
    header, off = parse_header(memoryview(frame)[4:])
    unknown: dict = {}
    req = decode_request(header, memoryview(frame)[4:], off, unknown)
    p = req.topics[0].partitions[0]
    assert unknown[id(p)][TAG_EXPECTED_OFFSET] == (-1).to_bytes(8, "big", signed=True)


@pytest.mark.parametrize("version", range(2, 10))
def test_response_encoder_matches_kio(version):
    topics = [("orders", [(0, 0), (7, 25), (2**31 - 1, -1)]), ("é-ünicode" * 20, []), ("x", [(1, 12)])]
    body = {"throttle_time": 0, "topics": [{"name": n, "partitions": [
        {"partition_index": i, "error_code": code} for i, code in parts]} for n, parts in topics]}
    expected = encode_response(8, version, 42, materialize(response_schema(8, version), body))
    assert encode_offset_commit_response(version, 42, topics) == expected
    assert encode_offset_commit_response(version, 42, []) == encode_response(
        8, version, 42, materialize(response_schema(8, version), {"throttle_time": 0, "topics": []}))


@pytest.mark.parametrize("version", [1, 10])
def test_response_encoder_refuses_other_versions(version):
    with pytest.raises(ValueError):
        encode_offset_commit_response(version, 1, [])


def _generic(frame: bytes):
    """kio's schema walker on the same frame: the reference."""
    header, off = parse_header(memoryview(frame)[4:])
    unknown: dict = {}
    return read_tolerant(request_schema(8, header.api_version), memoryview(frame)[4:].toreadonly(), off,
                         unknown)[0], unknown


def _fields(req, unknown):
    return (req.group_id, req.generation_id_or_member_epoch, req.member_id, req.group_instance_id,
            [(t.name, [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata,
                        unknown.get(id(p), {})) for p in t.partitions]) for t in req.topics])


_partitions = st.lists(st.builds(CommitPartition, st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
                                 st.integers(-1, 2**31 - 1), st.one_of(st.none(), st.text(max_size=40)),
                                 st.one_of(st.none(), st.integers(-1, 2**63 - 1))), max_size=5)


@given(st.sampled_from([8, 9]), st.text(max_size=20), st.integers(-1, 2**31 - 1), st.text(max_size=10),
       st.one_of(st.none(), st.text(max_size=10)), st.lists(st.tuples(st.text(max_size=12), _partitions), max_size=4))
def test_request_decoder_matches_the_generic_reader(version, group, generation, member, instance, topics):
    frame = encode_offset_commit_request(version, 3, "c", group, generation, member, instance, topics)
    header, off = parse_header(memoryview(frame)[4:])
    unknown: dict = {}
    fast = decode_request(header, memoryview(frame)[4:].toreadonly(), off, unknown)
    assert type(fast).__name__ == "OffsetCommitRequestBody"
    assert _fields(fast, unknown) == _fields(*_generic(frame))


@given(st.binary(max_size=80), st.sampled_from([8, 9]))
def test_request_decoder_refuses_garbage_like_the_generic_reader(tail, version):
    """Random bodies: the hand decoder raises PeerProtocolError exactly when kio's
    schema walker fails, and otherwise decodes the same fields."""
    frame = encode_offset_commit_request(version, 3, "c", "g", 1, "m", None, [])
    frame = frame[:-3] + tail  # keep the header and group/member fields, then random bytes
    header, off = parse_header(memoryview(frame)[4:])
    try:
        expected = _fields(*_generic(frame))
    except Exception:
        expected = None
    unknown: dict = {}
    if expected is None:
        with pytest.raises(PeerProtocolError):
            decode_request(header, memoryview(frame)[4:].toreadonly(), off, unknown)
    else:
        assert _fields(decode_request(header, memoryview(frame)[4:].toreadonly(), off, unknown), unknown) == expected


@given(st.sampled_from([8, 9]), st.lists(st.tuples(st.text(max_size=12), _partitions), max_size=4))
def test_decoded_partitions_are_commit_requests(version, topics):
    """A decoded partition is (topic, partition, offset, leader epoch, metadata, expected
    offset): the fields of the shard's CommitRequest, in order, which the broker commits."""
    from hightide.group.offsets import CommitRequest

    frame = encode_offset_commit_request(version, 3, "c", "g", -1, "", None, topics)
    header, off = parse_header(memoryview(frame)[4:])
    req = decode_request(header, memoryview(frame)[4:].toreadonly(), off, {})
    got = [tuple(p) for t in req.topics for p in t.partitions]
    assert got == [tuple(CommitRequest(name, p.partition, p.offset, p.leader_epoch, p.metadata, p.expected_offset))
                   for name, parts in topics for p in parts]


def test_a_malformed_expected_offset_is_ignored_like_the_handler_did():
    """ExpectedOffset of another size than 8 bytes: no expected offset (the tag is kept)."""
    frame = bytearray(encode_offset_commit_request(9, 1, "c", "g", -1, "", None,
                                                   [("t", [CommitPartition(0, 5, expected_offset=7)])]))
    tag = b"\x01" + bytes([0x90, 0x4E]) + b"\x08" + (7).to_bytes(8, "big")  # count, tag 10000, size 8, value
    at = bytes(frame).index(tag)
    short = bytes(frame[:at]) + b"\x01" + bytes([0x90, 0x4E]) + b"\x04" + (7).to_bytes(4, "big") + bytes(frame[at + len(tag):])
    short = (len(short) - 4).to_bytes(4, "big") + short[4:]
    header, off = parse_header(memoryview(short)[4:])
    unknown: dict = {}
    p = decode_request(header, memoryview(short)[4:].toreadonly(), off, unknown).topics[0].partitions[0]
    assert p.expected_offset is None and unknown[id(p)][TAG_EXPECTED_OFFSET] == (7).to_bytes(4, "big")
