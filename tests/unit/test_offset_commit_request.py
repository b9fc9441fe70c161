import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import decode_request, encode_request, parse_header, request_schema
from hightide.protocol.offset_commit_request import (TAG_EXPECTED_OFFSET, CommitPartition,
                                                     encode_offset_commit_request)


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
