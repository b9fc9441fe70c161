"""Durability across restarts: kill -9, clean stop, and a torn tail written by hand."""

from __future__ import annotations

import os

import pytest

from hightide.protocol.records import build_batch

from ..rawkafka import RawClient
from .clients import Rec, confluent_consume, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


def _records(n: int, partitions: int, start: int = 0) -> list[Rec]:
    return [Rec(i % partitions, f"k{i}".encode(), f"value-{i}".encode() * 3, (("i", str(i).encode()),),
                1_700_000_000_000 + (i * 7919) % 100_000) for i in range(start, start + n)]


def _check(got, records, positions):
    seen = {(g.partition, g.offset): (g.value, g.timestamp) for g in got}
    assert len(seen) == len(got) == len(records)
    for r, pos in zip(records, positions):
        assert seen[pos] == (r.value, r.timestamp)


def test_kill9_keeps_every_acknowledged_record(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 3)
    recs = _records(600, 3)
    positions = confluent_produce(srv.bootstrap, topic_name, recs)
    srv.kill9()
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    _check(confluent_consume(srv2.bootstrap, topic_name, 3, len(recs)), recs, positions)
    more = _records(30, 3, start=600)
    pos2 = confluent_produce(srv2.bootstrap, topic_name, more)
    assert sorted(pos2)[-1][1] == 209  # offsets continue where they stopped (200 per partition + 10)
    srv2.kill9()
    srv3 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    _check(confluent_consume(srv3.bootstrap, topic_name, 3, len(recs) + 30), recs + more, positions + pos2)
    assert srv3.stop() == 0
    assert "stopped cleanly" in srv3.output()


def _active_log(data_dir, topic, partition=0):
    d = os.path.join(data_dir, f"{topic}-{partition}")
    logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    return os.path.join(d, logs[-1])


@pytest.mark.parametrize("stop", ["clean", "kill9"])
def test_torn_tail_is_truncated(fresh_server, topic_name, stop):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    recs = _records(20, 1)
    positions = confluent_produce(srv.bootstrap, topic_name, recs)
    srv.stop() if stop == "clean" else srv.kill9()
    path = _active_log(srv.data_dir, topic_name)
    size = os.path.getsize(path)
    torn = build_batch([(b"x", b"y" * 500, [], 1)], base_offset=20)
    with open(path, "ab") as f:
        f.write(torn[: len(torn) // 2])  # a batch cut off mid-write
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    assert os.path.getsize(path) == size, "torn tail must be truncated on recovery"
    assert "truncat" in srv2.output().lower()
    with RawClient(srv2.bootstrap) as c:
        resp = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
        assert resp.topics[0].partitions[0].offset == 20
    more = _records(1, 1, start=20)
    assert confluent_produce(srv2.bootstrap, topic_name, more) == [(0, 20)]
    _check(confluent_consume(srv2.bootstrap, topic_name, 1, 21), recs + more, positions + [(0, 20)])


def _batches(path) -> list[tuple[int, int, int]]:
    """(base offset, file position, size) of every record batch in a segment file, read
    from the v2 headers (BaseOffset int64, then Length int32 counting the rest)."""
    out, pos = [], 0
    with open(path, "rb") as f:
        data = f.read()
    while pos + 12 <= len(data):
        base, length = int.from_bytes(data[pos:pos + 8], "big"), int.from_bytes(data[pos + 8:pos + 12], "big")
        out.append((base, pos, 12 + length))
        pos += 12 + length
    assert pos == len(data), "the segment ends inside a batch header"
    return out


@pytest.mark.parametrize("last_batches", [1, 3], ids=["one-last-batch", "split-last-records"])
def test_corrupt_crc_in_tail_is_truncated(fresh_server, topic_name, last_batches):
    """A bad CRC in the last batch truncates exactly that batch, however the producer
    batched the records (a loaded machine may split one produce call into several
    batches: the expected offset is read from the file, never assumed)."""
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    for i in range(2):
        confluent_produce(srv.bootstrap, topic_name, _records(5, 1, start=5 * i))
    for start, n in {1: [(10, 5)], 3: [(10, 2), (12, 2), (14, 1)]}[last_batches]:
        confluent_produce(srv.bootstrap, topic_name, _records(n, 1, start=start))
    srv.kill9()
    path = _active_log(srv.data_dir, topic_name)
    batches = _batches(path)
    assert len(batches) >= 2 + last_batches
    last_base, last_pos, _ = batches[-1]
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 3)
        f.write(b"\xde\xad\xbe")  # flip bytes in the last batch's records
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    assert os.path.getsize(path) == last_pos, "only the corrupt batch is truncated"
    with RawClient(srv2.bootstrap) as c:
        resp = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
        assert resp.topics[0].partitions[0].offset == last_base
    assert "crc" in srv2.output().lower()
