"""The broker's lifecycle manager against a fake controller channel.

A broker knows when the controller surely still counts it in the lowest acknowledged
offset (``BrokerLifecycleManager.counted``): until ``broker.session.timeout.ms`` after
it sent its last heartbeat answered unfenced. Cut off from the controllers, it stops
being counted here no later than the controller stops counting it, and its gated reads
go by an unknown LAO (``BrokerNode._lao``) until a heartbeat is answered again."""

from __future__ import annotations

import asyncio
from typing import Any

from hightide.aio.clock import ManualClock
from hightide.cluster.settings import ClusterSettings
from hightide.node.controller_channel import ControllerUnavailable
from hightide.node.lifecycle import BrokerLifecycleManager
from hightide.protocol.broker_heartbeat_response import BrokerHeartbeatResponse

SESSION_MS = 3000


class _Controller:
    """A controller channel: answers while ``up``, with ``fenced`` as its verdict."""

    address = ("c", 9093)

    def __init__(self) -> None:
        self.up, self.fenced, self.lao = True, False, 5
        self.heartbeats = 0

    async def connection(self) -> Any:
        return self

    def pick_version(self, api: int, highest: int) -> int:
        return highest

    def reset(self) -> None:
        pass

    async def request(self, api: int, version: Any, body: dict[str, Any], **_: Any) -> Any:
        if not self.up:
            raise ControllerUnavailable("cut off")
        if api == 62:
            return type("Reply", (), {"error_code": 0, "broker_epoch": 7})()
        self.heartbeats += 1
        return BrokerHeartbeatResponse(is_caught_up=True, is_fenced=self.fenced, lowest_acknowledged_offset=self.lao)


def _manager() -> tuple[ManualClock, _Controller, BrokerLifecycleManager, list[int]]:
    clock, controller, told = ManualClock(), _Controller(), []
    settings = ClusterSettings(roles=frozenset({"broker"}), node_id=1, heartbeat_interval_ms=250,
                               session_timeout_ms=SESSION_MS)
    manager = BrokerLifecycleManager(settings, controller, lambda: "c", dict, told.append,  # type: ignore[arg-type]
                                     clock=clock)
    return clock, controller, manager, told


async def _advance(clock: ManualClock, seconds: float) -> None:
    for _ in range(round(seconds / 0.05)):
        await clock.advance_and_settle(0.05)


def test_a_broker_cut_off_from_the_controllers_stops_counting_itself_within_the_session() -> None:
    async def run() -> None:
        clock, controller, manager, told = _manager()
        assert not manager.counted()  # not registered yet
        manager.start()
        try:
            await _advance(clock, 0.5)
            assert manager.counted()
            controller.up = False
            cut_at = clock.monotonic()
            while manager.counted():
                await _advance(clock, 0.05)
            # the last answered heartbeat was sent before the cut: the lease ends within
            # the session timeout of the cut, never later
            assert clock.monotonic() - cut_at <= SESSION_MS / 1000
            told.clear()
            controller.up = True
            await _advance(clock, 2.0)  # the backoff, then an answered heartbeat
            assert manager.counted() and told, "the lease did not come back (or the read gate was not woken)"
        finally:
            await manager.close()
    asyncio.run(run())


def test_a_fenced_broker_is_not_counted() -> None:
    async def run() -> None:
        clock, controller, manager, _ = _manager()
        manager.start()
        try:
            await _advance(clock, 0.5)
            assert manager.counted()
            controller.fenced = True
            await _advance(clock, 0.5)
            assert not manager.counted()
        finally:
            await manager.close()
    asyncio.run(run())


class SteppedClock(ManualClock):
    """A ManualClock whose wall clock can be stepped on its own."""

    def step_wall(self, ms: int) -> None:
        self._wall0 += ms


def test_a_backward_step_of_the_wall_clock_does_not_hold_heartbeats_back() -> None:
    """Registration and heartbeats run on the monotonic clock, as Kafka's
    BrokerLifecycleManager: a backward step of the broker's wall clock must not hold its
    heartbeats back (the controller would fence it when its session expires)."""
    async def run() -> None:
        clock, controller = SteppedClock(), _Controller()
        settings = ClusterSettings(roles=frozenset({"broker"}), node_id=1, heartbeat_interval_ms=250,
                                   session_timeout_ms=SESSION_MS)
        manager = BrokerLifecycleManager(settings, controller, lambda: "c", dict, lambda lao: None,  # type: ignore[arg-type]
                                         clock=clock)
        manager.start()
        try:
            await _advance(clock, 1.0)
            before = controller.heartbeats
            assert before >= 3
            clock.step_wall(-10_000)  # NTP steps the broker's wall clock back by 10 s
            await _advance(clock, 1.0)
            assert controller.heartbeats - before >= 3, "no heartbeat for 1 s after the wall clock stepped back"
        finally:
            await manager.close()
    asyncio.run(run())
