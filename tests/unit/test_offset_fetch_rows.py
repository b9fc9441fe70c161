"""The OffsetFetch decoder into lag rows (protocol.offset_fetch_rows) reads every frame
as the tuple decoder (protocol.offset_fetch_response, itself held equal to kio's schema
walker) and kio's walker read it: for any frame (versions 1-9, partition errors,
metadata, extension tags present, partial, odd-sized or unknown, unsorted partitions)
its rows are exactly the rows the client built from the tuples before, and a mutated
frame is refused by one exactly when it is refused by the other."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.client import TopicPartition
from hightide.client.errors import ErrorCode
from hightide.protocol.codec import response_schema
from hightide.protocol.offset_fetch_response import decode_offset_fetch_response
from hightide.protocol.offset_fetch_rows import GroupRows, decode_offset_fetch_rows
from hightide.protocol.primitives import string, uvarint
from hightide.protocol.tolerant import read_tolerant

_BAD = (ValueError, IndexError, struct.error)


def _frame(version: int, corr: int, groups: list) -> bytes:
    """A response frame (no size prefix) built field by field; groups: [(id, error,
    [(topic, [(partition, offset, epoch, metadata, error, [(tag, bytes)])])])]."""
    flexible = version >= 6
    out = bytearray(struct.pack(">i", corr))

    def alen(n: int) -> bytes:
        return uvarint(n + 1) if flexible else struct.pack(">i", n)

    def topics(ts: list) -> None:
        out.extend(alen(len(ts)))
        for name, parts in ts:
            out.extend(string(name, flexible) + alen(len(parts)))
            for p, off, epoch, meta, err, tags in parts:
                out.extend(struct.pack(">iq", p, off))
                if version >= 5:
                    out.extend(struct.pack(">i", epoch))
                out.extend(string(meta, flexible) + struct.pack(">h", err))
                if flexible:
                    out.extend(uvarint(len(tags)))
                    for tag, val in tags:
                        out.extend(uvarint(tag) + uvarint(len(val)) + val)
            if flexible:
                out.append(0)
    if flexible:
        out.append(0)
    if version >= 3:
        out.extend(struct.pack(">i", 0))
    if version >= 8:
        out.extend(alen(len(groups)))
        for gid, err, ts in groups:
            out.extend(string(gid, True))
            topics(ts)
            out.extend(struct.pack(">h", err) + b"\x00")
    else:
        (_, err, ts), = groups
        topics(ts)
        if version >= 2:
            out.extend(struct.pack(">h", err))
    if flexible:
        out.append(0)
    return bytes(out)


def _reference(version: int, frame: bytes, read_committed: bool, use_ext: bool) -> list:
    """What the client made of the tuple decoder's answer (client.groups._committed_rows
    then client.lag.groups_lag_rows, before the one-step decoder)."""
    _, _, groups = decode_offset_fetch_response(version, frame)
    out = []
    for gid, code, topics in groups:
        rows, bad, committed = [], None, 0
        for name, parts in topics:
            for p, off, epoch, meta, err, hw, lso, lst in parts:
                if err:
                    if err != 3 and bad is None:
                        bad = (name, p, err)
                    continue
                if off < 0:
                    continue
                tp = TopicPartition(name, p)
                if use_ext and hw is not None and lso is not None and (not read_committed or lst is not None):
                    rows.append((tp, off, hw, lso, (lst if read_committed else hw) - off, lst, meta, "extension",
                                 ErrorCode.none))
                else:
                    rows.append((tp, off, meta, epoch, hw, lso, lst))
                    committed += 1
        out.append((gid if version >= 8 else None, code, rows, bad, committed))
    return out


def _decode(version: int, frame: bytes, read_committed: bool, use_ext: bool) -> list[GroupRows]:
    return decode_offset_fetch_rows(version, frame, {}, TopicPartition, read_committed=read_committed,
                                    use_extensions=use_ext, source="extension", none=ErrorCode.none)[1]


def _check(version: int, frame: bytes, read_committed: bool, use_ext: bool) -> None:
    got = _decode(version, frame, read_committed, use_ext)
    want = _reference(version, frame, read_committed, use_ext)
    assert [(g.group_id, g.error_code, g.rows, g.partition_error, g.committed_rows) for g in got] == want
    for g in got:
        keys = [r[0] for r in g.rows]
        if g.ordered:
            assert keys == sorted(keys)


_ext = st.sampled_from([10000, 10001, 10002])
_tag = st.one_of(st.tuples(_ext, st.integers(-2**63, 2**63 - 1).map(lambda v: struct.pack(">q", v))),
                 st.tuples(_ext, st.binary(max_size=3)),  # odd-sized: not an end offset
                 st.tuples(st.integers(0, 20_000), st.binary(max_size=4)))  # unknown: skipped
_usual = st.lists(st.just(None), max_size=0).map(lambda _: [(10000, struct.pack(">q", 50)),
                                                             (10001, struct.pack(">q", 2)),
                                                             (10002, struct.pack(">q", 48))])
_part = st.tuples(st.integers(-1, 6), st.sampled_from([-1, 0, 5, 49, 2**40]), st.integers(-1, 3),
                  st.sampled_from(["", "", None, "m", "é" * 3]), st.sampled_from([0, 0, 0, 3, 14, 15, 16, 25]),
                  st.one_of(_usual, st.lists(_tag, max_size=4)))
_topics = st.lists(st.tuples(st.sampled_from(["a", "b", "topic-é"]), st.lists(_part, max_size=5)), max_size=3)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 9), st.lists(st.tuples(st.text(max_size=4), st.sampled_from([0, 0, 15, 16]), _topics),
                                   min_size=1, max_size=3),
       st.booleans(), st.booleans())
def test_rows_equal_what_the_client_made_of_the_tuple_decoder(version, groups, read_committed, use_ext):
    if version < 8:
        groups = groups[:1]
    frame = _frame(version, 7, groups)
    _check(version, frame, read_committed, use_ext)
    corr, _ = decode_offset_fetch_rows(version, frame, {}, TopicPartition, read_committed=read_committed,
                                       use_extensions=use_ext, source="extension", none=ErrorCode.none)
    assert corr == 7


@pytest.mark.parametrize("version", [2, 5, 6, 9])
def test_rows_agree_with_kio_schema_walker(version):
    """Committed offsets, metadata and errors as kio's walker reads them."""
    groups = [("g", 0, [("b", [(1, 5, 2, "x", 0, []), (0, 7, -1, "", 0, [(10000, struct.pack(">q", 9))])]),
                        ("a", [(3, -1, -1, None, 3, []), (2, 4, 1, "", 0, [(10001, b"\x00\x01")])])])]
    frame = _frame(version, 1, groups)
    resp, _ = read_tolerant(response_schema(9, version), frame, 4 + (1 if version >= 6 else 0), {})
    topics = resp.groups[0].topics if version >= 8 else resp.topics
    kio = [(TopicPartition(t.name, p.partition_index), p.committed_offset, p.metadata)
           for t in topics for p in t.partitions if p.error_code == 0 and p.committed_offset >= 0]
    (g,) = _decode(version, frame, False, True)
    assert [(r[0], r[1], r[2]) for r in g.rows] == kio  # committed rows: no full extension in this frame
    assert not g.ordered


