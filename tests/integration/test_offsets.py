"""Committed offsets (seeds 000 and 001): every client reads back what it committed,
the OffsetFetch extension's high watermark matches ListOffsets, limits and conditional
commits behave as docs/offsets.md says, and commits survive kill -9."""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest

from hightide.protocol.codec import response_schema
from hightide.protocol.offset_commit_request import CommitPartition, encode_offset_commit_request
from hightide.protocol.offset_fetch_response import TAG_HIGH_WATERMARK, TAG_LAST_STABLE_OFFSET, TAG_LOG_START_OFFSET
from hightide.protocol.primitives import uvarint
from hightide.protocol.tolerant import read_tolerant

from ..rawkafka import RawClient
from .clients import Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 3)
    confluent_produce(server.bootstrap, topic_name, [Rec(i % 3, None, b"x", (), 1_700_000_000_000) for i in range(30)])
    return topic_name


ASK_LOG_OFFSETS = uvarint(1) + uvarint(10000) + uvarint(1) + b"\x01"  # a tag section: tag 10000, 1 byte: 1


def fetch_raw(c: RawClient, version: int, group: str, topic: str, partitions, ask: bool) -> tuple[bytes, dict]:
    """OffsetFetch ``version`` (6+) of one group's ``partitions``; ``ask``: with the
    request's top-level tag 10000 (IncludeLogOffsets) written by hand. The response frame
    (correlation id first) and the unknown tags of its tolerant decode."""
    from hightide.protocol.build import materialize
    from hightide.protocol.codec import encode_request, request_schema
    topics = [{"name": topic, "partition_indexes": list(partitions)}]
    body = {"group_id": group, "topics": topics, "require_stable": False,
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}]}
    c.corr += 1
    frame = encode_request(9, version, c.corr, "t", materialize(request_schema(9, version), body))
    assert frame[-1:] == b"\x00"  # OffsetFetch has no known top-level tag: an empty section
    if ask:
        body_bytes = frame[4:-1] + ASK_LOG_OFFSETS
        frame = struct.pack(">i", len(body_bytes)) + body_bytes
    c.send_bytes(frame)
    return c.recv_frame(), {}


def fetch_v9(c: RawClient, group: str, topic: str, partitions, ask: bool = True):
    frame, unknown = fetch_raw(c, 9, group, topic, partitions, ask)
    resp, _ = read_tolerant(response_schema(9, 9), frame, 5, unknown)
    return resp.groups[0], unknown


def commit_v9(c: RawClient, group: str, topic: str, parts: list[CommitPartition], generation=-1, member=""):
    c.corr += 1
    c.send_bytes(encode_offset_commit_request(9, c.corr, "t", group, generation, member, None, [(topic, parts)]))
    resp = c.decode_response(8, 9, c.recv_frame())
    return {p.partition_index: p.error_code for p in resp.topics[0].partitions}


def test_every_client_reads_back_its_commits(server, topic):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g-confluent", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 7, "state-file-a"), TopicPartition(topic, 1, 3)], asynchronous=False)
    got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 2)], timeout=10)
    assert [(t.offset, t.metadata) for t in got][:2] == [(7, "state-file-a"), (3, None)]
    assert got[2].offset < 0  # nothing committed: -1001 (librdkafka's OFFSET_INVALID)
    c.close()

    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    k = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="g-kafka-python", enable_auto_commit=False)
    k.commit({KTP(topic, 2): OffsetAndMetadata(9, "kp-meta", -1)})
    assert k.committed(KTP(topic, 2), metadata=True).offset == 9
    assert k.committed(KTP(topic, 2), metadata=True).metadata == "kp-meta"
    k.close()

    async def aio():
        from aiokafka import AIOKafkaConsumer, TopicPartition as ATP
        from aiokafka.structs import OffsetAndMetadata as AOM
        a = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, group_id="g-aiokafka", enable_auto_commit=False)
        await a.start()
        try:
            a.assign([ATP(topic, 1)])
            await a.commit({ATP(topic, 1): AOM(4, "aio-meta")})
            assert await a.committed(ATP(topic, 1)) == 4
        finally:
            await a.stop()
    asyncio.run(aio())


def test_one_call_high_watermark_matches_list_offsets(server, topic):
    with RawClient(server.bootstrap) as c:
        assert commit_v9(c, "g-hwm", topic, [CommitPartition(0, 4), CommitPartition(1, 10)]) == {0: 0, 1: 0}
        group, unknown = fetch_v9(c, "g-hwm", topic, [0, 1, 2])
        lo = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1} for p in range(3)]}]})
        hw = {p.partition_index: p.offset for p in lo.topics[0].partitions}
        for p in group.topics[0].partitions:
            tags = unknown[id(p)]
            assert struct.unpack(">q", tags[TAG_HIGH_WATERMARK])[0] == hw[p.partition_index] == 10
            assert struct.unpack(">q", tags[TAG_LOG_START_OFFSET])[0] == 0
            assert struct.unpack(">q", tags[TAG_LAST_STABLE_OFFSET])[0] == 10
        lag = {p.partition_index: hw[p.partition_index] - p.committed_offset for p in group.topics[0].partitions
               if p.committed_offset >= 0}
        assert lag == {0: 6, 1: 0}


