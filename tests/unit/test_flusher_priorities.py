"""The flusher's two pools (server/flusher.py, server/threads.py): periodic flushes,
which nobody waits for, run on threads below the event loop's CPU priority; flushes a
request waits for run at the process's priority, and their waiters are answered as soon
as their own fsyncs are done, not when the round's periodic fsyncs are."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from hightide.log.flush import FlushJob
from hightide.server import flusher as flusher_mod
from hightide.server.flusher import Flusher
from hightide.server.threads import BACKGROUND_NICE, background_executor

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def _nice_of_a_thread_of(executor) -> int:
    return executor.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()


@linux_only
def test_background_threads_run_below_the_process_and_waited_for_ones_at_its_priority():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    f = Flusher(broker=None)  # type: ignore[arg-type]
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


class _Logs(list):
    pass


class _Broker:
    def __init__(self, logs: list[_Log]) -> None:
        self.logs = _Logs((i, lg) for i, lg in enumerate(logs))


def test_a_waiter_is_answered_before_the_rounds_periodic_fsyncs_end(monkeypatch):
    release = threading.Event()
    ran: list[tuple[str, str, str]] = []

    def fake_run_flush(job: FlushJob) -> None:
        name, kind = job.small_files[0]
        ran.append((name, kind, threading.current_thread().name))
        if kind == "periodic":
            assert release.wait(10)  # a slow periodic fsync
    monkeypatch.setattr(flusher_mod, "run_flush", fake_run_flush)
    waited, periodic = _Log("waited", due=True), _Log("periodic", due=True)
    f = Flusher(broker=_Broker([waited, periodic]))  # type: ignore[arg-type]

    async def scenario() -> None:
        fut = f.durable(waited)  # type: ignore[arg-type]
        round_ = asyncio.ensure_future(f.flush_due())
        await asyncio.wait_for(fut, 5)  # answered while the periodic fsync still runs
        assert not round_.done() and periodic.ended == [] and waited.ended == [True]
        release.set()
        await round_
    try:
        asyncio.run(scenario())
    finally:
        release.set()
        f.shutdown_threads()
    assert periodic.ended == [True]
    kinds = {(name, kind): thread for name, kind, thread in ran}
    assert kinds[("waited", "waited")].startswith("hightide-fsync_")  # begin_flush: everything
    assert kinds[("periodic", "periodic")].startswith("hightide-fsync-periodic")
