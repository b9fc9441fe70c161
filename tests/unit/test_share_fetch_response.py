"""The hand-written ShareFetch encoder must match kio's generated encoder byte for byte."""

import uuid

import pytest
from kio.index import load_response_schema

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response
from hightide.protocol.share_fetch_response import (
    SharePartitionData,
    ShareTopicData,
    encode_share_fetch_response,
)

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _topics():
    return [
        ShareTopicData(TID, [
            SharePartitionData(0, 0, None, 0, None, 1, 0, [b"\x01" * 70, memoryview(b"\x02" * 30)],
                               [(5, 9, 1), (10, 12, 3)]),
            SharePartitionData(1, 3, "unknown", 121, "not acquired", -1, -1, [], []),
        ]),
        ShareTopicData(uuid.UUID(int=5), []),
    ]


def _as_dict(t: ShareTopicData) -> dict:
    return {"topic_id": t.topic_id, "partitions": [
        {"partition_index": p.partition, "error_code": p.error_code, "error_message": p.error_message,
         "acknowledge_error_code": p.acknowledge_error_code,
         "acknowledge_error_message": p.acknowledge_error_message,
         "current_leader": {"leader_id": p.leader_id, "leader_epoch": p.leader_epoch},
         "records": b"".join(bytes(r) for r in p.records),
         "acquired_records": [{"first_offset": a, "last_offset": b, "delivery_count": c} for a, b, c in p.acquired]}
        for p in t.partitions]}


@pytest.mark.parametrize("version", [1, 2])
def test_matches_kio(version):
    topics = _topics()
    mine = encode_share_fetch_response(version, 77, topics, error_code=0, acquisition_lock_timeout_ms=30000,
                                       node_endpoints=[(1, "127.0.0.1", 9092, None)])
    expected = encode_response(78, version, 77, materialize(load_response_schema(78, version), {
        "throttle_time": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout": 30000,
        "responses": [_as_dict(t) for t in topics],
        "node_endpoints": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}]}))
    assert expected[4:] == b"".join(bytes(b) for b in mine)


def test_top_level_error():
    mine = encode_share_fetch_response(1, 3, [], error_code=123, error_message="bad epoch")
    expected = encode_response(78, 1, 3, materialize(load_response_schema(78, 1), {
        "throttle_time": 0, "error_code": 123, "error_message": "bad epoch", "acquisition_lock_timeout": 0,
        "responses": [], "node_endpoints": []}))
    assert expected[4:] == b"".join(bytes(b) for b in mine)
