"""Record batch v2 codec: validation, scanning, decoding, building."""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.protocol import records as R
from hightide.protocol.records import (
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    InvalidRecords,
    build_batch,
    decode_records,
    parse_header,
    scan_batches,
    validate_batches,
)

CODECS = [R.COMPRESSION_NONE, R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD]


def simple(n: int = 3, ts: int = 1000, **kw: object) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i, [], ts + i) for i in range(n)], **kw)  # type: ignore[arg-type]


def test_header_fields_and_properties() -> None:
    b = simple(
        4,
        base_offset=0,
        compression=R.COMPRESSION_GZIP,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
    )
    h = parse_header(b)
    assert len(b) == h.size == h.length + 12
    assert h.magic == 2 and h.records_count == 4 and h.last_offset_delta == 3
    assert h.base_timestamp == 1000 and h.max_timestamp == 1003
    assert h.compression == R.COMPRESSION_GZIP and h.is_transactional and not h.is_control
    assert h.timestamp_type == R.TIMESTAMP_CREATE_TIME
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 2, 10, 13)
    assert h.last_offset == 3 and h.position == 0
    assert h.crc == crc32c(b[R.ATTRIBUTES_OFFSET :])
    assert HEADER_SIZE == 61


def test_last_sequence_wraps() -> None:
    h = parse_header(simple(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert h.last_sequence == 0


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_each_codec(codec: int) -> None:
    recs = [
        (b"key", b"value" * 50, [("h1", b"a"), ("h2", None)], 5000),
        (None, None, [], 4000),
        (b"", b"", [], 6000),
    ]
    b = build_batch(recs, base_offset=0, compression=codec)
    (h,) = validate_batches(b)
    assert h.compression == codec and h.max_timestamp == 6000 and h.base_timestamp == 5000
    out = decode_records(b)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out] == [
        (0, 5000, b"key", b"value" * 50, [("h1", b"a"), ("h2", None)]),
        (1, 4000, None, None, []),
        (2, 6000, b"", b"", []),
    ]


def test_decode_raw_snappy_from_librdkafka() -> None:
    # librdkafka may send raw (unframed) snappy; rebuild a batch that way.
    plain = simple(3)
    body = plain[HEADER_SIZE:]
    comp = bytes(cramjam.snappy.compress_raw(body))
    tail = bytearray(plain[R.ATTRIBUTES_OFFSET:HEADER_SIZE] + comp)
    struct.pack_into(">h", tail, 0, R.COMPRESSION_SNAPPY)
    head = struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c(bytes(tail)))
    b = head + bytes(tail)
    validate_batches(b)
    assert [r.value for r in decode_records(b)] == [b"v0", b"v1", b"v2"]


def test_log_append_time_records_take_max_timestamp() -> None:
    b = simple(3, timestamp_type=R.TIMESTAMP_LOG_APPEND_TIME)
    assert parse_header(b).timestamp_type == 1
    assert {r.timestamp for r in decode_records(b)} == {1002}


def test_decode_absolute_offsets() -> None:
    b = simple(3, base_offset=100)
    assert [r.offset for r in decode_records(b)] == [100, 101, 102]


def test_empty_buffer_is_invalid_record() -> None:
    with pytest.raises(InvalidRecords) as e:
        validate_batches(b"")
    assert e.value.error_code == INVALID_RECORD


def test_truncated_batch() -> None:
    b = simple()
    for cut in (5, 30, len(b) - 1):
        with pytest.raises(InvalidRecords) as e:
            validate_batches(b[:cut])
        assert e.value.error_code == CORRUPT_MESSAGE


def test_trailing_garbage_rejected() -> None:
    b = simple()
    with pytest.raises(InvalidRecords) as e:
        validate_batches(b + b"\x00" * 20, client_origin=False)
    assert e.value.error_code == CORRUPT_MESSAGE


def test_length_too_small() -> None:
    b = bytearray(simple())
    struct.pack_into(">i", b, 8, 40)
    with pytest.raises(InvalidRecords) as e:
        validate_batches(bytes(b))
    assert e.value.error_code == CORRUPT_MESSAGE


