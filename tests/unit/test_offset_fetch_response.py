"""The hand-written OffsetFetch encoder equals kio's for every version, its extension
tags decode with the tolerant reader, and the hand-written decoder agrees with kio's
reader and with the encoder (extension tags included) on versions 1-9."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.offset_fetch_response import (TAG_HIGH_WATERMARK, GroupOffsets, PartitionOffset,
                                                     decode_offset_fetch_response,
                                                     encode_offset_fetch_response, extended_entry)
from hightide.protocol.tolerant import read_tolerant

TOPICS = [("orders", [PartitionOffset(0, 42, 3, "meta", 0), PartitionOffset(1, -1, -1, "", 0)]),
          ("x", [PartitionOffset(7, 5, -1, None, 3)])]


def _dict_topics():
    return [{"name": n, "partitions": [{"partition_index": p.partition, "committed_offset": p.offset,
                                        "committed_leader_epoch": p.leader_epoch, "metadata": p.metadata,
                                        "error_code": p.error_code} for p in ps]} for n, ps in TOPICS]


@pytest.mark.parametrize("version", range(1, 10))
def test_matches_kio(version):
    mine = encode_offset_fetch_response(version, 9, [GroupOffsets("g", 0, TOPICS)])
    if version >= 8:
        body = {"throttle_time": 0, "groups": [{"group_id": "g", "topics": _dict_topics(), "error_code": 0}]}
    else:
        body = {"throttle_time": 0, "topics": _dict_topics(), "error_code": 0}
    expected = encode_response(9, version, 9, materialize(response_schema(9, version), body))
    assert mine == expected


@pytest.mark.parametrize("version", [6, 7, 8, 9])
def test_extension_tags_are_skippable_and_readable(version):
    parts = [PartitionOffset(0, 10, -1, "", 0, high_watermark=25, log_start_offset=3, last_stable_offset=25)]
    frame = encode_offset_fetch_response(version, 1, [GroupOffsets("g", 0, [("t", parts)])])
    unknown: dict = {}
    resp, _ = read_tolerant(response_schema(9, version), frame, 4 + 4 + 1, unknown)
    topics = resp.groups[0].topics if version >= 8 else resp.topics
    p = topics[0].partitions[0]
    assert p.committed_offset == 10
    tags = unknown[id(p)]
    assert struct.unpack(">q", tags[TAG_HIGH_WATERMARK])[0] == 25
    assert sorted(tags) == [10000, 10001, 10002]


# -- the client's decoder -------------------------------------------------------------------
def _kio_view(version, frame):
    """(group id, error, [(topic, [(partition, offset, epoch, metadata, error)])]) per group
    as kio's reader (the tolerant one, which skips the extension tags) sees the frame."""
    resp, _ = read_tolerant(response_schema(9, version), frame, 4 + 4 + (1 if version >= 6 else 0), {})

    def topics(ts):
        return [(t.name, [(p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                           p.metadata, p.error_code) for p in t.partitions]) for t in ts]
    if version >= 8:
        return [(g.group_id, g.error_code, topics(g.topics)) for g in resp.groups]
    return [(None, getattr(resp, "error_code", 0), topics(resp.topics))]


EXT_TOPICS = [("orders", [PartitionOffset(0, 42, 3, "", 0, high_watermark=50, log_start_offset=7,
                                          last_stable_offset=48),  # fast path
                          PartitionOffset(1, 5, -1, "meta", 0, high_watermark=9, log_start_offset=0,
                                          last_stable_offset=9),  # metadata: general path
                          PartitionOffset(2, -1, -1, None, 0, high_watermark=3)]),  # one tag only
              ("é-ünicode", [PartitionOffset(2**31 - 1, 2**62, 7, "x" * 300, 3)])]  # no tags, long string


