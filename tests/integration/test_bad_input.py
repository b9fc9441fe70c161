"""Hostile and malformed input: each gets a Kafka error or a closed connection with a
logged reason, and the broker keeps serving everyone else without losing data."""

from __future__ import annotations

import struct

import pytest

from hightide.protocol.records import build_batch

from ..rawkafka import RawClient
from .clients import CONSUME, Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def acked(server):
    topic = "bad-input-survivor"
    confluent_create_topic(server.bootstrap, topic, 2)
    recs = [Rec(i % 2, None, f"v{i}".encode(), (), 1_700_000_000_000 + i) for i in range(50)]
    confluent_produce(server.bootstrap, topic, recs)
    return topic, recs


def _still_serving(server, acked):
    topic, recs = acked
    got = CONSUME["confluent"](server.bootstrap, topic, 2, len(recs))
    assert sorted(g.value for g in got) == sorted(r.value for r in recs)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x05hello",                       # header shorter than 10 bytes
    b"\x00\x00\x00\x0c" + b"\xff" * 12,              # api key -1
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",            # HTTP on the Kafka port (frame of 1.2 GB)
    b"\xff\xff\xff\xf0",                             # negative frame size
    b"\x00\x00\x00\x0c\x00\x03\x00\x09\x00\x00\x00\x01\x00\x02ab",  # Metadata v9, body missing
])
def test_garbage_closes_connection(server, acked, payload):
    with RawClient(server.bootstrap) as c:
        c.send_bytes(payload)
        assert c.is_closed()
    _still_serving(server, acked)


def test_frame_over_limit_is_refused_without_allocating(server, acked):
    with RawClient(server.bootstrap) as c:
        c.send_bytes(struct.pack(">i", 2**31 - 1) + b"\x00\x12\x00\x00")
        assert c.is_closed()
    assert "exceeds socket.request.max.bytes" in server.output()
    _still_serving(server, acked)


def test_unknown_api_key_and_version(server, acked):
    with RawClient(server.bootstrap) as c:
        c.send_bytes(struct.pack(">ihhih", 10, 999, 0, 1, -1))
        assert c.is_closed()
    with RawClient(server.bootstrap) as c:  # Produce v99
        c.send_bytes(struct.pack(">ihhih", 10, 0, 99, 1, -1))
        assert c.is_closed()
    _still_serving(server, acked)


def test_api_versions_unknown_version_answers_v0(server):
    with RawClient(server.bootstrap) as c:
        c.corr = 41
        c.send_bytes(struct.pack(">ihhih", 10, 18, 99, 42, -1))
        frame = c.recv_frame()
        corr, err = struct.unpack_from(">ih", frame, 0)
        assert (corr, err) == (42, 35)  # UNSUPPORTED_VERSION, v0 body, header v0
        (n,) = struct.unpack_from(">i", frame, 6)
        keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(n)}
        assert (18, 0, 4) in keys and any(k[0] == 0 for k in keys)


def test_unknown_tagged_fields_still_decode(server, acked):
    topic, _ = acked
    with RawClient(server.bootstrap) as c:
        # ApiVersions v3 body: two compact strings then a tag section with tag 10000
        body = b"\x02x\x021" + _uvarint(1) + _uvarint(10000) + _uvarint(3) + b"abc"
        hdr = struct.pack(">hhih", 18, 3, 7, 3) + b"raw" + b"\x00"
        c.send_bytes(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
        frame = c.recv_frame()
        assert struct.unpack_from(">ih", frame, 0) == (7, 0)
        # Metadata v12 with an unknown tag inside the nested topic entry
        name = topic.encode()
        topics = _uvarint(2) + b"\x00" * 16 + _uvarint(len(name) + 1) + name + _uvarint(1) + _uvarint(12345) + _uvarint(1) + b"z"
        body = topics + b"\x00" + b"\x00" + b"\x00"  # allow_auto_create=false, include_topic_ops=false, no tags
        hdr = struct.pack(">hhih", 3, 12, 8, 3) + b"raw" + b"\x00"
        c.send_bytes(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
        frame = c.recv_frame()
        assert struct.unpack_from(">i", frame, 0)[0] == 8
        assert name in frame


def _produce(c: RawClient, topic: str, partition: int, records: bytes):
    return c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})


def _err(resp) -> int:
    return resp.responses[0].partition_responses[0].error_code


def test_bad_batches_get_kafka_errors(server, acked):
    topic, _ = acked
    good = build_batch([(b"k", b"v", [], 1_700_000_000_000)])
    with RawClient(server.bootstrap) as c:
        bad_crc = bytearray(good)
        bad_crc[-1] ^= 0xFF
        assert _err(_produce(c, topic, 0, bytes(bad_crc))) == 2  # CORRUPT_MESSAGE
        bad_magic = bytearray(good)
        bad_magic[16] = 7
        assert _err(_produce(c, topic, 0, bytes(bad_magic))) == 2  # CORRUPT_MESSAGE
        old_magic = bytearray(good)
        old_magic[16] = 1
        assert _err(_produce(c, topic, 0, bytes(old_magic))) == 87  # INVALID_RECORD (Kafka: magic 2 only)
        assert _err(_produce(c, topic, 0, good[:-3])) == 2  # truncated batch
        assert _err(_produce(c, topic, 9, good)) == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert _err(_produce(c, "no-such-topic-xyz", 0, good)) == 3
        ok = _produce(c, topic, 1, good)  # the same connection still works
        assert _err(ok) == 0
        assert ok.responses[0].partition_responses[0].base_offset == 25
    _still_serving_after_extra(server, acked)


def _still_serving_after_extra(server, acked):
    topic, recs = acked
    got = CONSUME["confluent"](server.bootstrap, topic, 2, len(recs) + 1)
    assert len(got) == len(recs) + 1


def test_acks_zero(server, acked):
    topic, _ = acked
    good = build_batch([(b"k", b"fire-and-forget", [], 1_700_000_000_000)])
    with RawClient(server.bootstrap) as c:
        body = {"transactional_id": None, "acks": 0, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": good}]}]}
        c.request(0, 9, body, expect_response=False)  # no response for acks=0
        r = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        assert r.cluster_id  # the next response is the metadata one
        body["topic_data"][0]["partition_data"][0]["index"] = 99  # unknown partition
        c.request(0, 9, body, expect_response=False)
        assert c.is_closed(), "a failed acks=0 produce closes the connection"
    with RawClient(server.bootstrap) as c:
        body = {"transactional_id": None, "acks": 2, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": good}]}]}
        assert _err(c.request(0, 9, body)) == 21  # INVALID_REQUIRED_ACKS
