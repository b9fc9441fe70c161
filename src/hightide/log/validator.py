"""Kafka's LogValidator rules for the records a producer sends to one partition (sans-IO).

Contract of :func:`validate_produced`: in, the partition's records as received (bytes or
a view of the receive buffer), the topic's :class:`~.config.LogConfig`, the time, and the
topic and partition for messages; out, :data:`Validated` (the batch to append and its
headers, for :meth:`~.partition_log.PartitionLog.append`) or an :class:`InvalidRecords`
raised with the Kafka error code and message the partition answers
(:class:`RecordErrors` when Kafka lists the offending records). Nothing is written and
nothing but the time is read; the caller maps the outcome to its response.

The hot path reads the 61-byte header and checks the CRC, nothing per record: the
records are decoded only when a rule needs them (a compacted topic, a timestamp bound
the header cannot settle, an error message), and re-encoded only when the topic's
``compression.type`` differs from the batch's codec. Rules, in Kafka's order:

1. framing and the client-origin batch rules (:func:`~hightide.protocol.records.validate_batches`,
   Kafka's ``analyzeAndValidateRecords`` and ``validateBatch``): exactly one batch, magic
   2, CRC, size ≤ ``max.message.bytes``, base offset 0, record count = lastOffsetDelta + 1
   > 0, no control batch, an idempotent batch's sequence ≥ 0, a known codec;
2. timestamps (``validateTimestamp``): on a CreateTime topic every record with a
   timestamp other than -1 within [now - ``message.timestamp.before.max.ms``, now +
   ``message.timestamp.after.max.ms``]; a batch a producer marked LogAppendTime is
   refused when the topic uses LogAppendTime or its MaxTimestamp is -1, and otherwise
   appended as CreateTime (the attribute bit cleared, the CRC recomputed), as Kafka
   does;
3. keys (``validateKey``): a compacted topic refuses records without a key;
4. compression (``buildRecordsAndAssignOffsets``): a topic whose ``compression.type`` is
   a codec gets a batch of another codec recompressed to it, the result again within
   ``max.message.bytes``.

Offsets, the leader epoch and a LogAppendTime topic's timestamp are assigned by the log
as it writes (:meth:`~.segment.LogSegment.append`, patched in place in the receive
buffer); idempotent sequences are checked against the producer state
(:mod:`.producer_state`). Differences from Kafka: the records of a compressed batch are
not decompressed to check them one by one (inner offsets, the declared count), and
MaxTimestamp is taken from the header instead of being recomputed from the records;
the batch CRC still covers every byte.
"""

from __future__ import annotations

from hightide.protocol.errors import ErrorCode
from hightide.protocol.crc import crc32c
from hightide.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    BatchHeader,
    Buffer,
    InvalidRecords,
    decode_records,
    recompress_batch,
    validate_batches,
)

from .config import LogConfig

__all__ = ["Validated", "RecordErrors", "validate_produced"]

_LOG_APPEND_TIME_BIT = 0x08
_NO_TIMESTAMP = -1


Validated = tuple[Buffer, list[BatchHeader]]
"""(records, headers): a produced batch ready for :meth:`PartitionLog.append(records,
headers, now_ms) <hightide.log.partition_log.PartitionLog.append>`. ``records`` is the
buffer given (possibly patched in place) or new bytes (recompressed, or a read-only
buffer that needed a patch), ``headers`` its batch headers. A plain tuple: the produce
path makes one per partition."""


class RecordErrors(InvalidRecords):
    """The batch refused for some of its records (Kafka's RecordValidationException):
    ``record_errors`` lists (index in the batch, message) of every record refused;
    ``error_code`` is INVALID_TIMESTAMP if any was refused for its timestamp, else
    INVALID_RECORD, and the message Kafka's."""

    def __init__(self, record_errors: list[tuple[int, str]], timestamps: bool) -> None:
        if timestamps:
            code, message = ErrorCode.invalid_timestamp, "One or more records have been rejected due to invalid timestamp"
        else:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
            code, message = ErrorCode.invalid_record, (
                f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                f"and only showing the first three errors at most: [{shown}]")
        super().__init__(code, message)
        self.record_errors = record_errors


