"""The hand-written OffsetFetch encoder equals kio's for every version, and its
extension tags decode with the tolerant reader."""

import struct

import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.offset_fetch_response import (TAG_HIGH_WATERMARK, GroupOffsets, PartitionOffset,
                                                     encode_offset_fetch_response)
from hightide.protocol.tolerant import read_tolerant

TOPICS = [("orders", [PartitionOffset(0, 42, 3, "meta", 0), PartitionOffset(1, -1, -1, "", 0)]),
          ("x", [PartitionOffset(7, 5, -1, None, 3)])]


def _dict_topics():
    return [{"name": n, "partitions": [{"partition_index": p.partition, "committed_offset": p.offset,
                                        "committed_leader_epoch": p.leader_epoch, "metadata": p.metadata,
                                        "error_code": p.error_code} for p in ps]} for n, ps in TOPICS]


@pytest.mark.parametrize("version", range(1, 10))
def test_matches_kio(version):
    mine = encode_offset_fetch_response(version, 9, [GroupOffsets("g", 0, TOPICS)])
    if version >= 8:
        body = {"throttle_time": 0, "groups": [{"group_id": "g", "topics": _dict_topics(), "error_code": 0}]}
    else:
        body = {"throttle_time": 0, "topics": _dict_topics(), "error_code": 0}
    expected = encode_response(9, version, 9, materialize(response_schema(9, version), body))
    assert mine == expected


@pytest.mark.parametrize("version", [6, 7, 8, 9])
def test_extension_tags_are_skippable_and_readable(version):
    parts = [PartitionOffset(0, 10, -1, "", 0, high_watermark=25, log_start_offset=3, last_stable_offset=25)]
    frame = encode_offset_fetch_response(version, 1, [GroupOffsets("g", 0, [("t", parts)])])
    unknown: dict = {}
    resp, _ = read_tolerant(response_schema(9, version), frame, 4 + 4 + 1, unknown)
    topics = resp.groups[0].topics if version >= 8 else resp.topics
    p = topics[0].partitions[0]
    assert p.committed_offset == 10
    tags = unknown[id(p)]
    assert struct.unpack(">q", tags[TAG_HIGH_WATERMARK])[0] == 25
    assert sorted(tags) == [10000, 10001, 10002]
