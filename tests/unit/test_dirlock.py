"""The data-directory lock (log/dirlock.py): exclusive, non-blocking, dies with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from hightide.log.dirlock import LOCK_FILE, DataDirLocked, DirLock

HOLD = ("import sys, time\n"
        "from hightide.log.dirlock import DirLock\n"
        "DirLock.acquire(sys.argv[1])\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")


@pytest.fixture
def holder():
    """Start a child process that holds the lock of a directory; kill it at the end."""
    procs: list[subprocess.Popen] = []

    def start(path) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        return p
    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def test_second_lock_from_another_fd_fails(tmp_path) -> None:
    first = DirLock.acquire(str(tmp_path))
    try:
        with pytest.raises(DataDirLocked) as info:
            DirLock.acquire(str(tmp_path))
        assert info.value.path == str(tmp_path) and info.value.pid == os.getpid()
        assert str(info.value) == f"data directory {tmp_path} is in use by another hightide process (pid {os.getpid()})"
        assert isinstance(info.value, OSError)
    finally:
        first.release()


def test_released_lock_can_be_retaken(tmp_path) -> None:
    first = DirLock.acquire(str(tmp_path))
    first.release()
    first.release()  # idempotent
    assert not first.held
    second = DirLock.acquire(str(tmp_path))
    assert second.held
    second.release()
    assert (tmp_path / LOCK_FILE).exists()  # the file stays, as Kafka's .lock does


def test_creates_the_directory_and_writes_the_pid(tmp_path) -> None:
    d = tmp_path / "new" / "dir"
    lock = DirLock.acquire(str(d))
    try:
        assert (d / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        assert os.listdir(d) == [LOCK_FILE]  # nothing else is touched
    finally:
        lock.release()


def test_lock_held_by_another_process_names_its_pid(tmp_path, holder) -> None:
    p = holder(tmp_path)
    with pytest.raises(DataDirLocked) as info:
        DirLock.acquire(str(tmp_path))
    assert info.value.pid == p.pid


def test_stale_lock_file_of_a_dead_process_does_not_block(tmp_path, holder) -> None:
    p = holder(tmp_path)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert (tmp_path / LOCK_FILE).read_text() == f"{p.pid}\n"  # left behind, still naming the dead pid
    lock = DirLock.acquire(str(tmp_path))
    try:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_a_longer_old_pid_is_overwritten_not_appended(tmp_path) -> None:
    (tmp_path / LOCK_FILE).write_text("123456789\n")
    lock = DirLock.acquire(str(tmp_path))
    try:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_embedded_broker_start_raises_before_touching_the_directory(tmp_path) -> None:
    import asyncio

    from hightide import Broker, BrokerConfig

    async def run() -> None:
        first = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        await first.start()
        try:
            files = sorted(os.listdir(tmp_path))
            second = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
            with pytest.raises(DataDirLocked) as info:
                await second.start()
            assert (info.value.path, info.value.pid) == (str(tmp_path), os.getpid())
            assert second.logs is None and second.metadata is None and second.listeners.server is None
            assert sorted(os.listdir(tmp_path)) == files
        finally:
            await first.stop()
        again = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        await again.start()  # released by stop
        await again.stop()

    asyncio.run(run())
