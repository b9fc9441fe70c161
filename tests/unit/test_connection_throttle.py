"""The muted channel of a throttled client (KIP-219), on a fake transport and a
ManualClock: the throttled answer is written at once, then nothing is read or run for
the throttle time (a later, longer throttle extends it), then reading resumes; a
connection closed while muted leaves no timer behind."""

from __future__ import annotations

import asyncio
from typing import Any

from hightide.aio.clock import ManualClock
from hightide.server.connection import KafkaConnection
from hightide.server.context import RequestContext
from hightide.server.registry import Route
from tests.unit.test_connection import SYNC_KEY, FakeBroker, FakeTransport, raw, sync_req


class Throttling:
    """A connection whose ListGroups handler throttles by the next of ``throttles``."""

    def __init__(self, throttles: list[int]) -> None:
        self.clock = ManualClock()
        self.broker = FakeBroker()
        self.throttles = throttles
        self.ran: list[int] = []
        self.broker.routes[SYNC_KEY] = Route(SYNC_KEY, 0, 4, self.handler, "throttling")
        self.transport = FakeTransport()
        self.conn = KafkaConnection(self.broker, clock=self.clock)  # type: ignore[arg-type]
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    def handler(self, ctx: RequestContext, req: Any) -> Any:
        self.ran.append(ctx.header.correlation_id)
        ctx.throttle_ms = self.throttles.pop(0) if self.throttles else 0
        return raw(ctx)

    def receive(self, data: bytes) -> None:
        buf = self.conn.get_buffer(-1)
        buf[:len(data)] = data
        self.conn.buffer_updated(len(data))


def test_a_throttled_answer_is_sent_then_the_channel_is_muted() -> None:
    async def scenario() -> None:
        t = Throttling([1500, 0])
        t.receive(sync_req(1) + sync_req(2))  # pipelined: 2 is already received
        assert t.transport.correlation_ids() == [1]  # answered at once
        assert t.ran == [1] and t.transport.paused  # muted: 2 waits, nothing more is read
        t.clock.advance(1.4)
        assert t.ran == [1] and t.transport.paused
        t.clock.advance(0.2)
        assert t.ran == [1, 2] and t.transport.correlation_ids() == [1, 2]
        assert not t.transport.paused  # unmuted: reading again
        t.receive(sync_req(3))
        assert t.transport.correlation_ids() == [1, 2, 3]
    asyncio.run(scenario())


def test_a_longer_throttle_extends_the_mute_a_shorter_one_does_not_shorten_it() -> None:
    async def scenario() -> None:
        t = Throttling([1000, 3000])
        t.conn._mute(2000)  # already muted for 2 s (e.g. an earlier async answer)
        t.receive(sync_req(1))
        assert t.ran == []
        t.clock.advance(2.0)
        assert t.ran == [1]  # its 1 s throttle ends before the 2 s mute: nothing changes
        assert t.transport.paused
        t.clock.advance(1.0)
        assert not t.transport.paused
        t.receive(sync_req(2))
        assert t.ran == [1, 2] and t.transport.paused
        t.clock.advance(2.9)
        assert t.transport.paused
        t.clock.advance(0.2)
        assert not t.transport.paused
    asyncio.run(scenario())


def test_closing_while_muted_cancels_the_timer() -> None:
    async def scenario() -> None:
        t = Throttling([60_000])
        t.receive(sync_req(1))
        assert t.transport.paused and t.clock.sleepers == 2  # the mute and the idle timer
        t.transport.close()
        t.conn.connection_lost(None)
        assert t.clock.sleepers == 0
        t.clock.advance(61)  # nothing fires on the closed connection
        assert t.ran == [1]
    asyncio.run(scenario())
