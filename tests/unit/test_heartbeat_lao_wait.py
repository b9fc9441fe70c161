"""Heartbeats on the active controller while metadata writes are in flight (issue 33,
seed 004's read-after-write through the brokers; node/controller_service.py).

A broker answers a forwarded write once the lowest acknowledged offset (LAO) it learns
from its heartbeat answers covers it. Two things made that slow under write load:

* a heartbeat that changes nothing waited for every write appended before it to commit
  (one Raft commit round), although its answer rests on no pending write when none
  touches the brokers: now it is answered at once (the lone voter's fsync is held here,
  so the write before it cannot commit);
* its answer carried the LAO as of its arrival, so the broker learned that the last
  broker had applied its write only at a later heartbeat: now one from an unfenced
  broker the LAO has not caught up with is parked until the LAO rises (another broker's
  metadata Fetch or heartbeat acknowledged more), at most ``LAO_WAIT_MS``.

A heartbeat whose answer depends on a pending change of the brokers still waits for it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from hightide.aio.clock import ManualClock
from hightide.cluster.broker_records import NoOpRecord
from hightide.cluster.image import MetadataImage
from hightide.cluster.lifecycle import Heartbeat, LifecycleConfig, Registration
from hightide.cluster.settings import ClusterSettings, Voter
from hightide.node.broker_node import BrokerNode
from hightide.node import controller_service as cs
from hightide.node.controller_service import ControllerService
from hightide.node.metadata_runtime import RaftMetadataRuntime
from tests.unit.test_controller_session_clock import _service as controller_service_on
from tests.unit.test_raft_shell import FakeFsync, Recorder, create, make_shell
from tests.waiting import async_wait_until

FEATURES = (("metadata.version", 1, 25),)


# -- over the real Raft runtime (a lone voter whose fsyncs the test can hold) -----------

async def _runtime_service(tmp_path: Path, fsync: FakeFsync) -> tuple[Any, RaftMetadataRuntime, ControllerService]:
    shell = make_shell(tmp_path, 1, Recorder(), fsync=fsync, voters=(1,))
    shell.start()
    await async_wait_until(lambda: shell.is_active, 5, what="the lone voter active")
    runtime = RaftMetadataRuntime(shell)

    async def write(op: Any) -> Any:
        response, _ = await runtime.write(0, op, 1000)
        return response
    service = ControllerService(node_id=1, cluster_id="c", config=LifecycleConfig(60_000, 0), write=write,
                                image=lambda: shell.metadata.image, metadata_log=lambda: shell.plog,
                                committed_end=lambda: runtime.committed_offset(0), raft=None)
    service.activate(0)
    return shell, runtime, service


async def _unfenced(service: ControllerService, shell: Any, broker_id: int) -> int:
    reply = await service.register(Registration(broker_id, "c", uuid.uuid4(), features=FEATURES))
    for _ in range(2):  # caught up with its registration, then unfenced
        await service.heartbeat(Heartbeat(broker_id, reply.broker_epoch, shell.metadata.image.offset))
    assert not shell.metadata.image.brokers[broker_id].fenced
    return reply.broker_epoch


def test_a_heartbeat_that_changes_nothing_is_answered_while_a_write_is_pending(tmp_path: Path) -> None:
    async def run() -> None:
        fsync = FakeFsync()
        shell, runtime, service = await _runtime_service(tmp_path, fsync)
        epoch = await _unfenced(service, shell, 1)
        applied = shell.metadata.image.offset
        fsync.held = True  # nothing commits from here on
        pending = asyncio.ensure_future(runtime.write(0, create("orders"), 1000))
        await async_wait_until(lambda: runtime.in_flight == 1, 5, what="the creation appended")
        beat = asyncio.ensure_future(service.heartbeat(Heartbeat(1, epoch, applied)))
        # the old code parked it until the creation committed (one Raft commit round)
        await async_wait_until(lambda: beat.done(), 5, what="the heartbeat answered before the creation commits")
        reply = beat.result()
        assert not pending.done() and not reply.is_fenced and reply.lowest_acknowledged_offset == applied
        for fut in fsync.pending:
            fut.set_result(None)
        fsync.held = False
        await pending
        await shell.close()
    asyncio.run(run())


def test_a_heartbeat_waits_for_a_pending_change_of_the_brokers(tmp_path: Path) -> None:
    async def run() -> None:
        fsync = FakeFsync()
        shell, runtime, service = await _runtime_service(tmp_path, fsync)
        epoch = await _unfenced(service, shell, 1)
        fsync.held = True
        # a second broker registers: its record is appended, not committed
        other = asyncio.ensure_future(service.register(Registration(2, "c", uuid.uuid4(), features=FEATURES)))
        await async_wait_until(lambda: runtime.in_flight == 1, 5, what="the registration appended")
        beat = asyncio.ensure_future(service.heartbeat(Heartbeat(1, epoch, shell.metadata.image.offset)))
        await asyncio.sleep(0.1)
        assert not beat.done(), "answered from brokers that are not committed yet"
        for fut in fsync.pending:
            fut.set_result(None)
        fsync.held = False
        await asyncio.gather(other, beat)
        await shell.close()
    asyncio.run(run())


# -- the LAO wait (a write function that commits at once; the controller's clock is manual) --

def _service() -> tuple[ControllerService, MetadataImage, ManualClock]:
    clock = ManualClock()
    service, image = controller_service_on(clock)
    return service, image, clock


async def _broker_1_ahead(service: ControllerService, image: MetadataImage) -> tuple[dict[int, int], int]:
    """Brokers 1 and 2 unfenced, each having acknowledged everything; then one more
    record, which broker 1 has applied and broker 2 not yet: (epochs, its offset)."""
    epochs = {}
    for b in (1, 2):
        epochs[b] = (await service.register(Registration(b, "c", uuid.uuid4(), features=FEATURES))).broker_epoch
    for _ in range(3):
        for b in (1, 2):
            for other in (1, 2):  # both fetched everything (so no heartbeat here waits for the LAO)
                service.observe_fetch(other, image.offset + 1, epochs[other], 0)
            await service.heartbeat(Heartbeat(b, epochs[b], image.offset))
    assert not image.brokers[1].fenced and not image.brokers[2].fenced
    assert service.lifecycle.lowest_acknowledged_offset(image, 0) == image.offset
    await service._write(lambda img: (None, [NoOpRecord()]))
    return epochs, image.offset


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_heartbeat_is_answered_when_the_last_broker_acknowledges() -> None:
    async def run() -> None:
        service, image, _ = _service()
        epochs, target = await _broker_1_ahead(service, image)
        beat = asyncio.ensure_future(service.heartbeat(Heartbeat(1, epochs[1], target)))
        await _settle()
        # the old code answered at once, with the LAO broker 2 still held back
        assert not beat.done(), f"answered with an LAO below what broker 1 applied: {beat.result()}"
        service.observe_fetch(2, target + 1, epochs[2], 0)  # broker 2's next Fetch acknowledges it
        done, _ = await asyncio.wait((beat,), timeout=5)
        assert done and beat.result().lowest_acknowledged_offset == target
        assert not beat.result().is_fenced
    asyncio.run(run())


def test_a_parked_heartbeat_is_answered_after_the_wait_with_the_lao_as_it_is() -> None:
    async def run() -> None:
        service, image, clock = _service()
        epochs, target = await _broker_1_ahead(service, image)
        beat = asyncio.ensure_future(service.heartbeat(Heartbeat(1, epochs[1], target)))
        await _settle()
        assert not beat.done(), f"answered with an LAO below what broker 1 applied: {beat.result()}"
        # broker 2 fetches, but at an offset it had already acknowledged: the LAO stays
        service.observe_fetch(2, target, epochs[2], 0)
        await _settle()
        assert not beat.done()
        clock.advance(cs.LAO_WAIT_MS / 1000)
        done, _ = await asyncio.wait((beat,), timeout=5)
        assert done and beat.result().lowest_acknowledged_offset == target - 1
    asyncio.run(run())


def test_no_wait_when_the_lao_covers_the_broker_or_it_asks_to_be_fenced() -> None:
    async def run() -> None:
        service, image, _ = _service()
        epochs, target = await _broker_1_ahead(service, image)
        # broker 2 asks to be fenced: answered at once (fenced), nothing to wait for
        fenced = asyncio.ensure_future(service.heartbeat(Heartbeat(2, epochs[2], target - 1, want_fence=True)))
        done, _ = await asyncio.wait((fenced,), timeout=5)
        assert done and fenced.result().is_fenced
        # now only broker 1 counts: the LAO covers what it applied, answered at once
        beat = asyncio.ensure_future(service.heartbeat(Heartbeat(1, epochs[1], target)))
        done, _ = await asyncio.wait((beat,), timeout=5)
        assert done and beat.result().lowest_acknowledged_offset >= target
    asyncio.run(run())


# -- the broker's side ---------------------------------------------------------------------

def test_the_broker_heartbeats_on_a_connection_of_its_own() -> None:
    """The controller answers a connection's requests in order: a heartbeat sent behind
    forwarded writes (answered once committed) would wait for their commit, and one
    behind the metadata long-poll for its 500 ms. Kafka's broker keeps its heartbeat,
    forwarding and Raft channels apart too; all three follow the same active controller."""
    settings = ClusterSettings(roles=frozenset({"broker"}), node_id=1,
                               voters=(Voter(3000, "127.0.0.1", 1),))
    node = BrokerNode(settings, security=None, cluster_id=lambda: "c", listeners=list, on_metadata_change=lambda: None,
                      data_dir="/nonexistent")
    heartbeats, forwarded, fetches = node.lifecycle.channel, node.forwarder.channel, node.fetch_channel
    assert len({id(heartbeats), id(forwarded), id(fetches)}) == 3, "heartbeats share a channel with other requests"
    assert heartbeats.locator is forwarded.locator is fetches.locator
