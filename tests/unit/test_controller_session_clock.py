"""The controller times broker sessions on the monotonic clock, as Kafka's
BrokerHeartbeatManager does (``time.nanoseconds()``): a step of the wall clock (NTP) on
the active controller neither fences a broker that keeps heartbeating nor keeps a
silent one alive."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from hightide.aio.clock import ManualClock
from hightide.cluster.image import MetadataImage
from hightide.cluster.lifecycle import Heartbeat, LifecycleConfig, Registration
from hightide.node.controller_service import ControllerService

SESSION_MS = 3000


class SteppedClock(ManualClock):
    """A ManualClock whose wall clock can be stepped on its own (``step_wall``)."""

    def step_wall(self, ms: int) -> None:
        self._wall0 += ms


def _service(clock: ManualClock) -> tuple[ControllerService, MetadataImage]:
    image = MetadataImage()
    log = SimpleNamespace(log_end_offset=0)

    async def write(op: Any) -> Any:
        result, records = op(image)
        for r in records:
            image.apply(r, log.log_end_offset)
            log.log_end_offset += 1
        return result
    service = ControllerService(node_id=3000, cluster_id="c", config=LifecycleConfig(SESSION_MS, 0), write=write,
                                image=lambda: image, metadata_log=lambda: log,  # type: ignore[arg-type,return-value]
                                committed_end=lambda: log.log_end_offset, clock=clock)
    return service, image


async def _unfenced_broker(service: ControllerService, image: MetadataImage) -> int:
    reply = await service.register(Registration(1, "c", uuid.uuid4(),
                                                features=(("metadata.version", 1, 25),)))
    epoch = reply.broker_epoch
    await service.heartbeat(Heartbeat(1, epoch, image.offset))
    await service.heartbeat(Heartbeat(1, epoch, image.offset))
    assert not image.brokers[1].fenced
    return epoch


def test_a_forward_step_of_the_wall_clock_fences_no_broker() -> None:
    async def run() -> None:
        clock = SteppedClock()
        service, image = _service(clock)
        epoch = await _unfenced_broker(service, image)
        clock.advance(1.0)
        await service.heartbeat(Heartbeat(1, epoch, image.offset))
        clock.step_wall(10 * SESSION_MS)  # NTP steps the controller's wall clock forward
        clock.advance(0.5)
        await service.tick()
        assert not image.brokers[1].fenced, "a broker heartbeating 0.5 s ago was fenced by a wall-clock step"
    asyncio.run(run())


def test_a_backward_step_of_the_wall_clock_keeps_no_silent_broker_alive() -> None:
    async def run() -> None:
        clock = SteppedClock()
        service, image = _service(clock)
        await _unfenced_broker(service, image)
        clock.step_wall(-10 * SESSION_MS)
        clock.advance(SESSION_MS / 1000 + 0.1)  # silent for longer than the session
        await service.tick()
        assert image.brokers[1].fenced, "a broker silent past its session stayed unfenced after a wall-clock step"
    asyncio.run(run())
