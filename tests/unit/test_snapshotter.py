"""Metadata snapshots in a running process, without sockets: when the snapshotter
snapshots and what it trims (a real MetadataLog), the FetchSnapshot download and its
failures (a fake controller channel), and a broker's follower that is told SnapshotId
loading the snapshot and fetching on from its end."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hightide.cluster.metadata_log import MetadataLog
from hightide.cluster.raft.messages import OffsetAndEpoch
from hightide.cluster.records import MetadataRecord, PartitionRecord, TopicRecord, encode
from hightide.cluster.snapshot import SnapshotError, encode_snapshot, image_records, snapshot_name
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, validate_batches
from hightide.node.metadata_follower import LoadSnapshot, MetadataFollower, plan
from hightide.node.snapshotter import (
    SnapshotFetchFailed,
    Snapshotter,
    fetch_snapshot,
    install_snapshot,
)
from tests.waiting import async_wait_until


def topic_records(i: int) -> list[MetadataRecord]:
    tid = str(uuid.UUID(int=500 + i))
    return [TopicRecord(f"t{i}", tid), PartitionRecord(tid, 0, 0, 0, (0,))]


def append(ml: MetadataLog, records: list[MetadataRecord], epoch: int = 0) -> None:
    batch = build_batch([(None, encode(r), [], 1000) for r in records])
    res = ml.log.append(batch, validate_batches(batch, client_origin=False), 1000, epoch)
    ml.apply(records, list(range(res.base_offset, res.base_offset + len(records))))


async def never(timeout_s: float) -> None:
    await asyncio.sleep(0)


def snapshotter(ml: MetadataLog, **kw: Any) -> Snapshotter:
    kw.setdefault("max_bytes", 2000)
    kw.setdefault("interval_ms", 0)
    return Snapshotter(ml, applied_end=lambda: ml.log.log_end_offset, wait_commit=never, **kw)


# -- creating ------------------------------------------------------------------------
def test_due_by_bytes_then_written_and_trimmed(tmp_path: Path) -> None:
    ml = MetadataLog(str(tmp_path), 0, True, segment_bytes=1500)
    s = snapshotter(ml)
    assert not s.due(0)  # nothing committed
    for i in range(3):
        append(ml, topic_records(i), epoch=2)
    assert s.bytes_since() < 2000 and not s.due(0)
    for i in range(3, 12):
        append(ml, topic_records(i), epoch=2)
    assert s.due(0)
    end = ml.log.log_end_offset
    sid = asyncio.run(s.create())
    assert sid == OffsetAndEpoch(end, 2)  # the epoch of the batch holding end - 1
    assert snapshot_name(sid) in os.listdir(ml.log.path)
    assert ml.log.log_start_offset == end and ml.snapshot_id == sid
    assert s.bytes_since() == 0 and not s.due(0) and s.created == 1
    assert s.last_stats["records"] == 24
    ml.close()
    again = MetadataLog(str(tmp_path), 0, True, segment_bytes=1500)
    assert again.snapshot_id == sid and len(again.image.topics) == 12
    again.close()


def test_due_by_interval_only_with_new_records(tmp_path: Path) -> None:
    ml = MetadataLog(str(tmp_path), 0, True)
    s = snapshotter(ml, max_bytes=1 << 30, interval_ms=1000)
    append(ml, topic_records(0))
    assert not s.due(s.last_ms + 999) and s.due(s.last_ms + 1000)
    asyncio.run(s.create())
    assert not s.due(s.last_ms + 10_000)  # nothing new since
    append(ml, topic_records(1))
    assert s.due(s.last_ms + 1000)
    assert not snapshotter(ml, max_bytes=1 << 30, interval_ms=0).due(s.last_ms + 10**9)  # 0: by size only
    ml.close()


def test_run_snapshots_after_a_commit_and_on_created_replaces_the_trim(tmp_path: Path) -> None:
    asyncio.run(_run(tmp_path))


async def _run(tmp_path: Path) -> None:
    ml = MetadataLog(str(tmp_path), 0, True)
    commit = asyncio.Event()
    created: list[tuple[OffsetAndEpoch, bytes]] = []

    async def wait_commit(timeout_s: float) -> None:
        try:
            await asyncio.wait_for(commit.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        commit.clear()

    s = Snapshotter(ml, max_bytes=500, interval_ms=0, applied_end=lambda: ml.log.log_end_offset,
                    wait_commit=wait_commit, on_created=lambda sid, data: created.append((sid, data)))
    task = asyncio.get_running_loop().create_task(s.run())
    try:
        for i in range(5):
            append(ml, topic_records(i))
        commit.set()
        await async_wait_until(lambda: created, 5, what="a snapshot after the commit")
        sid, data = created[0]
        assert sid.offset == ml.log.log_end_offset and ml.snapshots.read(sid) == data
        assert ml.log.log_start_offset == 0  # the Raft shell trims later (TrimLog), not the snapshotter
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        ml.close()


def test_records_committed_while_a_snapshot_is_written_are_snapshotted_without_another_commit(
        tmp_path: Path) -> None:
    """The lone voter's snapshot test timed out now and then under load: the commits of
    its last CreateTopics landed while the snapshot of the earlier ones was being written
    (nobody waiting for a commit then), so the next snapshot waited for a commit that
    never came (up to 60 s). A snapshot still due after one is written is taken at once."""
    asyncio.run(_due_again(tmp_path))


async def _due_again(tmp_path: Path) -> None:
    ml = MetadataLog(str(tmp_path), 0, True)
    created: list[OffsetAndEpoch] = []
    calls = 0

    async def wait_commit(timeout_s: float) -> None:  # one commit is signalled, then none
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.sleep(timeout_s)

    def on_created(sid: OffsetAndEpoch, data: bytes) -> None:
        created.append(sid)
        if len(created) == 1:  # committed while the first snapshot was being written
            for i in range(5, 10):
                append(ml, topic_records(i))

    for i in range(5):
        append(ml, topic_records(i))
    s = Snapshotter(ml, max_bytes=500, interval_ms=0, applied_end=lambda: ml.log.log_end_offset,
                    wait_commit=wait_commit, on_created=on_created)
    task = asyncio.get_running_loop().create_task(s.run())
    try:
        await async_wait_until(lambda: len(created) == 2, 5, what="a second snapshot with no commit signalled")
        assert created[1].offset == ml.log.log_end_offset > created[0].offset
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        ml.close()


# -- installing ----------------------------------------------------------------------
def source_snapshot(tmp_path: Path, n: int = 30) -> tuple[MetadataLog, OffsetAndEpoch, bytes]:
    src = MetadataLog(str(tmp_path / "controller"), 0, True)
    for i in range(n):
        append(src, topic_records(i))
    sid = OffsetAndEpoch(src.log.log_end_offset, 0)
    return src, sid, encode_snapshot(image_records(src.image), sid, 1000, 2000)


class SnapshotChannel:
    """A controller: Fetch answers from a queue, FetchSnapshot from ``snapshots`` in
    chunks of at most ``chunk`` bytes (or ``error``)."""

    def __init__(self, chunk: int = 700) -> None:
        self.answers: asyncio.Queue[Any] = asyncio.Queue()
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}
        self.chunk = chunk
        self.error = 0
        self.requests: list[tuple[int, dict]] = []

    async def connection(self) -> Any:
        return SimpleNamespace(pick_version=lambda key, hi, lo=0: hi, host="127.0.0.1", port=9093)

    async def request(self, api_key: int, version: Any, body: dict, **kw: Any) -> Any:
        self.requests.append((api_key, body))
        if api_key == 59:
            assert version(await self.connection()) == 1
            return self._snapshot(body)
        p = await self.answers.get()
        p.partition_index = 0
        return SimpleNamespace(error_code=0, responses=[SimpleNamespace(partitions=[p])])

    def _snapshot(self, body: dict) -> Any:
        req = body["topics"][0]["partitions"][0]
        sid = OffsetAndEpoch(req["snapshot_id"]["end_offset"], req["snapshot_id"]["epoch"])
        data = self.snapshots.get(sid, b"")
        pos = req["position"]
        error = self.error or (0 if sid in self.snapshots else ErrorCode.snapshot_not_found)
        p = SimpleNamespace(index=0, error_code=error, snapshot_id=SimpleNamespace(end_offset=sid.offset,
                                                                                   epoch=sid.epoch),
                            size=len(data), position=pos, unaligned_records=data[pos:pos + self.chunk])
        return SimpleNamespace(error_code=0, topics=[SimpleNamespace(name="__cluster_metadata", partitions=[p])])

    def reset(self) -> None:
        pass


def answer(hwm: int, snapshot: OffsetAndEpoch | None = None, epoch: int = 0) -> Any:
    sid = snapshot or OffsetAndEpoch(-1, -1)
    return SimpleNamespace(error_code=0, high_watermark=hwm, records=b"",
                           diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                           snapshot_id=SimpleNamespace(end_offset=sid.offset, epoch=sid.epoch),
                           current_leader=SimpleNamespace(leader_id=3000, leader_epoch=epoch))


def test_plan_reads_the_snapshot_id() -> None:
    assert plan(answer(90, OffsetAndEpoch(80, 4), epoch=6), 0) == LoadSnapshot(OffsetAndEpoch(80, 4), 6, 90)
    assert not isinstance(plan(answer(90), 0), LoadSnapshot)


def test_fetch_snapshot_downloads_by_position(tmp_path: Path) -> None:
    src, sid, data = source_snapshot(tmp_path)
    channel = SnapshotChannel(chunk=1000)
    channel.snapshots[sid] = data
    got = asyncio.run(fetch_snapshot(channel, sid, replica_id=1, leader_epoch=0, cluster_id="c"))
    assert got == data
    positions = [b["topics"][0]["partitions"][0]["position"] for k, b in channel.requests]
    assert positions == list(range(0, len(data), 1000))
    with pytest.raises(SnapshotFetchFailed, match="SNAPSHOT_NOT_FOUND"):
        asyncio.run(fetch_snapshot(channel, OffsetAndEpoch(7, 0), replica_id=1, leader_epoch=0, cluster_id="c"))
    channel.error = ErrorCode.fenced_leader_epoch
    with pytest.raises(SnapshotFetchFailed, match="FENCED_LEADER_EPOCH"):
        asyncio.run(fetch_snapshot(channel, sid, replica_id=1, leader_epoch=0, cluster_id="c"))
    src.close()


def test_install_rejects_bad_bytes_and_changes_nothing(tmp_path: Path) -> None:
    src, sid, data = source_snapshot(tmp_path)
    copy = MetadataLog(str(tmp_path / "broker"), 0, True, refetchable=True)
    append(copy, topic_records(0))
    with pytest.raises(SnapshotError):
        asyncio.run(install_snapshot(copy, sid, data[:-9]))
    assert copy.snapshots.ids() == [] and copy.log.log_end_offset == 2 and list(copy.image.topics) == ["t0"]
    asyncio.run(install_snapshot(copy, sid, data))
    assert copy.snapshot_id == sid and copy.log.log_start_offset == sid.offset and len(copy.image.topics) == 30
    src.close()
    copy.close()


def test_follower_below_the_log_start_loads_the_snapshot_and_fetches_on(tmp_path: Path) -> None:
    asyncio.run(_follower(tmp_path))


async def _follower(tmp_path: Path) -> None:
    src, sid, data = source_snapshot(tmp_path)
    channel = SnapshotChannel()
    channel.snapshots[sid] = data
    events: list[Any] = []
    local = MetadataLog(str(tmp_path / "broker"), 0, True, refetchable=True)
    f = MetadataFollower(local, channel, 1, epoch=lambda: 5, cluster_id=lambda: "c",  # type: ignore[arg-type]
                         on_applied=lambda a, c: events.append(("applied", a, c, len(local.image.topics))),
                         on_caught_up=lambda: events.append(("caught_up",)))
    channel.answers.put_nowait(answer(sid.offset, sid))
    f.start()
    try:
        await async_wait_until(lambda: sum(k == 1 for k, _ in channel.requests) == 2, 5, what="a Fetch after loading")
        assert sum(k == 59 for k, _ in channel.requests) == -(-len(data) // channel.chunk)  # chunk by chunk
        fetch = [b for k, b in channel.requests if k == 1][-1]["topics"][0]["partitions"][0]
        assert (fetch["fetch_offset"], fetch["last_fetched_epoch"]) == (sid.offset, sid.epoch)
        assert events == [("applied", sid.offset - 1, sid.offset - 1, 30), ("caught_up",)]
        assert local.log.log_start_offset == sid.offset and local.snapshots.ids() == [sid]
        assert sorted(local.image.topics) == sorted(src.image.topics)
    finally:
        await f.close()
        local.close()
        src.close()
    again = MetadataLog(str(tmp_path / "broker"), 0, True, refetchable=True)  # a restart starts from the snapshot
    assert again.snapshot_id == sid and len(again.image.topics) == 30
    again.close()


def test_a_snapshot_installed_meanwhile_supersedes_the_one_being_written(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(_superseded(tmp_path, monkeypatch))


async def _superseded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from hightide.node import snapshotter as module
    src, newer, data = source_snapshot(tmp_path, 40)
    copy = MetadataLog(str(tmp_path / "broker"), 0, True, refetchable=True)
    for i in range(5):
        append(copy, topic_records(i))
    s = snapshotter(copy, max_bytes=1)
    release = threading.Event()
    real = module._encode_and_write

    def slow(*args: Any) -> Any:
        release.wait(5)
        return real(*args)

    monkeypatch.setattr(module, "_encode_and_write", slow)
    own = asyncio.get_running_loop().create_task(s.create())
    await asyncio.sleep(0.05)
    await install_snapshot(copy, newer, data)  # the controller's, while ours is being written
    release.set()
    assert await own is None
    assert copy.snapshot_id == newer and copy.snapshots.ids() == [newer] and copy.log.log_start_offset == newer.offset
    assert not s.due(0) and s.last_end == newer.offset  # the snapshotter follows the installed one
    copy.trim_to_snapshot(OffsetAndEpoch(10, 0))  # an older one changes nothing
    assert copy.snapshot_id == newer and copy.log.log_start_offset == newer.offset
    copy.close()
    src.close()
