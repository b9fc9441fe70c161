"""Fetch semantics on the wire: long-poll, byte limits, topic ids, pipelining order,
and the retention / flush policies seen through the protocol."""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest


from hightide.protocol.codec import encode_request
from hightide.protocol.build import materialize
from kio.index import load_request_schema

from ..rawkafka import RawClient
from ..waiting import wait_until
from .clients import Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


def fetch_body(topic, partitions, *, max_wait=0, min_bytes=1, max_bytes=1 << 20, pmax=1 << 20, version=12,
               topic_id=None):
    t = {"topic": topic, "topic_id": topic_id, "partitions": [
        {"partition": p, "fetch_offset": off, "partition_max_bytes": pmax, "current_leader_epoch": -1,
         "log_start_offset": -1, "last_fetched_epoch": -1} for p, off in partitions]}
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [t],
            "forgotten_topics_data": [], "rack_id": ""}


@pytest.fixture
def topic3(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 3)
    recs = [Rec(i % 3, None, b"v" * 1000, (), 1_700_000_000_000 + i) for i in range(60)]
    for i in range(0, 60, 6):  # 10 produce calls -> several batches per partition
        confluent_produce(server.bootstrap, topic_name, recs[i:i + 6], extra={"linger.ms": 0})
    return topic_name


def test_long_poll_waits_then_wakes_on_produce(server, topic3):
    with RawClient(server.bootstrap) as c:
        t0 = time.monotonic()
        r = c.request(1, 12, fetch_body(topic3, [(0, 20)], max_wait=400, min_bytes=1))
        waited = time.monotonic() - t0
        assert r.responses[0].partitions[0].records in (None, b"")
        assert 0.35 <= waited < 3, waited
        threading.Timer(0.3, lambda: confluent_produce(server.bootstrap, topic3,
                                                       [Rec(0, None, b"wake", (), 1)])).start()
        t0 = time.monotonic()
        r = c.request(1, 12, fetch_body(topic3, [(0, 20)], max_wait=10000, min_bytes=1))
        assert b"wake" in r.responses[0].partitions[0].records
        assert time.monotonic() - t0 < 5


def test_min_bytes_returns_immediately_when_satisfied(server, topic3):
    with RawClient(server.bootstrap) as c:
        t0 = time.monotonic()
        r = c.request(1, 12, fetch_body(topic3, [(0, 0), (1, 0)], max_wait=5000, min_bytes=1000))
        assert time.monotonic() - t0 < 1
        assert all(len(p.records) > 1000 for p in r.responses[0].partitions)


def test_partition_and_response_max_bytes(server, topic3):
    with RawClient(server.bootstrap) as c:
        # partition_max_bytes smaller than one batch: still one whole batch (KIP-74)
        r = c.request(1, 12, fetch_body(topic3, [(0, 0)], pmax=10))
        recs = r.responses[0].partitions[0].records
        (length,) = struct.unpack_from(">i", recs, 8)
        assert len(recs) == length + 12
        # response max_bytes: the first partition may exceed it, later ones are empty
        r = c.request(1, 12, fetch_body(topic3, [(0, 0), (1, 0), (2, 0)], max_bytes=100))
        sizes = [len(p.records or b"") for p in r.responses[0].partitions]
        assert sizes[0] > 100 and sizes[1:] == [0, 0]
        # fetch from the middle of a batch returns the whole batch containing it
        r = c.request(1, 12, fetch_body(topic3, [(0, 1)]))
        assert struct.unpack_from(">q", r.responses[0].partitions[0].records, 0)[0] <= 1


def test_topic_ids_on_v13(server, topic3):
    with RawClient(server.bootstrap) as c:
        md = c.request(3, 12, {"topics": [{"name": topic3, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        tid = md.topics[0].topic_id
        r = c.request(1, 13, fetch_body(None, [(2, 0)], topic_id=tid, version=13))
        p = r.responses[0].partitions[0]
        assert r.responses[0].topic_id == tid and p.error_code == 0 and p.high_watermark == 20
        r = c.request(1, 13, fetch_body(None, [(0, 0)], topic_id=uuid.uuid4(), version=13))
        assert r.responses[0].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID
        r = c.request(1, 12, fetch_body(topic3, [(0, 999)]))
        assert r.responses[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE


def test_pipelined_responses_keep_request_order(server, topic3):
    with RawClient(server.bootstrap) as c:
        frames = []
        # 1: long-poll that waits 500 ms; 2: metadata (instant); 3: fetch with data (instant)
        bodies = [(1, 12, fetch_body(topic3, [(0, 20)], max_wait=500)),
                  (3, 12, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}),
                  (1, 12, fetch_body(topic3, [(1, 0)]))]
        for i, (key, ver, body) in enumerate(bodies, start=100):
            frames.append(encode_request(key, ver, i, "pipe", materialize(load_request_schema(key, ver), body)))
        c.send_bytes(b"".join(frames))
        order = [struct.unpack_from(">i", c.recv_frame(), 0)[0] for _ in bodies]
        assert order == [100, 101, 102]


def test_time_retention_and_flush_every_message(fresh_server, topic_name):
    srv = fresh_server("--set", "log.retention.check.interval.ms=200", "--set", "log.flush.interval.messages=1")
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    compact = topic_name + "-compact"
    for name, policy in ((topic_name, "delete"), (compact, "compact")):
        admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "60000", "segment.bytes": "2000",
                                                          "cleanup.policy": policy})])[name].result(10)
    old = 1_000_000_000_000  # 2001: far past retention
    for name in (topic_name, compact):
        confluent_produce(srv.bootstrap, name, [Rec(0, b"k", b"o" * 500, (), old + i) for i in range(12)],
                          extra={"linger.ms": 0, "batch.size": 600})
    now = int(time.time() * 1000)
    confluent_produce(srv.bootstrap, topic_name, [Rec(0, None, b"n" * 500, (), now)] * 3,
                      extra={"linger.ms": 0, "batch.size": 600})
    with RawClient(srv.bootstrap) as c:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic_name, "partitions": [
            {"partition_index": 0, "timestamp": -2, "current_leader_epoch": -1}]}]}
        wait_until(lambda: c.request(2, 7, body).topics[0].partitions[0].offset >= 12, timeout=10, interval=0.1,
                   what="time retention to delete the old segments (log start offset >= 12)")
        body["topics"][0]["partitions"][0]["timestamp"] = -1
        assert c.request(2, 7, body).topics[0].partitions[0].offset == 15
        body["topics"][0]["name"] = compact  # compact-only: retention never deletes
        body["topics"][0]["partitions"][0]["timestamp"] = -2
        assert c.request(2, 7, body).topics[0].partitions[0].offset == 0
    assert "retention deleted" in srv.output()