def validate_produced(records: Buffer, config: LogConfig, now_ms: int, topic: str, partition: int) -> Validated:
    """Apply Kafka's LogValidator rules (the module docstring) to one partition's
    produced records. Returns :data:`Validated`; raises :class:`InvalidRecords` with
    Kafka's error code (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE,
    UNSUPPORTED_COMPRESSION_TYPE) or :class:`RecordErrors` (INVALID_TIMESTAMP,
    INVALID_RECORD with the records listed). ``topic`` and ``partition`` only go into
    messages. A writable ``records`` view may be patched in place."""
    headers = validate_batches(records, config.max_message_bytes)
    h = headers[0]
    producer_log_append_time = h.attributes & _LOG_APPEND_TIME_BIT
    if producer_log_append_time and (config.log_append_time or h.max_timestamp == _NO_TIMESTAMP):
        _refuse_log_append_time(records)
    if (config.timestamp_before_max_ms is not None or config.timestamp_after_max_ms is not None) \
            and not config.log_append_time:
        _check_timestamps(records, h, config, now_ms)  # a LogAppendTime batch's records: its MaxTimestamp
    if producer_log_append_time:
        records, headers = _as_create_time(records, h)
        h = headers[0]
    if config.compact:
        _check_keys(records, f"{topic}-{partition}")
    codec = config.compression_codec
    if codec is not None and h.compression != codec:
        records = recompress_batch(records, codec, config.compression_level)
        if len(records) > config.max_message_bytes:
            raise InvalidRecords(ErrorCode.message_too_large,
                                 f"Message batch size is {len(records)} bytes in append to partition "
                                 f"{topic}-{partition} which exceeds the maximum configured size of "
                                 f"{config.max_message_bytes}.")
        headers = validate_batches(records, None)
    return records, headers


def _check_timestamps(records: Buffer, h: BatchHeader, config: LogConfig, now_ms: int) -> None:
    """A CreateTime topic's bounds ``message.timestamp.before/after.max.ms`` on every record
    whose timestamp is not -1 (Kafka's recordHasInvalidTimestamp). The records are decoded
    only when the before bound is set or the header's MaxTimestamp crosses the after
    bound; raises :class:`RecordErrors` listing every record out of range."""
    after, before = config.timestamp_after_max_ms, config.timestamp_before_max_ms
    if before is None and (after is None or h.max_timestamp <= now_ms + after):
        return
    lo = now_ms - before if before is not None else -(2**63)
    hi = now_ms + after if after is not None else 2**63 - 1
    bad = [(i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
               f"The timestamp should be within [{lo}, {hi}]")
           for i, r in enumerate(decode_records(records))
           if r.timestamp != _NO_TIMESTAMP and not lo <= r.timestamp <= hi]
    if bad:
        raise RecordErrors(bad, timestamps=True)


def _check_keys(records: Buffer, topic_partition: str) -> None:
    """Kafka's validateKey for a compacted topic: raises :class:`RecordErrors` listing
    every record without a key (decodes the batch: compacted topics only)."""
    message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}"
    bad = [(i, message) for i, r in enumerate(decode_records(records)) if r.key is None]
    if bad:
        raise RecordErrors(bad, timestamps=False)


def _refuse_log_append_time(records: Buffer) -> None:
    """Kafka's validateTimestamp for a batch the producer marked LogAppendTime on a
    LogAppendTime topic, or without a timestamp: every record refused (INVALID_TIMESTAMP)."""
    bad = [(i, f"Invalid timestamp type in message DefaultRecord(offset={r.offset}, timestamp={r.timestamp}, "
               f"key={len(r.key or b'')} bytes, value={len(r.value or b'')} bytes). Producer should not set "
               f"timestamp type to LogAppendTime.")
           for i, r in enumerate(decode_records(records))]
    raise RecordErrors(bad, timestamps=True)


def _as_create_time(records: Buffer, h: BatchHeader) -> tuple[Buffer, list[BatchHeader]]:
    """A batch the producer marked LogAppendTime, with a timestamp, on a CreateTime topic
    becomes CreateTime (Kafka's setMaxTimestamp(CREATE_TIME, ...)): the bit cleared and the
    CRC recomputed, in place in a writable view, else in a copy."""
    buf = records if isinstance(records, memoryview) and not records.readonly else memoryview(bytearray(records))
    attributes = h.attributes & ~_LOG_APPEND_TIME_BIT
    buf[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big", signed=True)
    crc = crc32c(buf[ATTRIBUTES_OFFSET:h.length + LOG_OVERHEAD])
    buf[CRC_OFFSET:CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return buf, [h._replace(attributes=attributes, crc=crc)]
