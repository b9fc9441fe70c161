"""Record batches → Arrow (the read path's decoder) against the reference decoder."""

from __future__ import annotations

import random

import pytest

from hightide.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    TIMESTAMP_LOG_APPEND_TIME,
    InvalidRecords,
    build_batch,
    decode_records,
)
from hightide.spark.columnar import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, decode_to_arrow
from hightide.spark.sink import murmur2


def _records(rng: random.Random, n: int, base_ts: int) -> list:
    out = []
    for _ in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 300))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 100, 200, 20000]))
        headers = [] if rng.random() < 0.7 else [(f"h{j}", None if j == 2 else rng.randbytes(j * 3))
                                                 for j in range(rng.randrange(1, 4))]
        out.append((key, value, headers, base_ts + rng.randrange(-5000, 5000)))
    return out


def _expected(batches: list[bytes]) -> list:
    return [r for b in batches for r in decode_records(b)]


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
                                   COMPRESSION_ZSTD])
def test_decode_matches_the_reference_decoder(codec):
    rng = random.Random(codec)
    batches, base = [], 1000
    for size in (1, 50, 300, 7):
        recs = _records(rng, size, 1_700_000_000_000)
        batches.append(build_batch(recs, base_offset=base, compression=codec))
        base += size + rng.randrange(0, 3)  # gaps, as after compaction
    batches.append(build_batch([(b"k", b"v", [], 5)] * 4, base_offset=base,
                               timestamp_type=TIMESTAMP_LOG_APPEND_TIME))
    d = decode_to_arrow(b"".join(batches), "topic-a", 7, 0, 10**12, include_headers=True)
    assert d.batch.schema == ARROW_SCHEMA_WITH_HEADERS
    got = d.batch.to_pylist()
    want = _expected(batches)
    assert len(got) == len(want) == d.rows
    for g, w in zip(got, want):
        assert (g["offset"], g["key"], g["value"]) == (w.offset, w.key, w.value)
        assert round(g["timestamp"].timestamp() * 1000) == w.timestamp
        assert [(h["key"], h["value"]) for h in g["headers"]] == w.headers
        assert (g["topic"], g["partition"]) == ("topic-a", 7)
    assert [g["timestampType"] for g in got[-4:]] == [1] * 4 and got[0]["timestampType"] == 0
    assert d.next_offset == base + 4


def test_range_is_cut_exactly_and_partial_batches_wait():
    batches = [build_batch([(None, b"%d" % i, [], 10)] * 10, base_offset=b) for i, b in enumerate((0, 10, 20))]
    buf = b"".join(batches)
    d = decode_to_arrow(buf, "t", 0, 5, 23)
    assert d.batch.schema == ARROW_SCHEMA
    assert d.batch.column("offset").to_pylist() == list(range(5, 23))
    # a truncated last batch is left for the next fetch
    d = decode_to_arrow(buf[:-7], "t", 0, 0, 100)
    assert d.rows == 20 and d.next_offset == 20
    assert decode_to_arrow(b"", "t", 0, 0, 100).batch is None


def test_control_batches_are_skipped_but_advance():
    data = build_batch([(None, b"x", [], 1)] * 3, base_offset=0)
    ctl = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1)], base_offset=3, is_control=True)
    d = decode_to_arrow(data + ctl, "t", 0, 0, 100)
    assert d.rows == 3 and d.next_offset == 4


def test_corrupt_records_raise():
    b = bytearray(build_batch([(b"k", b"v" * 50, [], 1)] * 3))
    b[61] = 0x7F  # first record's length varint now disagrees with the batch
    with pytest.raises(InvalidRecords):
        decode_to_arrow(bytes(b), "t", 0, 0, 100)


def test_murmur2_matches_kafka():
    # Values from Kafka's UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    for data, want in cases.items():
        assert murmur2(data) == want


def test_vectorised_encoder_is_byte_identical_to_build_batch():
    import numpy as np
    import pyarrow as pa

    from hightide.spark.encode import Bytes, encode_batch, encode_headers, murmur2_array, tag_header
    rng = random.Random(7)
    n = 700
    keys = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 200)) for _ in range(n)]
    values = [None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 100, 300, 20000])) for _ in range(n)]
    user = [[] if rng.random() < 0.5 else [("a", b"1"), ("bb", None), ("ü", b"x" * 200)][:rng.randrange(1, 4)]
            for _ in range(n)]
    pos = np.arange(n, dtype=np.int64) * 977
    count, encoded = encode_headers(user)
    got = encode_batch(pa.array(keys, pa.binary()), pa.array(values, pa.binary()), timestamp=1_700_000_000_123,
                       producer_id=9, producer_epoch=2, base_sequence=40, header_count=count + 1,
                       headers=[Bytes(encoded), *tag_header("hightide.sink", "ab/3/1/", pos)])
    want = build_batch([(k, v, [*h, ("hightide.sink", f"ab/3/1/{p}".encode())], 1_700_000_000_123)
                        for k, v, h, p in zip(keys, values, user, pos)],
                       producer_id=9, producer_epoch=2, base_sequence=40)
    assert got == want
    plain = encode_batch(pa.array(keys, pa.binary()), pa.array(values, pa.binary()), timestamp=5, producer_id=-1,
                         producer_epoch=-1, base_sequence=-1, compression=COMPRESSION_ZSTD)
    assert [(r.key, r.value, r.headers) for r in decode_records(plain)] == [(k, v, []) for k, v in zip(keys, values)]
    some = [k for k in keys if k is not None]
    assert list(murmur2_array(pa.array(some, pa.binary()))) == [murmur2(k) for k in some]


def test_sink_routing_is_kafkas_and_deterministic():
    import numpy as np
    import pyarrow as pa

    from hightide.client import TopicPartition as TP
    from hightide.spark.sink import _Rows, default_partition, route
    keys = [b"a", None, b"bb", None, b"ccc", b"a", None]
    rows = _Rows(pa.array(keys, pa.binary()), pa.array([b"v"] * 7), None, None,
                 pa.array(["x", "x", "y", "y", "x", "x", "x"]), np.array([-1, -1, -1, -1, 1, -1, -1]))
    got = route(rows, {"x": 3, "y": 2}, task=5)
    want: dict = {}
    rr = 5
    for i, (k, t) in enumerate(zip(keys, ["x", "x", "y", "y", "x", "x", "x"])):
        n = 3 if t == "x" else 2
        if i == 4:
            p = 1
        elif k is None:
            p, rr = rr % n, rr + 1
        else:
            p = default_partition(k, n)
        want.setdefault(TP(t, p), []).append(i)
    assert {tp: list(v) for tp, v in got.items()} == want
    with pytest.raises(Exception, match="partition 7"):
        route(_Rows(pa.array([b"k"]), pa.array([b"v"]), None, None, pa.array(["x"]), np.array([7])), {"x": 3}, 0)
    with pytest.raises(Exception, match="do not exist"):
        route(rows, {"x": 3}, 0)
