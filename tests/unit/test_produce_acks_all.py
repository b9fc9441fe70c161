"""Produce's acks=all answer for a partition with followers (handlers/produce.py): how the
replica manager's wait outcome becomes the partition's error, with an embedded broker."""

from __future__ import annotations

import asyncio
import time

from kio.schema.produce.v10.response import ProduceResponse
from kio.serial import entity_reader

from hightide.cluster.controller import NewTopic
from hightide.config import BrokerConfig
from hightide.protocol.codec import RequestHeader
from hightide.protocol.errors import ErrorCode
from hightide.server.broker import Broker
from hightide.server.context import RequestContext
from hightide.server.handlers import produce


def _answer(ctx: RequestContext, outcome: ErrorCode | None, timeout_s: float = 0.05) -> object:
    async def run() -> object:
        resp = {"index": 0, "error_code": ErrorCode.none, "base_offset": 5, "log_append_time": -1,
                "log_start_offset": 0, "record_errors": [], "error_message": None}
        wait: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        if outcome is not None:
            wait.set_result(outcome)
        raw = await produce._after_fsync(ctx, [], {"responses": [{"name": "t", "partition_responses": [resp]}],
                                                   "throttle_time": 0, "failed": False}, [("t", resp, wait)],
                                         timeout_s)
        frame = b"".join(bytes(b) for b in raw.buffers)
        return entity_reader(ProduceResponse)(memoryview(frame), 5)[0]  # after the correlation id and tags
    return asyncio.run(run())


def test_wait_outcomes_become_partition_errors(tmp_path):
    async def start() -> Broker:
        b = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        await b.start()
        await b.metadata_writer.create_topics([NewTopic("t", 1, -1)])
        return b
    broker = asyncio.run(start())
    try:
        ctx = RequestContext(broker.services, RequestHeader(0, 10, 7, "c"), "127.0.0.1:1", {})
        ok = _answer(ctx, ErrorCode.none)
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
        t0 = time.monotonic()
        late = _answer(ctx, None, timeout_s=0.05)
        assert late.responses[0].partition_responses[0].error_code == ErrorCode.request_timed_out
        assert time.monotonic() - t0 < 5
        shrunk = _answer(ctx, ErrorCode.not_enough_replicas_after_append)
        assert shrunk.responses[0].partition_responses[0].error_code == ErrorCode.not_enough_replicas_after_append
        moved = _answer(ctx, ErrorCode.not_leader_or_follower).responses[0].partition_responses[0]
        assert moved.error_code == ErrorCode.not_leader_or_follower
        assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (broker.node_id, 0)
    finally:
        asyncio.run(broker.stop())