@pytest.mark.parametrize(("magic", "code"), [(0, INVALID_RECORD), (1, INVALID_RECORD), (3, CORRUPT_MESSAGE)])
def test_bad_magic(magic: int, code: int) -> None:
    b = bytearray(simple())
    b[16] = magic
    with pytest.raises(InvalidRecords) as e:
        validate_batches(bytes(b))
    assert e.value.error_code == code


def test_crc_mismatch() -> None:
    b = bytearray(simple())
    b[-1] ^= 1
    with pytest.raises(InvalidRecords) as e:
        validate_batches(bytes(b))
    assert e.value.error_code == CORRUPT_MESSAGE


def test_max_batch_bytes() -> None:
    b = simple(10)
    validate_batches(b, max_batch_bytes=len(b))
    with pytest.raises(InvalidRecords) as e:
        validate_batches(b, max_batch_bytes=len(b) - 1)
    assert e.value.error_code == MESSAGE_TOO_LARGE


def test_client_origin_rules() -> None:
    two = simple() + simple()
    with pytest.raises(InvalidRecords) as e:
        validate_batches(two)
    assert e.value.error_code == INVALID_RECORD
    assert len(validate_batches(two, client_origin=False)) == 2
    for bad in (
        simple(base_offset=5),
        build_batch([]),
        simple(is_control=True),
        simple(producer_id=3, producer_epoch=0, base_sequence=-1),
    ):
        with pytest.raises(InvalidRecords) as e:
            validate_batches(bad)
        assert e.value.error_code == INVALID_RECORD
    # inconsistent count vs lastOffsetDelta
    b = bytearray(simple(3))
    struct.pack_into(">i", b, 23, 5)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    with pytest.raises(InvalidRecords) as e:
        validate_batches(bytes(b))
    assert e.value.error_code == INVALID_RECORD


def test_positions_of_multiple_batches() -> None:
    a, b = simple(2), simple(5)
    hs = validate_batches(memoryview(a + b), client_origin=False)
    assert [h.position for h in hs] == [0, len(a)]


def test_scan_stops_at_torn_tail() -> None:
    a, b, c = simple(2), simple(3, base_offset=2), simple(1, base_offset=5)
    buf = a + b + c
    full = scan_batches(buf)
    assert full.error is None and full.valid_bytes == len(buf) and len(full.headers) == 3
    torn = scan_batches(buf[:-3])
    assert torn.valid_bytes == len(a) + len(b) and torn.error is not None
    bad = bytearray(buf)
    bad[len(a) + 70] ^= 0xFF
    res = scan_batches(bytes(bad))
    assert res.valid_bytes == len(a) and len(res.headers) == 1
    # non-monotonic offsets stop the scan
    res = scan_batches(a + a, base_offset_at_least=0)
    assert res.valid_bytes == len(a)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    recs=st.lists(
        st.tuples(
            st.none() | st.binary(max_size=40),
            st.none() | st.binary(max_size=200),
            st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
            st.integers(min_value=0, max_value=2**45),
        ),
        min_size=1,
        max_size=20,
    ),
    codec=st.sampled_from(CODECS),
    pid=st.integers(min_value=-1, max_value=2**40),
)
def test_property_round_trip(recs: list, codec: int, pid: int) -> None:
    kw = {"producer_id": pid, "producer_epoch": 0 if pid >= 0 else -1, "base_sequence": 0 if pid >= 0 else -1}
    b = build_batch(recs, compression=codec, **kw)
    (h,) = validate_batches(b)
    assert h.records_count == len(recs) and h.max_timestamp == max(r[3] for r in recs)
    out = decode_records(b)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in out] == [
        (k, v, [(hk, hv) for hk, hv in hs], ts) for k, v, hs, ts in recs
    ]
    assert [r.offset for r in out] == list(range(len(recs)))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), codec=st.sampled_from(CODECS))
def test_property_any_corruption_after_crc_fails(data: st.DataObject, codec: int) -> None:
    b = bytearray(simple(4, compression=codec))
    i = data.draw(st.integers(min_value=R.ATTRIBUTES_OFFSET, max_value=len(b) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    b[i] ^= flip
    with pytest.raises(InvalidRecords) as e:
        validate_batches(bytes(b))
    assert e.value.error_code == CORRUPT_MESSAGE
