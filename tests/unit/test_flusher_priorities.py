"""The flusher's two pools (disk/flusher.py, aio/threads.py): periodic flushes,
which nobody waits for, run as a batch of their own on threads below the event loop's
CPU priority; flushes a request waits for run at the process's priority in rounds that
do not wait for the periodic batch. A log somebody waits for while it is in the
periodic batch is flushed again once the batch ends (appends after the batch's capture
are not covered by it)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from hightide.log.flush import FlushJob
from hightide.disk import flusher as flusher_mod
from hightide.disk.flusher import Flusher
from hightide.aio.threads import BACKGROUND_NICE, background_executor

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def _nice_of_a_thread_of(executor) -> int:
    return executor.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()


@linux_only
def test_background_threads_run_below_the_process_and_waited_for_ones_at_its_priority():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    f = Flusher(lambda: None)
    try:
        assert _nice_of_a_thread_of(f._background) == min(19, base + BACKGROUND_NICE)
        assert _nice_of_a_thread_of(f._executor) == base
    finally:
        f.shutdown_threads()
    pool = background_executor(1, "t")
    try:
        assert _nice_of_a_thread_of(pool) == min(19, base + BACKGROUND_NICE)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller is untouched
    finally:
        pool.shutdown(wait=True)


class _Log:
    """A partition log as the flusher sees it: due for a periodic flush or not."""

    def __init__(self, name: str, due: bool) -> None:
        self.name, self.due, self.ended = name, due, []

    def needs_flush(self, now: int) -> bool:
        return self.due

    def begin_flush(self, now: int) -> FlushJob:
        return FlushJob(None, [], (), 0, None, error=None, small_files=((self.name, "waited"),))  # type: ignore[arg-type]

    def begin_due_flush(self, now: int) -> FlushJob:
        return FlushJob(None, [], (), 0, None, error=None, small_files=((self.name, "periodic"),))  # type: ignore[arg-type]

    def end_flush(self, job: FlushJob, ok: bool) -> None:
        self.ended.append(ok)


def _open_logs(logs: list[_Log]):
    """The flusher's ``logs``: (key, log) pairs."""
    pairs = list(enumerate(logs))
    return lambda: pairs


def _fake_run_flush(release: threading.Event, ran: list[tuple[str, str, str]]):
    def fake_run_flush(job: FlushJob) -> None:
        name, kind = job.small_files[0]
        ran.append((name, kind, threading.current_thread().name))
        if kind == "periodic":
            assert release.wait(10)  # a slow periodic fsync
    return fake_run_flush


def test_a_waiter_is_answered_while_the_periodic_batch_still_runs(monkeypatch):
    release, ran = threading.Event(), []
    monkeypatch.setattr(flusher_mod, "run_flush", _fake_run_flush(release, ran))
    waited, periodic = _Log("waited", due=True), _Log("periodic", due=True)
    f = Flusher(_open_logs([waited, periodic]))

    async def scenario() -> None:
        fut = f.durable(waited)  # type: ignore[arg-type]
        await asyncio.wait_for(f.flush_due(), 5)  # the round does not wait for the periodic batch
        assert fut.done() and waited.ended == [True] and periodic.ended == []
        assert f._periodic is not None and not f._periodic.done()
        await f.flush_due()  # a second round while the batch runs starts no second batch
        for _ in range(500):  # the batch's thread may not have started yet (a loaded machine)
            if "periodic" in [k for _, k, _ in ran]:
                break
            await asyncio.sleep(0.01)
        assert [k for _, k, _ in ran].count("periodic") == 1
        release.set()
        await f._periodic
    try:
        asyncio.run(scenario())
    finally:
        release.set()
        f.shutdown_threads()
    assert periodic.ended == [True]
    threads = {(name, kind): thread for name, kind, thread in ran}
    assert threads[("waited", "waited")].startswith("hightide-fsync_")  # begin_flush: everything
    assert threads[("periodic", "periodic")].startswith("hightide-fsync-periodic")


def test_a_log_waited_for_during_its_periodic_flush_is_flushed_again_after_it(monkeypatch):
    release, ran = threading.Event(), []
    monkeypatch.setattr(flusher_mod, "run_flush", _fake_run_flush(release, ran))
    plog = _Log("p", due=True)
    f = Flusher(_open_logs([plog]))

    async def scenario() -> None:
        await f.flush_due()  # starts the periodic batch holding the log
        plog.due = False
        fut = f.durable(plog)  # type: ignore[arg-type]
        await f.flush_due()
        await asyncio.sleep(0.1)
        assert not fut.done()  # not answered by a batch captured before it was asked
        assert [k for _, k, _ in ran] == ["periodic"]  # and not flushed while the batch holds it
        release.set()
        await f._periodic
        await f.flush_due()
        await asyncio.wait_for(fut, 5)
    try:
        asyncio.run(scenario())
    finally:
        release.set()
        f.shutdown_threads()
    assert [k for _, k, _ in ran] == ["periodic", "waited"] and plog.ended == [True, True]
