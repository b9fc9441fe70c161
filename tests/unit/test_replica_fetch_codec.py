"""The follower's Fetch v17 by hand (protocol/replica_fetch.py) against kio: the request
bytes equal kio's encoding of the same entity; the answer's fields equal kio's decoding
of the same frame (random values, every optional part present and absent)."""

from __future__ import annotations

import random
import uuid

import pytest
from kio.index import load_response_schema

from hightide.protocol.build import materialize
from hightide.protocol.client_connection import decode_response
from hightide.protocol.codec import EncodedBody, encode_request, encode_response, request_schema
from hightide.protocol.fetch_response import PartitionData, TopicData, encode_fetch_response
from hightide.protocol.replica_fetch import (
    EpochEndOffset,
    FetchPartitionRequest,
    decode_replica_fetch_response,
    encode_replica_fetch,
)


def _i(rng: random.Random, bits: int) -> int:
    return rng.choice([-1, 0, 1, rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))])


@pytest.mark.parametrize("seed", range(40))
def test_request_matches_kio(seed: int) -> None:
    rng = random.Random(seed)
    topics = [(uuid.UUID(int=rng.getrandbits(128)), [
        FetchPartitionRequest(rng.randrange(1 << 31), _i(rng, 32), _i(rng, 64), _i(rng, 32), _i(rng, 64),
                              rng.randrange(1 << 31)) for _ in range(rng.randrange(0, 200 if seed == 0 else 4))])
        for _ in range(rng.randrange(0, 4))]
    replica_id, epoch = rng.randrange(1 << 31), _i(rng, 64)
    wait, min_bytes, max_bytes = rng.randrange(1 << 31), _i(rng, 32), _i(rng, 32)
    body = encode_replica_fetch(replica_id, epoch, wait, min_bytes, max_bytes, topics)
    entity = materialize(request_schema(1, 17), {
        "replica_state": {"replica_id": replica_id, "replica_epoch": epoch}, "max_wait": wait,
        "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic_id": tid, "partitions": [p._asdict() for p in parts]} for tid, parts in topics]})
    assert encode_request(1, 17, 7, "follower", body) == encode_request(1, 17, 7, "follower", entity)


def test_encoded_body_refuses_extension_tags() -> None:
    with pytest.raises(ValueError):
        encode_request(1, 17, 7, "f", EncodedBody(b"", True), {10000: b"x"})


def _code(rng: random.Random) -> int:
    return rng.choice([0, 1, 3, 6, 74, 75, 100])  # kio refuses codes it does not know


def _random_topics(rng: random.Random) -> list[TopicData]:
    out = []
    for _ in range(rng.randrange(0, 4)):
        parts = []
        for _ in range(rng.randrange(0, 4)):
            aborted = rng.choice([None, [], [(_i(rng, 64), _i(rng, 64)) for _ in range(rng.randrange(1, 4))]])
            records = rng.choice([b"", rng.randbytes(rng.randrange(1, 300)), rng.randbytes(200)])
            parts.append(PartitionData(
                rng.randrange(1 << 31), _code(rng), _i(rng, 64), _i(rng, 64), _i(rng, 64), aborted, _i(rng, 32),
                records, current_leader=rng.choice([None, (_i(rng, 32), _i(rng, 32))]),
                diverging_epoch=rng.choice([None, (_i(rng, 32), _i(rng, 64))])))
        out.append(TopicData(None, rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))]), parts))
    return out


@pytest.mark.parametrize("seed", range(60))
def test_answer_matches_kio(seed: int) -> None:
    rng = random.Random(seed)
    topics = _random_topics(rng)
    endpoints = rng.choice([None, [(1, "h", 9092, None), (2, "host-2", 1, "rack")]])
    bufs, _ = encode_fetch_response(17, 5, topics, throttle_ms=rng.randrange(1000), error_code=_code(rng),
                                    session_id=_i(rng, 32), node_endpoints=endpoints)
    frame = b"".join(bytes(b) for b in bufs)
    mine = decode_replica_fetch_response(frame)
    _, kio = decode_response(1, 17, frame)
    assert (mine.throttle_time_ms, mine.error_code, mine.session_id) == (
        kio.throttle_time.total_seconds() * 1000, kio.error_code, kio.session_id)
    assert len(mine.responses) == len(kio.responses)
    for t, kt in zip(mine.responses, kio.responses):
        assert t.topic_id == kt.topic_id
        assert len(t.partitions) == len(kt.partitions)
        for p, kp in zip(t.partitions, kt.partitions):
            assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                    p.preferred_read_replica) == (kp.partition_index, kp.error_code, kp.high_watermark,
                                                  kp.last_stable_offset, kp.log_start_offset,
                                                  kp.preferred_read_replica)
            assert (None if p.aborted_transactions is None else [tuple(a) for a in p.aborted_transactions]) == (
                None if kp.aborted_transactions is None else
                [(a.producer_id, a.first_offset) for a in kp.aborted_transactions])
            assert (None if p.records is None else bytes(p.records)) == kp.records
            assert p.records is None or p.records.readonly
            expected = kp.diverging_epoch
            assert (p.diverging_epoch or EpochEndOffset(-1, -1)) == (expected.epoch, expected.end_offset)


def test_answer_with_null_records_and_unknown_tags() -> None:
    """What kio's own encoder writes (null records) and tags this decoder skips."""
    cls = load_response_schema(1, 17)
    entity = materialize(cls, {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic_id": uuid.UUID(int=3), "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 5, "aborted_transactions": None,
             "records": None, "snapshot_id": {"end_offset": 4, "epoch": 2},
             "diverging_epoch": {"epoch": 1, "end_offset": 3}}]}]})
    frame = encode_response(1, 17, 9, entity)[4:]
    p = decode_replica_fetch_response(frame).responses[0].partitions[0]
    assert (p.records, p.diverging_epoch, p.high_watermark) == (None, (1, 3), 5)


@pytest.mark.parametrize("seed", range(30))
def test_truncated_or_corrupt_answers_raise(seed: int) -> None:
    """A cut or corrupted frame raises one of the errors the connection turns into
    CORRUPT_MESSAGE, never anything else, and never allocates from a hostile length."""
    rng = random.Random(seed)
    topics = _random_topics(rng) or [TopicData(None, uuid.UUID(int=1), [PartitionData(0, records=b"x" * 80)])]
    frame = b"".join(bytes(b) for b in encode_fetch_response(17, 5, topics)[0])
    for cut in range(0, len(frame) - 1, max(1, len(frame) // 40)):
        with pytest.raises((ValueError, IndexError, __import__("struct").error)):
            decode_replica_fetch_response(frame[:cut])
    for _ in range(50):
        bad = bytearray(frame)
        bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            decode_replica_fetch_response(bytes(bad))
        except (ValueError, IndexError, __import__("struct").error):
            pass
