"""materialize: one plain description serves every version of a response."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from hightide.protocol.build import field_names, materialize
from hightide.protocol.codec import encode_response, response_header_bytes

TOPIC_ID = uuid.UUID("8a7c2f3e-1111-4222-8333-944455556666")


def metadata_description() -> dict:
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
        "cluster_id": "hightide-cluster",
        "controller_id": 1,
        "topics": [
            {"error_code": 0, "name": "orders", "topic_id": TOPIC_ID, "is_internal": False,
             "partitions": [
                 {"error_code": 0, "partition_index": p, "leader_id": 1, "leader_epoch": 0,
                  "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                 for p in range(3)]},
            {"error_code": int(ErrorCode.unknown_topic_or_partition), "name": "missing",
             "topic_id": uuid.UUID(int=5), "partitions": []},
        ],
        "not_a_kafka_field": "ignored by every version",
    }


def decode_response(version: int, frame: bytes):
    cls = load_response_schema(3, version)
    header = response_header_bytes(3, version, 9)
    assert frame[4:4 + len(header)] == header
    entity, _ = entity_reader(cls)(memoryview(frame).toreadonly(), 4 + len(header))
    return entity


@pytest.mark.parametrize("version", [0, 1, 5, 9, 10, 12])
def test_metadata_response_every_version_encodes(version: int) -> None:
    cls = load_response_schema(3, version)
    resp = materialize(cls, metadata_description())
    assert type(resp) is cls
    frame = encode_response(3, version, 9, resp)
    decoded = decode_response(version, frame)
    assert decoded == resp
    assert [b.host for b in decoded.brokers] == ["localhost"]
    assert [t.name for t in decoded.topics] == ["orders", "missing"]
    assert decoded.topics[1].error_code == ErrorCode.unknown_topic_or_partition
    assert [p.partition_index for p in decoded.topics[0].partitions] == [0, 1, 2]


def test_fields_the_version_lacks_are_dropped_and_types_converted() -> None:
    v0 = materialize(load_response_schema(3, 0), metadata_description())
    assert "cluster_id" not in field_names(type(v0))
    assert not hasattr(v0, "cluster_id")
    v12 = materialize(load_response_schema(3, 12), metadata_description())
    assert v12.cluster_id == "hightide-cluster"
    assert v12.throttle_time == datetime.timedelta(0)
    assert v12.topics[0].topic_id == TOPIC_ID
    assert isinstance(v12.topics[0].partitions, tuple)
    assert v12.topics[0].partitions[0].replica_nodes == (1,)
    assert isinstance(v12.topics[1].error_code, ErrorCode)


def test_omitted_optional_fields_take_schema_defaults() -> None:
    desc = metadata_description()
    del desc["controller_id"]
    for p in desc["topics"][0]["partitions"]:
        del p["leader_epoch"], p["offline_replicas"]
    v12 = materialize(load_response_schema(3, 12), desc)
    assert v12.controller_id == -1
    assert v12.topics[0].partitions[0].leader_epoch == -1
    assert v12.topics[0].partitions[0].offline_replicas == ()
    encode_response(3, 12, 1, v12)


def test_missing_required_field_raises_key_error() -> None:
    desc = metadata_description()
    del desc["throttle_time"]
    materialize(load_response_schema(3, 0), desc)  # v0 has no throttle time
    with pytest.raises(KeyError, match="throttle_time"):
        materialize(load_response_schema(3, 12), desc)


def test_missing_required_nested_field_raises_key_error() -> None:
    desc = metadata_description()
    del desc["topics"][0]["partitions"][1]["partition_index"]
    for version in (0, 9, 12):
        with pytest.raises(KeyError, match="partition_index"):
            materialize(load_response_schema(3, version), desc)


def test_nested_entity_as_dict_or_instance() -> None:
    from kio.schema.produce.v10.response import LeaderIdAndEpoch
    cls = load_response_schema(0, 10)
    part = {"index": 0, "error_code": 6, "base_offset": -1, "record_errors": []}
    plain = materialize(cls, {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [part]}]})
    assert plain.responses[0].partition_responses[0].current_leader == LeaderIdAndEpoch()
    leader = LeaderIdAndEpoch(leader_id=3, leader_epoch=4)
    for given in (leader, {"leader_id": 3, "leader_epoch": 4}):
        resp = materialize(cls, {"throttle_time": 0, "responses": [
            {"name": "t", "partition_responses": [{**part, "current_leader": given}]}]})
        assert resp.responses[0].partition_responses[0].current_leader == leader
        frame = encode_response(0, 10, 1, resp)
        decoded, _ = entity_reader(cls)(memoryview(frame).toreadonly(), 4 + len(response_header_bytes(0, 10, 1)))
        assert decoded == resp


def test_null_arrays_and_timedeltas() -> None:
    cls = load_response_schema(3, 12)
    desc = metadata_description()
    desc["throttle_time"] = datetime.timedelta(milliseconds=250)
    assert materialize(cls, desc).throttle_time == datetime.timedelta(milliseconds=250)
    desc["throttle_time"] = 250
    assert materialize(cls, desc).throttle_time == datetime.timedelta(milliseconds=250)


@pytest.mark.parametrize("version", [3, 5, 8, 9, 11])
def test_produce_response_datetime_and_versions(version: int) -> None:
    cls = load_response_schema(0, version)
    desc = {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 10, "log_append_time": -1, "log_start_offset": 0,
         "record_errors": []},
        {"index": 1, "error_code": 0, "base_offset": 11, "log_append_time": 1_700_000_000_123,
         "log_start_offset": 0, "record_errors": [], "error_message": None},
    ]}]}
    resp = materialize(cls, desc)
    parts = resp.responses[0].partition_responses
    assert parts[0].log_append_time is None
    assert parts[1].log_append_time == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    frame = encode_response(0, version, 1, resp)
    header = response_header_bytes(0, version, 1)
    decoded, _ = entity_reader(cls)(memoryview(frame).toreadonly(), 4 + len(header))
    assert decoded == resp