def _samples(version: int, rnd: random.Random) -> list[bytes]:
    parts = [(p, rnd.choice([-1, 3, 40]), rnd.choice([-1, 2]), rnd.choice(["", "meta", None]),
              rnd.choice([0, 0, 3, 16]), rnd.choice([[], [(10000, struct.pack(">q", 60)), (10001, struct.pack(">q", 1)),
                                                           (10002, struct.pack(">q", 59))], [(7, b"ab")]]))
             for p in range(rnd.randint(0, 4))]
    groups = [("group", 0, [("t", parts), ("u", parts[:2])])]
    if version >= 8:
        groups.append(("other", 16, []))
    return [_frame(version, 3, groups)]


@pytest.mark.parametrize("version", range(1, 10))
def test_mutated_frames_are_refused_exactly_when_the_tuple_decoder_refuses_them(version):
    """About 20,000 frames (over the versions) with bytes changed, cut or added: both decoders
    refuse the same ones, and read the others alike."""
    rnd = random.Random(version)
    refused = 0
    for _ in range(20_000 // 9 + 1):
        frame = bytearray(_samples(version, rnd)[0])
        kind = rnd.random()
        if kind < 0.6:
            for _ in range(rnd.randint(1, 3)):
                frame[rnd.randrange(len(frame))] = rnd.randrange(256)
        elif kind < 0.8:
            del frame[rnd.randrange(len(frame)):]
        else:
            frame[rnd.randrange(len(frame) + 1):0] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
        data = bytes(frame)
        rc, ext = rnd.random() < 0.5, rnd.random() < 0.8
        try:
            want = _reference(version, data, rc, ext)
        except _BAD:
            refused += 1
            with pytest.raises(_BAD):
                _decode(version, data, rc, ext)
            continue
        got = _decode(version, data, rc, ext)
        assert [(g.group_id, g.error_code, g.rows, g.partition_error, g.committed_rows) for g in got] == want
    assert refused > 0


def test_keys_are_made_once_per_partition_and_shared():
    made = []

    def key(topic: str, partition: int) -> TopicPartition:
        made.append((topic, partition))
        return TopicPartition(topic, partition)
    usual = [(10000, struct.pack(">q", 9)), (10001, struct.pack(">q", 0)), (10002, struct.pack(">q", 9))]
    frame = _frame(9, 1, [(g, 0, [("t", [(0, 4, -1, "", 0, usual), (1, 4, -1, "", 0, usual)])]) for g in "ab"])
    keys: dict = {}
    for _ in range(2):
        _, groups = decode_offset_fetch_rows(9, frame, keys, key, read_committed=False, use_extensions=True,
                                             source="extension", none=ErrorCode.none)
        assert groups[0].rows[0][0] is groups[1].rows[0][0]
        assert groups[0].ordered and groups[0].committed_rows == 0
    assert made == [("t", 0), ("t", 1)]
