"""The broker's lifecycle (registration, heartbeats) runs on the monotonic clock, as
Kafka's BrokerLifecycleManager does: a backward step of the broker's wall clock must not
hold its heartbeats back (the controller would fence it when its session expires)."""

from __future__ import annotations

import asyncio
from typing import Any

from hightide.aio.clock import ManualClock
from hightide.cluster.settings import ClusterSettings
from hightide.node.lifecycle import BrokerLifecycleManager
from hightide.protocol.broker_heartbeat_response import BrokerHeartbeatResponse


class SteppedClock(ManualClock):
    def step_wall(self, ms: int) -> None:
        self._wall0 += ms


class _Answers:
    """A controller channel answering every registration and heartbeat."""

    address = ("c", 9093)

    def __init__(self) -> None:
        self.heartbeats = 0

    async def connection(self) -> Any:
        return self

    def pick_version(self, api: int, highest: int) -> int:
        return highest

    def reset(self) -> None:
        pass

    async def request(self, api: int, version: Any, body: dict[str, Any], **_: Any) -> Any:
        if api == 62:
            return type("Reply", (), {"error_code": 0, "broker_epoch": 7})()
        self.heartbeats += 1
        return BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False, lowest_acknowledged_offset=0)


def test_a_backward_step_of_the_wall_clock_does_not_hold_heartbeats_back() -> None:
    async def run() -> None:
        clock = SteppedClock()
        channel = _Answers()
        settings = ClusterSettings(roles=frozenset({"broker"}), node_id=1, heartbeat_interval_ms=250,
                                   session_timeout_ms=3000)
        manager = BrokerLifecycleManager(settings, channel, lambda: "c", dict, lambda lao: None,  # type: ignore[arg-type]
                                         clock=clock)
        manager.start()

        async def advance(seconds: float) -> None:
            for _ in range(round(seconds / 0.05)):
                await clock.advance_and_settle(0.05)
        try:
            await advance(1.0)
            before = channel.heartbeats
            assert before >= 3
            clock.step_wall(-10_000)  # NTP steps the broker's wall clock back by 10 s
            await advance(1.0)
            assert channel.heartbeats - before >= 3, "no heartbeat for 1 s after the wall clock stepped back"
        finally:
            await manager.close()
    asyncio.run(run())
