"""Option parsing and offset arithmetic of the Spark source (pure, no Spark)."""

from __future__ import annotations

import json

import pytest

from hightide.client import TopicPartition as TP
from hightide.spark.options import (
    OptionError,
    SinkOptions,
    SourceOptions,
    from_offsets_dict,
    rate_limit,
    split_ranges,
    to_offsets_dict,
)

BASE = {"kafka.bootstrap.servers": "h:9092"}


def test_offsets_dict_has_a_stable_key_order():
    a = {TP("b", 10): 1, TP("a", 2): 5, TP("b", 9): 3, TP("a", 10): 7}
    d = to_offsets_dict(a)
    assert json.dumps(d) == '{"a": {"2": 5, "10": 7}, "b": {"9": 3, "10": 1}}'
    assert json.dumps(to_offsets_dict(dict(reversed(list(a.items()))))) == json.dumps(d)
    assert from_offsets_dict(d) == a


def test_subscription_strategies():
    assert SourceOptions.parse({**BASE, "subscribe": "a, b"}, True).subscribe == ("a", "b")
    o = SourceOptions.parse({**BASE, "subscribePattern": "ev.*"}, True)
    assert o.topic_filter("events") and not o.topic_filter("xevents")  # a full match, as in Java
    o = SourceOptions.parse({**BASE, "ASSIGN": '{"t": [1, 0]}'}, True)  # names are case-insensitive
    assert o.assign == (TP("t", 0), TP("t", 1))
    for bad in ({}, {"subscribe": "a", "assign": '{"t":[0]}'}, {"subscribePattern": "("}, {"assign": "[1]"}):
        with pytest.raises(OptionError):
            SourceOptions.parse({**BASE, **bad}, True)
    with pytest.raises(OptionError, match="bootstrap"):
        SourceOptions.parse({"subscribe": "a"}, True)


def test_starting_and_ending_specs():
    s = SourceOptions.parse({**BASE, "subscribe": "t"}, streaming=True)
    assert s.starting.kind == "latest"  # streaming default, as Spark
    b = SourceOptions.parse({**BASE, "subscribe": "t"}, streaming=False)
    assert (b.starting.kind, b.ending.kind) == ("earliest", "latest")
    o = SourceOptions.parse({**BASE, "subscribe": "t", "startingOffsets": '{"t":{"0":5,"1":-2}}',
                             "endingOffsets": '{"t":{"0":-1,"1":9}}'}, streaming=False)
    assert o.starting.per_partition == {TP("t", 0): 5, TP("t", 1): -2}
    assert o.ending.per_partition == {TP("t", 0): -1, TP("t", 1): 9}
    # precedence: timestamp > by-timestamp JSON > offsets
    o = SourceOptions.parse({**BASE, "subscribe": "t", "startingOffsets": "earliest",
                             "startingOffsetsByTimestamp": '{"t":{"0":100}}', "startingTimestamp": "7"}, True)
    assert (o.starting.kind, o.starting.timestamp) == ("timestamp", 7)
    o = SourceOptions.parse({**BASE, "subscribe": "t", "startingOffsets": "earliest",
                             "startingOffsetsByTimestamp": '{"t":{"0":100}}'}, True)
    assert o.starting.kind == "timestamps" and o.starting.per_partition == {TP("t", 0): 100}
    for bad, streaming in (({"startingOffsets": "latest"}, False), ({"endingOffsets": "earliest"}, False),
                           ({"endingOffsets": '{"t":{"0":-2}}'}, False), ({"startingOffsets": '{"t":{"0":-1}}'}, False),
                           ({"endingOffsets": "latest"}, True), ({"maxOffsetsPerTrigger": "10"}, False),
                           ({"maxOffsetsPerTrigger": "0"}, True), ({"failOnDataLoss": "maybe"}, True),
                           ({"startingOffsets": "{bad"}, True), ({"minOffsetsPerTrigger": "5"}, True),
                           ({"startingOffsetsByTimestampStrategy": "newest"}, True)):
        with pytest.raises(OptionError):
            SourceOptions.parse({**BASE, "subscribe": "t", **bad}, streaming)


