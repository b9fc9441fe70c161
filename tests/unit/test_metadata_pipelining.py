"""Pipelined metadata writes (node/metadata_runtime.py, issue 33): the active controller
appends a write without waiting for the writes before it to commit, each op decides
from the speculative image (the committed one plus every batch appended), answers are
parked until their batch commits, an op with no records waits for what was appended
before it, and a leader that loses its role fails what is pending (REQUEST_TIMED_OUT
for a write it appended, NOT_CONTROLLER for one that appended nothing).

A lone voter whose fsyncs the test holds makes the commit points exact; three shells on
an in-memory network give the leadership loss.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from hightide.cluster.broker_records import RegisterBrokerRecord
from hightide.cluster.image import MetadataImage
from hightide.cluster.records import ConfigRecord, PartitionChangeRecord, PartitionRecord, TopicRecord
from hightide.cluster.snapshot import copy_image
from hightide.coordinator.runtime import CoordinatorUnavailable
from hightide.node.metadata_runtime import RaftMetadataRuntime
from hightide.protocol.errors import ErrorCode
from tests.unit.test_raft_shell import FakeFsync, Net, Recorder, active, create, make_shell, start_quorum
from tests.waiting import async_wait_until


async def _active_lone_voter(tmp_path: Path, fsync: FakeFsync) -> Any:
    shell = make_shell(tmp_path, 1, Recorder(), fsync=fsync, voters=(1,))
    shell.start()
    await async_wait_until(lambda: fsync.pending, 5, what="the LeaderChange fsync")
    fsync.pending.pop(0).set_result(None)
    await async_wait_until(lambda: shell.is_active, 5, what="active once the LeaderChange is durable")
    return shell


def test_writes_are_appended_before_the_earlier_ones_commit_and_decide_from_them(tmp_path: Path) -> None:
    async def run() -> None:
        fsync = FakeFsync(held=True)
        shell = await _active_lone_voter(tmp_path, fsync)
        runtime = RaftMetadataRuntime(shell)
        start = shell.plog.log_end_offset
        first = asyncio.ensure_future(runtime.write(0, create("orders"), 1000))
        again = asyncio.ensure_future(runtime.write(0, create("orders"), 1000))  # decided from "orders" pending
        other = asyncio.ensure_future(runtime.write(0, create("payments"), 1000))
        # both creations are appended while nothing is durable yet (the old serial path
        # appended "payments" only once "orders" had committed)
        await async_wait_until(lambda: shell.plog.log_end_offset >= start + 4, 5,
                               what="the second creation appended before the first commits")
        assert runtime.in_flight == 3 and not any(w.done() for w in (first, again, other))
        assert not shell.metadata.image.topics  # the committed image holds nothing uncommitted
        for fut in list(fsync.pending):
            fut.set_result(None)
        fsync.held = False
        (created, records), (dup, dup_records), (paid, _) = await asyncio.gather(first, again, other)
        assert created[0].error_code == ErrorCode.none and records
        assert dup[0].error_code == ErrorCode.topic_already_exists and not dup_records
        assert paid[0].error_code == ErrorCode.none
        assert sorted(shell.metadata.image.topics) == ["orders", "payments"]
        assert runtime.in_flight == 0
        await shell.close()
    asyncio.run(run())


def test_a_write_without_records_is_answered_once_the_writes_before_it_commit(tmp_path: Path) -> None:
    async def run() -> None:
        fsync = FakeFsync(held=True)
        shell = await _active_lone_voter(tmp_path, fsync)
        runtime = RaftMetadataRuntime(shell)
        # nothing pending: answered at once
        assert await runtime.write(0, lambda image: ("idle", []), 1000) == ("idle", [])
        first = asyncio.ensure_future(runtime.write(0, create("orders"), 1000))
        seen = asyncio.ensure_future(runtime.write(0, lambda image: ("orders" in image.topics, []), 1000))
        await async_wait_until(lambda: fsync.pending, 5, what="the creation's fsync")
        await asyncio.sleep(0.05)
        assert not seen.done()  # its answer rests on the pending creation
        fsync.pending.pop(0).set_result(None)
        assert await seen == (True, [])
        assert first.done() and "orders" in shell.metadata.image.topics
        await shell.close()
    asyncio.run(run())


def test_a_leader_losing_its_role_fails_the_pending_writes_by_what_they_appended(tmp_path: Path) -> None:
    async def run() -> None:
        net = Net()
        shells = await start_quorum(tmp_path, net)
        try:
            old = active(net)
            runtime = RaftMetadataRuntime(old)
            net.cut.add(old.node_id)
            appended = asyncio.ensure_future(runtime.write(0, create("maybe"), 1000))
            nothing = asyncio.ensure_future(runtime.write(0, lambda image: ("maybe" in image.topics, []), 1000))
            for fut, code in ((appended, ErrorCode.request_timed_out), (nothing, ErrorCode.not_controller)):
                with pytest.raises(CoordinatorUnavailable) as lost:
                    await fut
                assert lost.value.error_code == code
            assert "maybe" not in old.metadata.image.topics
            survivors = [s for s in shells.values() if s is not old]
            await async_wait_until(lambda: any(s.is_active for s in survivors), 10, what="a new active controller")
            new = next(s for s in survivors if s.is_active)
            result, _ = await RaftMetadataRuntime(new).write(0, create("maybe"), 1000)
            assert result[0].error_code == ErrorCode.none  # the lost speculative state is nowhere
        finally:
            for s in shells.values():
                await s.close()
    asyncio.run(run())


def test_the_speculative_images_copy_is_independent_of_the_committed_image() -> None:
    image = MetadataImage()
    tid = uuid.uuid4()
    image.apply(TopicRecord("orders", str(tid)), 0)
    image.apply(PartitionRecord(str(tid), 0, 1, 0, (1, 2), (1, 2)), 1)
    image.apply(ConfigRecord(2, "orders", "retention.ms", "1000"), 2)
    image.apply(RegisterBrokerRecord(1, str(uuid.uuid4()), 3), 3)
    copy = copy_image(image)
    assert copy == image
    copy.apply(PartitionChangeRecord(str(tid), 0, leader=2), 4)
    copy.apply(ConfigRecord(2, "orders", "retention.ms", "2000"), 5)
    copy.apply(TopicRecord("payments", str(uuid.uuid4())), 6)
    copy.apply(RegisterBrokerRecord(1, str(uuid.uuid4()), 7, fenced=False), 7)
    assert image.topics["orders"].partitions[0].leader == 1
    assert image.topics["orders"].configs == {"retention.ms": "1000"}
    assert sorted(image.topics) == ["orders"] and image.offset == 3
    assert image.brokers[1].epoch == 3 and image.brokers[1].fenced
    assert copy.topics["orders"].partitions[0].leader == 2
    assert copy.topics_by_id[tid] is copy.topics["orders"]
