"""The quorum-state file goes through the node's Storage engine (node/quorum_state.py):
on the in-memory engine a power cut (``MemoryStorage.crash``) after a write keeps the new
state, a crash in the middle of one (the temporary file's write or fsync failing, or the
directory fsync not done) keeps the old one; and ``awrite`` runs the write off the event
loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from hightide.cluster.raft import ElectionState
from hightide.log.storage import Storage
from hightide.log.storage_faulty import Fault, FaultyStorage
from hightide.log.storage_memory import MemoryStorage
from hightide.node.quorum_state import QuorumStateStore

DIR = "/data/__cluster_metadata-0"
OLD = ElectionState(3, 2, 2)
NEW = ElectionState(4, 1, -1)


def _store(storage: Storage) -> QuorumStateStore:
    return QuorumStateStore(DIR, [1, 2, 3], "cid", storage)


def test_a_crash_after_the_write_keeps_the_new_state() -> None:
    disk = MemoryStorage()
    _store(disk).write(OLD)
    _store(disk).write(NEW)
    disk.crash()
    assert _store(disk).read() == NEW


def test_the_first_write_creates_the_directory_durably() -> None:
    disk = MemoryStorage()
    _store(disk).write(NEW)
    disk.crash()
    assert _store(disk).read() == NEW


@pytest.mark.parametrize("fault", [
    Fault("write", "ENOSPC", path="quorum-state.", partial=True),  # the temporary file torn
    Fault("fsync", "EIO", path="quorum-state."),  # the temporary file never durable
], ids=["torn-write", "file-fsync"])
def test_a_crash_in_the_middle_of_a_write_keeps_the_old_state(fault: Fault) -> None:
    memory = MemoryStorage()
    disk = FaultyStorage(memory)
    _store(disk).write(OLD)
    disk.set_rules(fault)
    with pytest.raises(OSError):
        _store(disk).write(NEW)
    memory.crash()
    disk.clear()
    assert _store(disk).read() == OLD


class _DirFsyncFails(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def fsync_dir(self, path: str) -> None:
        if self.fail:
            raise OSError(5, "injected", path)
        super().fsync_dir(path)


def test_a_crash_before_the_directory_fsync_keeps_the_old_state() -> None:
    disk = _DirFsyncFails()
    _store(disk).write(OLD)
    disk.fail = True
    with pytest.raises(OSError):
        _store(disk).write(NEW)  # renamed over the old file, but the rename is not durable
    assert _store(disk).read() == NEW  # (what the running process sees)
    disk.fail = False
    disk.crash()
    assert _store(disk).read() == OLD


class _ThreadRecording(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.fsync_threads: set[int] = set()

    def fsync_dir(self, path: str) -> None:
        self.fsync_threads.add(threading.get_ident())
        super().fsync_dir(path)


def test_awrite_runs_off_the_event_loop() -> None:
    disk = _ThreadRecording()

    async def run() -> int:
        await _store(disk).awrite(NEW)
        return threading.get_ident()
    loop_thread = asyncio.run(run())
    assert disk.fsync_threads and loop_thread not in disk.fsync_threads
    assert _store(disk).read() == NEW
