"""The flusher runs a round's fsyncs on a small pool (``FSYNC_THREADS``): the jobs of one
round overlap, each job's outcome goes back to its own log, a failure is reported once
and not retried."""

from __future__ import annotations

import asyncio
import threading
import time

from hightide.disk import flusher as flusher_mod
from hightide.disk.flusher import FSYNC_THREADS, Flusher


def test_a_rounds_fsyncs_overlap_and_outcomes_stay_with_their_jobs(monkeypatch):
    running, peak, calls = 0, 0, []
    lock = threading.Lock()

    def fake_run_flush(job):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            calls.append(job)
        time.sleep(0.05)  # an fsync
        with lock:
            running -= 1
        if job % 5 == 3:
            raise OSError(5, f"fsync of {job} failed")
    monkeypatch.setattr(flusher_mod, "run_flush", fake_run_flush)
    f = Flusher(lambda: None)

    async def scenario():
        return await f._run_jobs(list(range(10)))
    try:
        outcomes = asyncio.run(scenario())
    finally:
        f._executor.shutdown(wait=True)
    assert peak == FSYNC_THREADS > 1
    assert sorted(calls) == list(range(10))  # every job once: a failed fsync is not retried
    assert [str(e) if e else None for e in outcomes] == [
        f"[Errno 5] fsync of {i} failed" if i % 5 == 3 else None for i in range(10)]
