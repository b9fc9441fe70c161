"""Produce and consume round trips with every real client library and every codec."""

from __future__ import annotations

import random

import pytest

from .clients import CONSUME, CREATE, LIBRARIES, PRODUCE, Rec

pytestmark = pytest.mark.integration
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TS = 1_700_000_000_000


def make_records(n: int, partitions: int, seed: int) -> list[Rec]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 5 else bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 300)))
        if key is None and value is None:
            value = b"v"
        headers = () if i % 3 else (("h1", f"v{i}".encode()), ("h2", b""), ("h1", b"dup"))
        ts = BASE_TS + rnd.randint(-50_000, 50_000)  # out-of-order timestamps
        out.append(Rec(i % partitions, key, value, headers, ts))
    return out


def check_roundtrip(records, positions, got):
    assert len(got) == len(records)
    by_pos = {(g.partition, g.offset): g for g in got}
    assert len(by_pos) == len(got), "duplicate deliveries"
    for r, pos in zip(records, positions):
        g = by_pos[pos]
        assert (g.key, g.value, g.timestamp) == (r.key, r.value, r.timestamp)
        assert tuple((k, v or b"") for k, v in g.headers) == r.headers
    for p in {r.partition for r in records}:
        offsets = sorted(g.offset for g in got if g.partition == p)
        assert offsets == list(range(len(offsets))), "offsets must be dense from 0"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("library", LIBRARIES)
def test_roundtrip(server, topic_name, library, codec):
    partitions = 3
    CREATE[library](server.bootstrap, topic_name, partitions)
    records = make_records(120, partitions, seed=hash((library, codec)) & 0xFFFF)
    positions = PRODUCE[library](server.bootstrap, topic_name, records, codec)
    for lib in LIBRARIES:  # every library reads what every other wrote
        got = CONSUME[lib](server.bootstrap, topic_name, partitions, len(records))
        check_roundtrip(records, positions, got)
