"""The hand-written Fetch encoder must match kio's generated encoder byte for byte."""

import uuid

import pytest
from kio.index import load_response_schema

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response
from hightide.protocol.fetch_response import PartitionData, TopicData, encode_fetch_response

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _topics():
    return [
        TopicData("orders", TID, [
            PartitionData(0, 0, 42, 42, 3, [], -1, b"\x01" * 70),
            PartitionData(1, 1, 7, 7, 0, None, -1),  # an error: empty records, never null
            PartitionData(2, 0, 9, 8, 1, [(77, 5)], -1, b""),
        ]),
        TopicData("b", uuid.UUID(int=5), []),
    ]


def _as_dict(t: TopicData) -> dict:
    return {"topic": t.name, "topic_id": t.topic_id, "partitions": [
        {"partition_index": p.partition, "error_code": p.error_code, "high_watermark": p.high_watermark,
         "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
         "aborted_transactions": None if p.aborted is None else
         [{"producer_id": a, "first_offset": b} for a, b in p.aborted],
         "preferred_read_replica": p.preferred_read_replica, "records": p.records}
        for p in t.partitions]}


@pytest.mark.parametrize("version", range(4, 18))
def test_matches_kio(version):
    topics = _topics()
    mine, size = encode_fetch_response(version, 99, topics, throttle_ms=0, error_code=0, session_id=0)
    expected = encode_response(1, version, 99, materialize(load_response_schema(1, version), {
        "throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [_as_dict(t) for t in topics]}))
    got = b"".join(bytes(b) for b in mine)
    assert size == len(got)
    assert expected[4:] == got


@pytest.mark.parametrize("version", [4, 11, 12, 17])
def test_error_partition_has_empty_records_not_null(version):
    """Kafka answers an errored partition with an empty records array; librdkafka rejects a
    whole response holding a null one ("invalid MessageSetSize -1")."""
    from kio.serial import entity_reader
    topics = [TopicData("t", TID, [PartitionData(0, error_code=1)])]
    frame = b"".join(bytes(b) for b in encode_fetch_response(version, 1, topics)[0])
    entity, _ = entity_reader(load_response_schema(1, version))(frame, 4 + (version >= 12))
    part = entity.responses[0].partitions[0]
    assert (part.error_code, part.records) == (1, b"")


@pytest.mark.parametrize("version", [12, 16, 17])
@pytest.mark.parametrize("leader", [None, (3, 9)])
def test_diverging_epoch_tag_matches_kio(version, leader):
    """DivergingEpoch (tag 0) before CurrentLeader (tag 1), as kio encodes them."""
    topics = [TopicData("t", TID, [PartitionData(0, 0, 10, 10, 0, [], -1, b"", current_leader=leader,
                                                 diverging_epoch=(4, 37))])]
    mine, _ = encode_fetch_response(version, 5, topics)
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
            "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": b"",
            "diverging_epoch": {"epoch": 4, "end_offset": 37}}
    if leader is not None:
        part["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
    expected = encode_response(1, version, 5, materialize(load_response_schema(1, version), {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "t", "topic_id": TID, "partitions": [part]}]}))
    assert expected[4:] == b"".join(bytes(b) for b in mine)
