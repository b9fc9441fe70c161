"""The flush policy: fsync partition logs on ``log.flush.interval.ms`` (and
``flush.ms`` per topic), when ``log.flush.interval.messages`` is reached, and on demand
for acks that must wait for durability.

fsync never runs on the event loop: each round captures what to flush on the loop
(:meth:`PartitionLog.begin_flush`), fsyncs on small pools of worker threads
(:func:`run_flush`, the logs spread over ``FSYNC_THREADS`` threads; fsync releases the
GIL, so the loop keeps serving, and the file system overlaps the fsyncs of different
files), and completes on the loop (:meth:`PartitionLog.end_flush`). A log is in a round
at most once and rounds never overlap, so a log is never flushed twice at once; a failed
fsync is never retried (``end_flush`` takes the log offline). Durability requests that
arrive during a round share the next one (group commit).

Two pools: the logs somebody waits for (:meth:`Flusher.durable`: an acknowledgement, a
coordinator write) are fsynced at the process's priority in the round; the periodic
flushes nobody waits for run as a batch of their own on threads of lower CPU priority
(:mod:`hightide.aio.threads`), so their writeback work does not delay the event loop, and rounds do
not wait for that batch: at most one periodic batch runs at a time, and a log in it that
somebody waits for meanwhile is flushed again once the batch ends.

Built from ``logs``: a callable returning the open partition logs (the broker's
:class:`~hightide.log.manager.LogManager`, iterated as ``(topic-partition, log)`` pairs),
or None while there are none (before start, after stop); the periodic policy looks at
them at most once per ``TICK_S``, at ``clock.now_ms()`` (:mod:`hightide.aio.clock`) —
with more than ``SWEEP_SLICE`` logs at that many per tick, so ``flush.ms`` is checked once per sweep
(Kafka checks it every ``log.flush.scheduler.interval.ms``). With ``dirty_feed`` (the
broker: each log's ``on_dirty`` calls :meth:`Flusher.note_dirty` on an append, a new log
start offset or a truncation) it looks at the logs written since their last flush
instead, plus a backstop sweep of ``BACKSTOP_SLICE`` logs per tick. Durability is asked
for per log (:meth:`Flusher.durable`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from concurrent.futures import Executor, ThreadPoolExecutor
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..log.flush import FlushJob, run_flush
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.tasks import wait_event
from ..aio.threads import background_executor

if TYPE_CHECKING:
    from ..log.partition_log import PartitionLog

log = logging.getLogger("hightide.flush")
TICK_S = 0.05
FSYNC_THREADS = 4  # a round's logs are fsynced on this many threads at once
#: At most this many logs are checked by the periodic policy in one round (a round runs at
#: least every TICK_S): with more partitions each is looked at once per sweep of
#: N / SWEEP_SLICE ticks (2.5 s at 100,000 partitions).
SWEEP_SLICE = 2000
#: With a feed of the logs that changed (``dirty_feed``), the sweep over every log is only
#: a backstop: this many logs per tick (a sweep of 100,000 logs in 25 s).
BACKSTOP_SLICE = 200

OpenLogs = Callable[[], "Iterable[tuple[tuple[str, int], PartitionLog]] | None"]
"""The open partition logs as (topic-partition, log) pairs, or None when there are none."""


class Flusher:
    def __init__(self, logs: OpenLogs, *, clock: Clock = SYSTEM_CLOCK, dirty_feed: bool = False) -> None:
        self._logs = logs
        #: True: the logs report when they may need a flush (:meth:`note_dirty`, their
        #: ``on_dirty``); the periodic policy looks at those, plus a slow backstop sweep
        #: of ``BACKSTOP_SLICE`` logs per tick over all of them. False: the sweep of
        #: ``SWEEP_SLICE`` logs per tick over all of them.
        self._dirty_feed = dirty_feed
        self._dirty: dict[int, "PartitionLog"] = {}  # reported, in order; looked at SWEEP_SLICE per tick
        self.clock = clock  # the flush policy's now (the round tick waits on the loop's time)
        self._requested: dict[int, tuple["PartitionLog", list[asyncio.Future]]] = {}
        self._wakeup: asyncio.Event | None = None
        self._executor = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="hightide-fsync")  # waited for
        self._background = background_executor(FSYNC_THREADS, "hightide-fsync-periodic")
        self._round: asyncio.Future | None = None
        self._periodic: asyncio.Task | None = None  # the periodic batch running, if any
        self._periodic_logs: set[int] = set()  # the logs in it
        self._sweep: list["PartitionLog"] = []  # the periodic policy's sweep over the logs
        self._sweep_pos = 0
        self._next_slice_at = 0.0

    def note_dirty(self, plog: "PartitionLog") -> None:
        """(A log's ``on_dirty``, on the loop.) ``plog`` may need a flush: the periodic
        policy looks at it from its next tick until it is flushed. Cheap: an append calls it."""
        self._dirty[id(plog)] = plog

    def durable(self, plog: "PartitionLog") -> asyncio.Future:
        """A future resolved once everything appended to ``plog`` so far is fsynced
        (or failed with the OSError of the fsync)."""
        fut = asyncio.get_running_loop().create_future()
        entry = self._requested.setdefault(id(plog), (plog, []))
        entry[1].append(fut)
        if self._wakeup is not None:
            self._wakeup.set()
        return fut

    async def run(self) -> None:
        self._wakeup = asyncio.Event()
        while True:
            await wait_event(self._wakeup, TICK_S)
            self._wakeup.clear()
            self._round = asyncio.ensure_future(self.flush_due())
            await asyncio.shield(self._round)

    async def close(self) -> None:
        """Wait for a round and a periodic batch in progress, answer the durability
        still asked for, then stop the worker threads."""
        if self._round is not None and not self._round.done():
            try:
                await self._round
            except Exception:
                pass
        if self._periodic is not None:
            await asyncio.gather(self._periodic, return_exceptions=True)
        if self._requested:  # durability asked after the last round (the run task is cancelled by now)
            await self.flush_due(periodic=False)
        self.shutdown_threads()

    def shutdown_threads(self) -> None:
        """Stop the worker threads once what they are doing is done (blocking)."""
        self._executor.shutdown(wait=True)
        self._background.shutdown(wait=True)

    async def flush_due(self, periodic: bool = True) -> None:
        """One round: fsync the logs somebody waits for and answer them; start a periodic
        batch of the logs the flush policy says are due (``periodic``) unless one is
        still running (it is not waited for)."""
        requested, self._requested = self._requested, {}
        for key in [k for k in requested if k in self._periodic_logs]:  # flushed again after the batch
            plog, futures = requested.pop(key)
            self._requested.setdefault(key, (plog, []))[1].extend(futures)
        now = self.clock.now_ms()
        waited = [(key, plog, plog.begin_flush(now)) for key, (plog, _) in requested.items()]
        if periodic and (self._periodic is None or self._periodic.done()):
            # what the policy says: maybe only a new log start offset and directory
            # entries, without fsyncing segments
            due = []
            seen: set[int] = set()
            for plog in self._next_slice():
                key = id(plog)
                if key in requested or key in seen:
                    continue
                seen.add(key)
                if plog.needs_flush(now):
                    due.append((key, plog, plog.begin_due_flush(now)))
                    if self._dirty_feed:  # looked at again after the batch: a job without the
                        self._dirty[key] = plog  # segments (flush.ms not reached) leaves data unflushed
                elif self._dirty_feed and plog.flush_pending():
                    self._dirty[key] = plog  # flush.ms not reached yet: looked at again
            if due:
                self._periodic_logs = {key for key, _, _ in due}
                self._periodic = asyncio.ensure_future(self._complete(due, {}, self._background))
                self._periodic.add_done_callback(self._periodic_done)
        await self._complete(waited, requested, self._executor)

    def _next_slice(self) -> list["PartitionLog"]:
        """The logs the periodic policy looks at this round, at most once per ``TICK_S``:
        rounds asked for by :meth:`durable` come more often (after every applied metadata
        batch, every acks=all write), and the policy must cost at most a slice of checks
        per tick whatever the number of partitions and of rounds.

        Without a dirty feed: all the logs when there are at most ``SWEEP_SLICE``, else
        the next ``SWEEP_SLICE`` of a sweep over a list taken when the last sweep ended
        (logs opened since wait for the next sweep; closed ones never need a flush). With
        one: up to ``SWEEP_SLICE`` of the logs reported by :meth:`note_dirty` (those not
        flushed this round are reported again, at the end), and ``BACKSTOP_SLICE`` of
        the sweep: idle logs cost nothing but the backstop (issue 33: at 30,000
        partitions the sweep was a quarter of a node's Python time while it created
        topics)."""
        now = self.clock.monotonic()
        if now < self._next_slice_at:  # the policy looks once per TICK_S, not per round
            return []
        self._next_slice_at = now + TICK_S
        if not self._dirty_feed:
            return self._sweep_slice(SWEEP_SLICE)
        keys = list(itertools.islice(self._dirty, SWEEP_SLICE))
        reported = [self._dirty.pop(k) for k in keys]
        return reported + self._sweep_slice(BACKSTOP_SLICE)

    def _sweep_slice(self, size: int) -> list["PartitionLog"]:
        """The next ``size`` logs of the sweep over every open log (see :meth:`_next_slice`)."""
        if self._sweep_pos >= len(self._sweep):
            logs = self._logs()
            self._sweep = [plog for _, plog in logs] if logs is not None else []
            self._sweep_pos = 0
            if len(self._sweep) <= size:
                out, self._sweep = self._sweep, []
                return out
        out = self._sweep[self._sweep_pos:self._sweep_pos + size]
        self._sweep_pos += size
        return out

    def _periodic_done(self, task: asyncio.Task) -> None:
        self._periodic_logs = set()
        if not task.cancelled() and task.exception() is not None:
            log.error("periodic flush failed", exc_info=task.exception())
        if self._requested and self._wakeup is not None:  # requests deferred behind the batch
            self._wakeup.set()

    async def _complete(self, jobs: list[tuple[int, "PartitionLog", FlushJob]],
                        requested: dict[int, tuple["PartitionLog", list[asyncio.Future]]], executor: Executor) -> None:
        """Run ``jobs`` on ``executor``, end each log's flush, answer its waiters."""
        if not jobs:
            return
        outcomes = await self._run_jobs([job for _, _, job in jobs], executor)
        for (key, plog, job), err in zip(jobs, outcomes):
            plog.end_flush(job, ok=err is None)
            if err is not None:
                log.error("fsync failed for %s: %s", getattr(plog, "path", plog), err)
            for fut in requested.get(key, (None, []))[1]:
                if fut.done():
                    continue
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)

    async def _run_jobs(self, jobs: list[FlushJob], executor: Executor | None = None) -> list[OSError | None]:
        """Run the jobs on up to ``FSYNC_THREADS`` threads of ``executor`` (default: the
        waited-for pool; job i on share i mod n, each share in order); the outcome of
        each job, in the jobs' order."""
        n = min(FSYNC_THREADS, len(jobs))
        loop = asyncio.get_running_loop()
        pool = executor or self._executor
        shares = await asyncio.gather(*(loop.run_in_executor(pool, _run_all, jobs[i::n]) for i in range(n)))
        out: list[OSError | None] = [None] * len(jobs)
        for i, share in enumerate(shares):
            out[i::n] = share
        return out


def _run_all(jobs: list[FlushJob]) -> list[OSError | None]:
    out: list[OSError | None] = []
    for job in jobs:
        try:
            run_flush(job)
            out.append(None)
        except OSError as exc:
            out.append(exc)
    return out