def test_group_id_defaults_to_the_query_id():
    o = SourceOptions.parse({**BASE, "subscribe": "t"}, True)
    assert o.commit_group("q-1") == "spark-hightide-q-1"
    o = SourceOptions.parse({**BASE, "subscribe": "t", "groupIdPrefix": "etl"}, True)
    assert o.commit_group("q-1") == "etl-q-1"
    o = SourceOptions.parse({**BASE, "subscribe": "t", "groupId": "mine"}, True)
    assert o.commit_group("q-1") == "mine"


def test_rate_limit_splits_by_backlog():
    start = {TP("t", 0): 0, TP("t", 1): 100, TP("t", 2): 50}
    latest = {TP("t", 0): 600, TP("t", 1): 400, TP("t", 2): 50}
    end = rate_limit(start, latest, 90)
    # backlogs 600 and 300 of 900: shares 60 and 30; no backlog: unchanged
    assert end == {TP("t", 0): 60, TP("t", 1): 130, TP("t", 2): 50}
    assert rate_limit(start, latest, 10_000) == latest
    # a share below one record rounds up so a small partition is never starved
    end = rate_limit({TP("t", 0): 0, TP("t", 1): 0}, {TP("t", 0): 10_000, TP("t", 1): 1}, 100)
    assert end == {TP("t", 0): 99, TP("t", 1): 1}
    # nothing new: latest as is
    assert rate_limit(latest, latest, 5) == latest


def test_split_ranges():
    r = [(TP("t", 0), 0, 100), (TP("t", 1), 5, 5), (TP("t", 2), 0, 10)]
    assert split_ranges(r, None, None) == [(TP("t", 0), 0, 100), (TP("t", 2), 0, 10)]
    got = split_ranges(r, 6, None)
    assert sum(e - s for _, s, e in got) == 110 and len(got) >= 6
    for tp, lo, hi in ((TP("t", 0), 0, 100), (TP("t", 2), 0, 10)):
        pieces = sorted((s, e) for t, s, e in got if t == tp)
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))  # contiguous, no overlap
    got = split_ranges(r, None, 30)
    assert [(s, e) for t, s, e in got if t == TP("t", 0)] == [(0, 30), (30, 60), (60, 90), (90, 100)]


def test_sink_options():
    o = SinkOptions.parse({**BASE, "topic": "out", "kafka.compression.type": "lz4"})
    assert (o.topic, o.compression, o.exactly_once) == ("out", 3, True)
    with pytest.raises(OptionError):
        SinkOptions.parse({**BASE, "kafka.compression.type": "brotli"})
    with pytest.raises(OptionError):
        SinkOptions.parse({"topic": "x"})


def test_sink_batches_are_capped_by_records_and_bytes():
    import numpy as np
    import pyarrow as pa

    from hightide.spark.sink import _chunks, _Rows
    n = 30

    def rows(value: bytes) -> _Rows:
        return _Rows(pa.array([b"k"] * n), pa.array([value] * n), None, None, pa.array(["t"] * n),
                     np.full(n, -1))
    idx = np.arange(n)
    opts = SinkOptions.parse({**BASE, "topic": "t"})
    big = _chunks(rows(b"v" * 100_000), idx, opts)
    assert [b - a for a, b in big] == [5] * 6  # 5 x ~100 KB <= 512 KiB < 6 x
    assert big[0][0] == 0 and big[-1][1] == n and all(x[1] == y[0] for x, y in zip(big, big[1:]))
    small = SinkOptions.parse({**BASE, "topic": "t", "kafka.batch.records": "3", "kafka.batch.size": "10"})
    assert _chunks(rows(b"v" * 100_000), idx, small) == [(i, i + 1) for i in range(n)]  # oversized: alone
    assert _chunks(rows(b"x"), idx, SinkOptions.parse({**BASE, "kafka.batch.records": "7"})) == \
        [(0, 7), (7, 14), (14, 21), (21, 28), (28, 30)]
