"""hightide.log.validator: Kafka's LogValidator rules for a produced batch, each with the
error code Kafka answers (the handler's mapping: tests/unit/test_produce_validation.py)."""

from __future__ import annotations

import struct

import pytest

from hightide.log.config import LogConfig
from hightide.log.validator import RecordErrors, validate_produced
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    InvalidRecords,
    batch_crc,
    build_batch,
    decode_records,
    parse_header,
)

NOW = 1_700_000_000_000
CFG = LogConfig()


def _batch(n: int = 3, ts: int = NOW, **kw: object) -> bytes:
    return build_batch([(b"k%d" % i, b"v" * 20, [], ts) for i in range(n)], **kw)


def _patched(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    """The batch with one header field replaced and the CRC recomputed."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, 17, batch_crc(out, 0, len(out)))
    return bytes(out)


def _refused(records: bytes, cfg: LogConfig = CFG, now: int = NOW) -> InvalidRecords:
    with pytest.raises(InvalidRecords) as info:
        validate_produced(records, cfg, now, "t", 0)
    return info.value


def test_a_valid_batch_is_returned_as_given_without_a_copy():
    batch = memoryview(bytearray(_batch()))
    out = validate_produced(batch, CFG, NOW, "t", 0)
    records, headers = out
    assert records is batch
    assert [h.records_count for h in headers] == [3]


@pytest.mark.parametrize("records, code", [
    (b"", ErrorCode.invalid_record),                                           # no batch at all
    (_batch()[:40], ErrorCode.corrupt_message),                                # truncated
    (_patched(_batch(), ">b", 16, 1), ErrorCode.invalid_record),               # magic 1 (Produce v3+ needs 2)
    (_patched(_batch(), ">b", 16, 3), ErrorCode.corrupt_message),              # unknown magic
    (_batch()[:-1] + bytes([_batch()[-1] ^ 1]), ErrorCode.corrupt_message),    # CRC mismatch
    (_batch() + _batch(), ErrorCode.invalid_record),                           # two batches
    (_patched(_batch(), ">q", 0, 5), ErrorCode.invalid_record),                # base offset != 0
    (_patched(_batch(), ">i", 23, 5), ErrorCode.invalid_record),               # lastOffsetDelta + 1 != count
    (_patched(_batch(), ">i", 57, 0), ErrorCode.invalid_record),               # count 0
    (_batch(is_control=True), ErrorCode.invalid_record),                       # control batch from a client
    (_batch(producer_id=7, producer_epoch=0), ErrorCode.invalid_record),       # idempotent, sequence -1
    (_patched(_batch(), ">h", 21, 5), ErrorCode.unsupported_compression_type),  # codec 5
])
def test_batch_rules(records, code):
    assert _refused(records).error_code == code


def test_max_message_bytes_is_the_whole_batch():
    batch = _batch()
    assert validate_produced(batch, LogConfig(max_message_bytes=len(batch)), NOW, "t", 0)[0] is batch
    assert _refused(batch, LogConfig(max_message_bytes=len(batch) - 1)).error_code == ErrorCode.message_too_large


def test_timestamps_out_of_range_are_listed_by_batch_index():
    cfg = LogConfig(timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    batch = build_batch([(b"k", b"v", [], NOW), (b"k", b"v", [], NOW - 1001), (b"k", b"v", [], NOW + 1001),
                         (b"k", b"v", [], NOW + 1000)])
    exc = _refused(batch, cfg)
    assert isinstance(exc, RecordErrors)
    assert exc.error_code == ErrorCode.invalid_timestamp
    assert str(exc) == "One or more records have been rejected due to invalid timestamp"
    assert exc.record_errors == [
        (1, f"Timestamp {NOW - 1001} of message with offset 1 is out of range. "
            f"The timestamp should be within [{NOW - 1000}, {NOW + 1000}]"),
        (2, f"Timestamp {NOW + 1001} of message with offset 2 is out of range. "
            f"The timestamp should be within [{NOW - 1000}, {NOW + 1000}]")]


def test_the_after_bound_alone_is_settled_by_the_header():
    """Only the after bound set and MaxTimestamp within it: the records are not decoded
    (garbled records pass; the CRC was recomputed over them)."""
    batch = bytearray(_batch(ts=NOW))
    batch[61:] = b"\xff" * (len(batch) - 61)
    struct.pack_into(">I", batch, 17, batch_crc(batch, 0, len(batch)))
    assert validate_produced(bytes(batch), LogConfig(timestamp_after_max_ms=0), NOW, "t", 0)
    assert _refused(bytes(batch), LogConfig(timestamp_after_max_ms=0), NOW - 1).error_code == ErrorCode.corrupt_message


def test_a_log_append_time_topic_checks_no_create_time():
    cfg = LogConfig(message_timestamp_type="LogAppendTime", timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    assert validate_produced(_batch(ts=0), cfg, NOW, "t", 0)


def test_a_compacted_topic_refuses_records_without_a_key():
    batch = build_batch([(b"k", b"v", [], NOW), (None, b"v", [], NOW), (None, None, [], NOW)])
    exc = _refused(batch, LogConfig(compact=True))
    assert isinstance(exc, RecordErrors) and exc.error_code == ErrorCode.invalid_record
    message = "Compacted topic cannot accept message without key in topic partition t-0"
    assert exc.record_errors == [(1, message), (2, message)]
    assert str(exc) == ("One or more records have been rejected due to 2 record errors in total, and only showing "
                        f"the first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
                        f"RecordError(batchIndex=2, message='{message}')]")
    assert validate_produced(_batch(), LogConfig(compact=True), NOW, "t", 0)


def test_the_topic_codec_recompresses_other_codecs_only():
    gz = _batch(compression=COMPRESSION_GZIP)
    same = validate_produced(gz, LogConfig(compression_codec=COMPRESSION_GZIP), NOW, "t", 0)
    assert same[0] is gz
    out = validate_produced(gz, LogConfig(compression_codec=COMPRESSION_ZSTD), NOW, "t", 0)
    assert parse_header(out[0]).compression == out[1][0].compression == COMPRESSION_ZSTD
    assert decode_records(out[0]) == decode_records(gz)
    plain = validate_produced(gz, LogConfig(compression_codec=COMPRESSION_NONE), NOW, "t", 0)
    assert plain[1][0].compression == COMPRESSION_NONE


def test_a_recompressed_batch_is_checked_against_max_message_bytes():
    batch = build_batch([(b"k", bytes(range(256)) * 4, [], NOW)], compression=COMPRESSION_ZSTD)
    cfg = LogConfig(compression_codec=COMPRESSION_NONE, max_message_bytes=len(batch) + 10)
    exc = _refused(batch, cfg)
    assert exc.error_code == ErrorCode.message_too_large
    assert "in append to partition t-0 which exceeds the maximum configured size" in str(exc)


def test_records_that_cannot_be_decompressed_are_corrupt():
    batch = bytearray(_batch(compression=COMPRESSION_GZIP))
    batch[70:80] = b"\x00" * 10
    struct.pack_into(">I", batch, 17, batch_crc(batch, 0, len(batch)))
    exc = _refused(bytes(batch), LogConfig(compression_codec=COMPRESSION_ZSTD))
    assert exc.error_code == ErrorCode.corrupt_message


def test_a_timestamp_below_zero_other_than_minus_one_is_checked():
    """Kafka skips only NO_TIMESTAMP (-1); any other negative timestamp meets the bounds."""
    cfg = LogConfig(timestamp_before_max_ms=1000)
    batch = build_batch([(b"k", b"v", [], -1), (b"k", b"v", [], -5)])
    exc = _refused(batch, cfg)
    assert isinstance(exc, RecordErrors) and exc.error_code == ErrorCode.invalid_timestamp
    assert [i for i, _ in exc.record_errors] == [1]


def _log_append_time_batch(*timestamps: int) -> bytes:
    return build_batch([(b"k", b"v" * 3, [], ts) for ts in timestamps], timestamp_type=1)


def test_a_producer_may_not_set_log_append_time_on_a_log_append_time_topic():
    exc = _refused(_log_append_time_batch(NOW, NOW), LogConfig(message_timestamp_type="LogAppendTime"))
    assert isinstance(exc, RecordErrors) and exc.error_code == ErrorCode.invalid_timestamp
    assert exc.record_errors == [
        (i, f"Invalid timestamp type in message DefaultRecord(offset={i}, timestamp={NOW}, key=1 bytes, "
            "value=3 bytes). Producer should not set timestamp type to LogAppendTime.") for i in (0, 1)]


def test_log_append_time_without_a_timestamp_is_refused_on_a_create_time_topic():
    exc = _refused(_log_append_time_batch(-1))
    assert isinstance(exc, RecordErrors) and exc.error_code == ErrorCode.invalid_timestamp


@pytest.mark.parametrize("writable", [True, False])
def test_log_append_time_with_a_timestamp_becomes_create_time(writable):
    """Kafka's setMaxTimestamp(CREATE_TIME, max): the attribute bit cleared, the CRC
    recomputed; in place in a writable view, else in a copy (the input untouched)."""
    batch = _log_append_time_batch(NOW - 2, NOW - 1, NOW)
    given = memoryview(bytearray(batch)) if writable else batch
    out = validate_produced(given, CFG, NOW, "t", 0)
    assert (out[0] is given) == writable
    assert given == batch or writable
    h = out[1][0]
    assert h.timestamp_type == 0 and h.max_timestamp == NOW
    assert h == parse_header(out[0])
    assert validate_produced(bytes(out[0]), CFG, NOW, "t", 0)[1][0].crc == h.crc  # CRC valid
    assert [r.timestamp for r in decode_records(out[0])] == [NOW - 2, NOW - 1, NOW]


def test_a_log_append_time_batch_meets_the_bounds_with_its_max_timestamp():
    """Kafka reads every record of a LogAppendTime batch at the batch's MaxTimestamp."""
    batch = _log_append_time_batch(NOW - 5000, NOW)
    assert validate_produced(batch, LogConfig(timestamp_before_max_ms=1000), NOW, "t", 0)
    exc = _refused(batch, LogConfig(timestamp_before_max_ms=1000), NOW + 2000)
    assert exc.error_code == ErrorCode.invalid_timestamp and [i for i, _ in exc.record_errors] == [0, 1]