@pytest.mark.parametrize("version", range(1, 10))
@pytest.mark.parametrize("topics", [TOPICS, EXT_TOPICS, []], ids=["plain", "extension", "empty"])
def test_decoder_matches_kio_and_the_encoder(version, topics):
    groups = [GroupOffsets("g", 0, topics)]
    if version >= 8:
        groups.append(GroupOffsets("other", 16, []))
    elif version >= 2:
        groups = [GroupOffsets("g", 16 if not topics else 0, topics)]
    frame = encode_offset_fetch_response(version, 77, groups, throttle_ms=5)
    corr, throttle, got = decode_offset_fetch_response(version, memoryview(frame)[4:])
    assert corr == 77 and throttle == (5 if version >= 3 else 0)
    # the kio view: everything but the extension tags
    assert [(g, e, [(t, [p[:5] for p in ps]) for t, ps in ts]) for g, e, ts in got] == _kio_view(version, frame)
    # the encoder's view: the extension tags too (only sent on flexible versions)
    flexible = version >= 6
    expected = [(g.group_id if version >= 8 else None, g.error_code if version >= 2 else 0,
                 [(t, [(p.partition, p.offset, p.leader_epoch if version >= 5 else -1, p.metadata, p.error_code,
                        p.high_watermark if flexible else None, p.log_start_offset if flexible else None,
                        p.last_stable_offset if flexible else None) for p in ps]) for t, ps in g.topics])
                for g in groups]
    assert got == expected


def test_decoder_skips_unknown_tags_and_ignores_odd_sized_extension_tags():
    frame = bytearray(encode_offset_fetch_response(9, 1, [GroupOffsets("g", 0, [("t", [PartitionOffset(0, 4)])])]))
    # partition entry ends with an empty tag section (b"\x00") followed by the topic's
    # and the group's; replace the partition's with: tag 5 (2 bytes), tag 10000 (4 bytes)
    tags = b"\x02" + b"\x05\x02ab" + _uv(TAG_HIGH_WATERMARK) + b"\x04\x00\x00\x00\x09"
    end = len(frame) - 1 - 3 - 1  # top-level tags, group error+tags, topic tags
    assert frame[end - 1:end] == b"\x00"
    frame[end - 1:end] = tags
    frame[0:4] = struct.pack(">i", len(frame) - 4)
    (_, _, [(_, _, [(_, [p])])]) = decode_offset_fetch_response(9, bytes(frame[4:]))
    assert p == (0, 4, -1, "", 0, None, None, None)


def _uv(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.mark.parametrize("version", [3, 9])
def test_decoder_rejects_truncated_and_oversized_frames(version):
    frame = encode_offset_fetch_response(version, 1, [GroupOffsets("g", 0, EXT_TOPICS)])[4:]
    for cut in (5, len(frame) // 2, len(frame) - 1):
        with pytest.raises((ValueError, IndexError, struct.error)):
            decode_offset_fetch_response(version, frame[:cut])
    with pytest.raises(ValueError):
        decode_offset_fetch_response(version, frame + b"\x00")


_i32 = st.integers(-2**31, 2**31 - 1)
_i64 = st.integers(-2**63, 2**63 - 1)


@given(st.lists(st.tuples(_i32, _i64, _i32, st.integers(-2**15, 2**15 - 1), _i64, _i64, _i64), max_size=5),
       st.sampled_from([6, 7, 8, 9]))
def test_encoded_entries_give_the_bytes_of_their_tuples(entries, version):
    """A partition entry the broker's handler encodes itself (extended_entry: empty
    metadata, the three tags) makes the very frame its tuple makes, any values."""
    tuples = [(p, o, e, "", err, hw, lso, lst) for p, o, e, err, hw, lso, lst in entries]
    encoded = [extended_entry(p, o, e, err, hw, lso, lst) for p, o, e, err, hw, lso, lst in entries]
    mixed = [encoded[i] if i % 2 else t for i, t in enumerate(tuples)]
    want = encode_offset_fetch_response(version, 3, [GroupOffsets("g", 0, [("t", tuples)])])
    assert encode_offset_fetch_response(version, 3, [GroupOffsets("g", 0, [("t", encoded)])]) == want
    assert encode_offset_fetch_response(version, 3, [GroupOffsets("g", 0, [("t", mixed)])]) == want


@pytest.mark.parametrize("version", [1, 5])
def test_an_encoded_entry_in_a_non_flexible_response_is_refused(version):
    with pytest.raises(ValueError, match="v6"):
        encode_offset_fetch_response(version, 3, [GroupOffsets("g", 0, [("t", [extended_entry(0, 1, -1, 0, 2, 0, 2)])])])
