"""Produce writes batches straight from the receive buffer (records are views of the
frame, patched in place): many Produce requests with different payloads pipelined in one
TCP write, under back-pressure, with answers that wait for fsync, to plain, durable
(flush.messages=1), compacted, recompressing and idempotent partitions, plus a
transactional producer; then everything is read back and compared byte for byte. A
request whose records outlived their receive buffer, or a batch patched or written from
the wrong place, shows up as wrong or missing records here."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request, request_schema
from hightide.protocol.records import build_batch, decode_records, scan_batches
from hightide.protocol.tolerant import read_tolerant
from kio.index import load_response_schema

from ..rawkafka import RawClient
from .clients import confluent_create_topic

pytestmark = pytest.mark.integration

TS = 1_700_000_000_000
INVALID_RECORD = 87


def _topics(bootstrap: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    names = {kind: f"alias-{kind}-{tag}" for kind in ("plain", "durable", "compact", "gzip", "idem")}
    confluent_create_topic(bootstrap, names["plain"], 2)
    confluent_create_topic(bootstrap, names["durable"], 1, {"flush.messages": "1"})
    confluent_create_topic(bootstrap, names["compact"], 1, {"cleanup.policy": "compact"})
    confluent_create_topic(bootstrap, names["gzip"], 1, {"compression.type": "gzip"})
    confluent_create_topic(bootstrap, names["idem"], 1)
    return names


def _records(rnd: random.Random, tag: str, keyed: bool, sizes: list[int]) -> list[tuple[bytes | None, bytes, list, int]]:
    """1-4 records with distinct contents and sizes (``sizes``, plus a tag)."""
    out = []
    for j in range(rnd.randint(1, 4)):
        value = f"{tag}/{j}/".encode() + rnd.randbytes(rnd.choice(sizes))
        key = f"k-{tag}-{j}".encode() if keyed or rnd.random() < 0.3 else None
        out.append((key, value, [("h", tag.encode())] if rnd.random() < 0.3 else [], TS + j))
    return out


class Pipeline:
    """Builds Produce v9 requests, remembers what each partition should end up holding."""

    def __init__(self, names: dict[str, str], pid: int, seed: int, sizes: list[int]) -> None:
        self.names, self.pid, self.rnd, self.sizes = names, pid, random.Random(seed), sizes
        self.expected: dict[tuple[str, int], list[tuple[bytes, list]]] = {}  # (topic, partition) -> [(batch, recs)]
        self.refused: set[int] = set()  # correlation ids whose compact partition must be refused
        self.seq = 0

    def _batch(self, topic: str, partition: int, tag: str, *, keyed: bool = False, idem: bool = False,
               codec: int = 0) -> bytes:
        recs = _records(self.rnd, tag, keyed, self.sizes)
        kw = {"producer_id": self.pid, "producer_epoch": 0, "base_sequence": self.seq} if idem else {}
        if idem:
            self.seq += len(recs)
        batch = build_batch(recs, compression=codec, **kw)
        self.expected.setdefault((topic, partition), []).append((batch, recs))
        return batch

    def frame(self, corr: int) -> bytes:
        n = self.names
        tag = f"r{corr}"
        compact_keyed = corr % 5 != 3  # every fifth request carries a keyless record: INVALID_RECORD
        if compact_keyed:
            compact = self._batch(n["compact"], 0, tag, keyed=True)
        else:
            self.refused.add(corr)
            compact = build_batch([(None, f"{tag}/keyless".encode(), [], TS)])
        topic_data = [
            {"name": n["plain"], "partition_data": [{"index": p, "records": self._batch(n["plain"], p, f"{tag}p{p}")}
                                                    for p in (0, 1)]},
            {"name": n["durable"], "partition_data": [{"index": 0, "records": self._batch(n["durable"], 0, tag)}]},
            {"name": n["compact"], "partition_data": [{"index": 0, "records": compact}]},
            {"name": n["gzip"], "partition_data": [{"index": 0, "records": self._batch(
                n["gzip"], 0, tag, codec=corr % 2 * 3)}]},  # none or lz4: recompressed to gzip
            {"name": n["idem"], "partition_data": [{"index": 0, "records": self._batch(n["idem"], 0, tag, idem=True)}]},
        ]
        body = {"transactional_id": None, "acks": -1 if corr % 2 else 1, "timeout": 10_000, "topic_data": topic_data}
        return encode_request(0, 9, corr, "alias", materialize(request_schema(0, 9), body))


def _init_producer_id(c: RawClient) -> int:
    init = c.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                             "producer_epoch": -1})
    assert init.error_code == 0
    return init.producer_id


def _produce_pipelined(bootstrap: str, names: dict[str, str], requests: int, seed: int,
                       sizes: list[int]) -> Pipeline:
    """Every request in one TCP write; checks every answer."""
    with RawClient(bootstrap, timeout=60) as c:
        pipe = Pipeline(names, _init_producer_id(c), seed, sizes)
        frames = [pipe.frame(corr) for corr in range(1, requests + 1)]
        c.send_bytes(b"".join(frames))
        cls = load_response_schema(0, 9)
        for corr in range(1, requests + 1):
            frame = c.recv_frame()
            assert struct.unpack_from(">i", frame)[0] == corr
            resp, _ = read_tolerant(cls, frame, 5)
            for t in resp.responses:
                for p in t.partition_responses:
                    refused = t.name == names["compact"] and corr in pipe.refused
                    assert p.error_code == (INVALID_RECORD if refused else 0), (corr, t.name, p)
    return pipe


def _read_back(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every stored batch of the partition, in offset order."""
    from .test_fetch import fetch_body
    out: list[bytes] = []
    offset = 0
    with RawClient(bootstrap, timeout=30) as c:
        while True:
            r = c.request(1, 12, fetch_body(topic, [(partition, offset)], max_wait=0))
            p = r.responses[0].partitions[0]
            assert p.error_code == 0
            data = p.records or b""
            headers = scan_batches(data).headers
            if not headers:
                assert offset == p.high_watermark
                return out
            for h in headers:
                if h.base_offset >= offset:
                    out.append(bytes(data[h.position:h.position + h.size]))
                    offset = h.last_offset + 1