def test_log_offsets_tags_only_when_asked(server, topic):
    """Issue 29 item 1: without the request's tag 10000 the answer carries no tag at all
    (Kafka never sends any there; librdkafka < 2.2 cannot skip them), on every flexible
    version; with it, every partition carries the three."""
    from kio.serial import entity_reader
    with RawClient(server.bootstrap) as c:
        assert commit_v9(c, "g-ask", topic, [CommitPartition(0, 4)]) == {0: 0}
        for version in (6, 7, 8, 9):
            frame, _ = fetch_raw(c, version, "g-ask", topic, [0, 1], ask=False)
            unknown: dict = {}
            read_tolerant(response_schema(9, version), frame, 5, unknown)
            assert unknown == {}, version
            entity_reader(response_schema(9, version))(frame, 5)  # kio's strict reader: no unknown tag
            frame, unknown = fetch_raw(c, version, "g-ask", topic, [0, 1], ask=True)
            resp, _ = read_tolerant(response_schema(9, version), frame, 5, unknown)
            parts = resp.groups[0].topics[0].partitions if version >= 8 else resp.topics[0].partitions
            assert [sorted(unknown[id(p)]) for p in parts] == [[10000, 10001, 10002]] * 2, version


def test_limits_and_unknown_partitions(server, topic):
    with RawClient(server.bootstrap) as c:
        errs = commit_v9(c, "g-limits", topic, [CommitPartition(0, 1, metadata="m" * 4097),
                                                CommitPartition(1, 2, metadata="m" * 4096),
                                                CommitPartition(9, 3)])
        assert errs == {0: 12, 1: 0, 9: 3}  # OFFSET_METADATA_TOO_LARGE, ok, UNKNOWN_TOPIC_OR_PARTITION
        group, _ = fetch_v9(c, "g-unknown-group", topic, [0])
        p = group.topics[0].partitions[0]
        assert (p.committed_offset, p.error_code, group.error_code) == (-1, 0, 0)


def test_conditional_commits_race_exactly_one_wins(server, topic):
    rounds, clients = 10, 4
    conns = [RawClient(server.bootstrap) for _ in range(clients)]
    try:
        expected = -1
        for r in range(rounds):
            results = [None] * clients
            barrier = threading.Barrier(clients)

            def attempt(i):
                barrier.wait()
                results[i] = commit_v9(conns[i], "g-cas", topic,
                                       [CommitPartition(0, 100 * (r + 1) + i, expected_offset=expected)])[0]

            threads = [threading.Thread(target=attempt, args=(i,)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            winners = [i for i, e in enumerate(results) if e == 0]
            assert len(winners) == 1, results
            assert all(e == 78 for i, e in enumerate(results) if i not in winners)  # OFFSET_NOT_AVAILABLE
            group, _ = fetch_v9(conns[0], "g-cas", topic, [0])
            expected = group.topics[0].partitions[0].committed_offset
            assert expected == 100 * (r + 1) + winners[0]
    finally:
        for c in conns:
            c.close()


def test_offset_delete(server, topic):
    with RawClient(server.bootstrap) as c:
        commit_v9(c, "g-del", topic, [CommitPartition(0, 5), CommitPartition(1, 6)])
        r = c.request(47, 0, {"group_id": "g-del", "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]})
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
        group, _ = fetch_v9(c, "g-del", topic, [0, 1])
        assert [p.committed_offset for p in group.topics[0].partitions] == [-1, 6]
        r = c.request(47, 0, {"group_id": "g-nope", "topics": []})
        assert r.error_code == 69  # GROUP_ID_NOT_FOUND


def test_commits_survive_kill9(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    with RawClient(srv.bootstrap) as c:
        for g in range(20):
            commit_v9(c, f"group-{g}", topic_name, [CommitPartition(0, g, metadata=f"m{g}"), CommitPartition(1, 2 * g)])
        commit_v9(c, "group-0", topic_name, [CommitPartition(0, 1000)])
    srv.kill9()
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as c:
        for g in range(20):
            group, _ = fetch_v9(c, f"group-{g}", topic_name, [0, 1])
            p0, p1 = group.topics[0].partitions
            assert (p0.committed_offset, p0.metadata, p1.committed_offset) == \
                ((1000, "", 0) if g == 0 else (g, f"m{g}", 2 * g))
