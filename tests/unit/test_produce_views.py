"""The Produce handler and the receive buffer: records are views of the frame, valid
only during the handler's synchronous part. It writes them (patched in place) before
returning, keeps nothing, releases them, and an answer that waits for fsync never
touches them: the frame's bytes overwritten right after the call change nothing stored."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from hightide.cluster.controller import NewTopic
from hightide.config import BrokerConfig
from hightide.protocol.build import materialize
from hightide.protocol.codec import decode_request, encode_request, parse_header, request_schema
from hightide.protocol.records import build_batch, decode_records
from hightide.server.broker import Broker
from hightide.server.context import RequestContext
from hightide.server.handlers import produce
from hightide.server.registry import RawResponse

TOPICS = [NewTopic("plain", 2, -1), NewTopic("durable", 1, -1, configs={"flush.messages": "1"}),
          NewTopic("appendtime", 1, -1, configs={"message.timestamp.type": "LogAppendTime"}),
          NewTopic("gzip", 1, -1, configs={"compression.type": "gzip"})]


def _frame(acks: int) -> tuple[bytearray, dict[tuple[str, int], bytes]]:
    sent = {(t.name, p): build_batch([(b"k", f"{t.name}-{p}".encode() * 50, [], 1_000)])
            for t in TOPICS for p in range(t.num_partitions)}
    body = {"transactional_id": None, "acks": acks, "timeout": timedelta(seconds=5), "topic_data": [
        {"name": t.name, "partition_data": [{"index": p, "records": sent[(t.name, p)]} for p in range(t.num_partitions)]}
        for t in TOPICS]}
    return bytearray(encode_request(0, 9, 1, "c", materialize(request_schema(0, 9), body))), sent


@pytest.mark.parametrize("acks", [1, -1, 0])
def test_records_are_written_released_and_never_touched_again(tmp_path: Path, acks: int) -> None:
    async def run() -> None:
        broker = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        await broker.start()
        try:
            await broker.metadata_writer.create_topics(TOPICS)
            frame, sent = _frame(acks)
            view = memoryview(frame)[4:]
            header, off = parse_header(view)
            req = decode_request(header, view, off, {})
            records = [p.records for t in req.topic_data for p in t.partition_data]
            assert all(not r.readonly for r in records)
            ctx = RequestContext(broker.services, header, "127.0.0.1:1", {})
            result = produce.handle(ctx, req)
            for r in records:  # released: a late use raises instead of reading a reused buffer
                with pytest.raises(ValueError):
                    bytes(r)
            del view, records, req
            frame[:] = b"\xee" * len(frame)  # the receive buffer is reused by the next request
            if acks == 0:
                assert result is None
            else:  # the durable topic (flush.messages=1) makes the answer wait for fsync
                assert hasattr(result, "__await__")
                assert isinstance(await result, RawResponse)
            for (topic, p), batch in sent.items():
                plog = broker.hosted.partition_log(topic, p)
                assert plog is not None and plog.log_end_offset == 1
                stored = plog.read(0, 1 << 20).data
                got = [(r.offset, r.key, r.value) for r in decode_records(stored)]
                assert got == [(0, r.key, r.value) for r in decode_records(batch)]
                if topic in ("plain", "durable"):
                    assert stored[16:] == batch[16:]
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_read_only_frame_is_written_too(tmp_path: Path) -> None:
    """A frame held under back-pressure is a ``bytes`` copy: read-only views, written
    with a new header in front of the untouched rest."""
    async def run() -> None:
        broker = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        await broker.start()
        try:
            await broker.metadata_writer.create_topics(TOPICS[:1])
            frame, sent = _frame(1)
            held = bytes(frame)
            view = memoryview(held)[4:]
            header, off = parse_header(view)
            req = decode_request(header, view, off, {})
            result = produce.handle(RequestContext(broker.services, header, "127.0.0.1:1", {}), req)
            assert isinstance(result, RawResponse)
            assert held == bytes(frame)  # never modified
            for p in range(2):
                stored = broker.hosted.partition_log("plain", p).read(0, 1 << 20).data
                assert stored[16:] == sent[("plain", p)][16:]
        finally:
            await broker.stop()

    asyncio.run(run())
