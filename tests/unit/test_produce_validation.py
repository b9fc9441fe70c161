"""Produce's per-partition answers to records Kafka's LogValidator refuses (the rules live
in hightide.log.validator, tests/unit/test_log_validator.py): how the handler maps them,
with an embedded broker."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest

from hightide.cluster.controller import NewTopic
from hightide.config import BrokerConfig
from hightide.protocol.codec import RequestHeader
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import batch_crc, build_batch, decode_records
from hightide.server.broker import Broker
from hightide.server.context import RequestContext
from hightide.server.handlers import produce

TOPICS = [NewTopic("compacted", 1, -1, configs={"cleanup.policy": "compact"}),
          NewTopic("old", 1, -1, configs={"message.timestamp.before.max.ms": "1000"}),
          NewTopic("minisr", 1, -1, configs={"min.insync.replicas": "2"})]


_LOOPS: dict[int, asyncio.AbstractEventLoop] = {}


@pytest.fixture
def ctx(tmp_path) -> Iterator[RequestContext]:
    """A request context of an embedded broker; its loop runs :func:`_append`."""
    async def start() -> Broker:
        b = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        await b.start()
        await b.metadata_writer.create_topics(TOPICS)
        return b
    loop = asyncio.new_event_loop()
    broker = loop.run_until_complete(start())
    try:
        _LOOPS[id(broker.services)] = loop
        yield RequestContext(broker.services, RequestHeader(0, 10, 7, "c"), "127.0.0.1:1", {})
    finally:
        loop.run_until_complete(broker.stop())
        loop.close()


def _garbled_records(batch: bytes) -> bytes:
    """The batch with its records section garbled and the CRC recomputed (a client bug the
    CRC cannot catch: the records themselves cannot be decoded)."""
    out = bytearray(batch)
    out[61:] = b"\xff" * (len(out) - 61)
    struct.pack_into(">I", out, 17, batch_crc(out, 0, len(out)))
    return bytes(out)


def _append(ctx: RequestContext, topic: str, records: bytes, acks: int = 1) -> dict:
    async def run() -> dict:
        return produce._append_partition(ctx, topic, 0, records, acks)[0]
    return _LOOPS[id(ctx.services)].run_until_complete(run())


@pytest.mark.parametrize("topic", ["compacted", "old"])
def test_records_that_cannot_be_decoded_answer_corrupt_message(ctx, topic):
    """A rule that decodes the records (keys of a compacted topic, the before bound) meets
    records it cannot decode: the partition answers CORRUPT_MESSAGE, nothing escapes."""
    batch = _garbled_records(build_batch([(b"k", b"v" * 40, [], ctx.now_ms)]))
    resp = _append(ctx, topic, batch)
    assert resp["error_code"] == ErrorCode.corrupt_message
    assert resp["base_offset"] == -1


def test_min_insync_replicas_is_checked_before_the_records(ctx):
    """Kafka's Partition.appendRecordsToLeader refuses acks=all below min.insync.replicas
    before the log validates anything."""
    batch = bytearray(build_batch([(b"k", b"v", [], ctx.now_ms)]))
    batch[-1] ^= 1  # CRC mismatch
    resp = _append(ctx, "minisr", bytes(batch), acks=-1)
    assert resp["error_code"] == ErrorCode.not_enough_replicas
    assert _append(ctx, "minisr", bytes(batch), acks=1)["error_code"] == ErrorCode.corrupt_message


def test_record_errors_carry_the_log_start_offset(ctx):
    """Kafka answers a RecordValidationException (timestamps, keys) with the partition's log
    start offset and the records listed."""
    now = ctx.now_ms
    resp = _append(ctx, "old", build_batch([(b"k", b"v", [], now), (b"k", b"v", [], now - 60_000)]))
    assert resp["error_code"] == ErrorCode.invalid_timestamp
    assert [e["batch_index"] for e in resp["record_errors"]] == [1]
    assert resp["log_start_offset"] == 0
    resp = _append(ctx, "compacted", build_batch([(None, b"v", [], now)]))
    assert (resp["error_code"], resp["log_start_offset"]) == (ErrorCode.invalid_record, 0)
    assert resp["error_message"].startswith("One or more records have been rejected due to 1 record errors")


def test_a_producer_log_append_time_batch_is_stored_as_create_time(ctx):
    """As Kafka: a CreateTime topic stores a batch the producer marked LogAppendTime as
    CreateTime, so consumers read each record's own timestamp."""
    now = ctx.now_ms
    batch = build_batch([(b"k", b"v", [], now - 2), (b"k", b"v", [], now - 1)], timestamp_type=1)
    resp = _append(ctx, "old", batch)
    assert resp["error_code"] == ErrorCode.none
    stored = ctx.logs.partition_log("old", 0).read(resp["base_offset"], 1 << 20).data
    assert [r.timestamp for r in decode_records(stored)] == [now - 2, now - 1]