def _check(bootstrap: str, pipe: Pipeline) -> None:
    for (topic, partition), sent in pipe.expected.items():
        stored = _read_back(bootstrap, topic, partition)
        assert len(stored) == len(sent), (topic, partition)
        offset = 0
        for got, (batch, recs) in zip(stored, sent):
            assert struct.unpack_from(">q", got)[0] == offset
            decoded = decode_records(got)
            assert [(r.key, r.value, [(k, v) for k, v in r.headers]) for r in decoded] == [
                (k, v, [(hk, hv.encode() if isinstance(hv, str) else hv) for hk, hv in h]) for k, v, h, _ in recs]
            if "gzip" in topic:
                assert struct.unpack_from(">h", got, 21)[0] & 7 == 1  # stored gzip-compressed
            else:  # byte-exact from the magic byte on (BaseOffset, length and epoch are the broker's)
                assert got[16:] == batch[16:] and got[8:12] == batch[8:12]
            offset += len(recs)


def test_pipelined_produce_requests_in_one_write_read_back_byte_exact(server):
    names = _topics(server.bootstrap)
    pipe = _produce_pipelined(server.bootstrap, names, 40, seed=1, sizes=[1, 90, 1500, 12_000])
    _check(server.bootstrap, pipe)


def test_pipelined_produce_under_back_pressure_read_back_byte_exact(fresh_server):
    """queued.max.requests=2: most requests wait as frames in the connection (copied
    before the receive buffer is reused) while earlier answers wait for fsync."""
    srv = fresh_server("--set", "queued.max.requests=2")
    names = _topics(srv.bootstrap)
    pipe = _produce_pipelined(srv.bootstrap, names, 150, seed=2, sizes=[1, 50, 400])  # many frames per receive
    _check(srv.bootstrap, pipe)
    _transactional_round(srv.bootstrap)


def _transactional_round(bootstrap: str) -> None:
    """A transactional producer (pipelined, idempotent batches) against the same
    back-pressured connection limit: committed values read back exactly, aborted ones not."""
    ck = pytest.importorskip("confluent_kafka")
    topic = f"alias-txn-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(bootstrap, topic, 2)
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 1,
                     "batch.num.messages": 3})
    p.init_transactions(15)
    rnd = random.Random(3)
    committed: list[bytes] = []
    for txn in range(4):
        p.begin_transaction()
        values = [f"t{txn}/{i}/".encode() + rnd.randbytes(rnd.choice([10, 3000])) for i in range(60)]
        for i, v in enumerate(values):
            p.produce(topic, v, partition=i % 2)
        if txn == 2:
            p.abort_transaction(15)
        else:
            p.commit_transaction(15)
            committed += values
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, part, ck.OFFSET_BEGINNING) for part in range(2)])
    got: list[bytes] = []
    eof: set[int] = set()
    try:
        while len(eof) < 2:
            m = c.poll(10)
            assert m is not None, "consumer stalled"
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF
                eof.add(m.partition())
            else:
                got.append(m.value())
    finally:
        c.close()
    assert sorted(got) == sorted(committed)
