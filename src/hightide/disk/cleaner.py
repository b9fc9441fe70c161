"""The log cleaner thread: compacts the logs of compacted topics off the event loop.

Each cleaning runs the steps of :mod:`hightide.log.cleaner`: the short ones (plan,
commit, install, end) on the event loop, where the log is owned, the disk work (reading
and rewriting segments, every fsync) on one dedicated worker thread. So the loop keeps
serving while a large ``__consumer_offsets`` partition is rewritten (the thread runs at a
lower CPU priority than the loop: :mod:`hightide.aio.threads`), and appends,
retention and deletion may run meanwhile: a cleaning whose segments changed under it is
abandoned at the commit step. One worker thread, and one cleaning at a time per log
(``PartitionLog.cleaning``).

Built from ``logs``: a callable returning the open partition logs as ``(topic-partition,
log)`` pairs (the broker's :class:`~hightide.log.manager.LogManager`), or None while
there are none; each pass looks at the compacted ones; ``clock`` (:mod:`hightide.aio.clock`)
for the pass interval and the cleaning's time; ``ready`` (a callable: whether the node
acts on its metadata image yet; :meth:`LogCleaner.run` cleans nothing before).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, TypeVar

from ..log import cleaner as C
from ..log.partition_log import PartitionLog
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.threads import background_executor
from .flusher import OpenLogs

log = logging.getLogger("hightide.broker")
T = TypeVar("T")

READY_POLL_S = 0.1  # how often run() looks whether the node is ready


class LogCleaner:
    """Runs cleanings of the ``logs`` (except those of ``skip_topics``); :meth:`close`
    waits for the worker."""

    def __init__(self, logs: OpenLogs, skip_topics: tuple[str, ...] = (), *, clock: Clock = SYSTEM_CLOCK,
                 ready: Callable[[], bool] = lambda: True) -> None:
        self._logs = logs
        self._ready = ready
        self.clock = clock
        self.skip_topics = skip_topics
        self._executor = background_executor(1, "hightide-cleaner")  # below the loop's priority
        self.cleanings = 0  # cleanings completed (tests and metrics)
        self.abandoned = 0  # cleanings abandoned because the log changed under them

    async def _off_loop(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def run(self, interval_s: Callable[[], float]) -> None:
        """Forever: wait ``interval_s()`` (read once, when ready), clean what is due.
        Nothing before ``ready()`` (a broker-only node's topic configs, and its dynamic
        ``log.cleaner.backoff.ms``, may be stale until it caught up with the controller):
        until then it looks every ``READY_POLL_S``."""
        while not self._ready():
            await self.clock.sleep(READY_POLL_S)
        interval = interval_s()
        while True:
            await self.clock.sleep(interval)
            await self.run_once()

    async def run_once(self) -> int:
        """One pass over the open logs; returns how many were cleaned. Errors of one
        log are logged and do not stop the others."""
        logs = self._logs()
        if logs is None:
            return 0
        cleaned = 0
        for tp, plog in logs:
            if not plog.config.compact or tp[0] in self.skip_topics or plog.closed:
                continue
            try:
                result = await self.clean(plog)
            except Exception:
                log.exception("log cleaner failed for %s-%d", *tp)
                continue
            if result.cleaned:
                cleaned += 1
                log.info("cleaned %s-%d: %d -> %d bytes, %d records removed", *tp, result.bytes_before,
                         result.bytes_after, result.records_removed)
        return cleaned

    async def clean(self, plog: PartitionLog, *, force: bool = False) -> C.CleanResult:
        """Clean one log (see the module docstring). Raises what a step raises; the log
        stays consistent (a commit whose directory fsync failed is completed at the next
        start, with segment deletion deferred until then)."""
        cfg = plog.config
        plan = C.plan_clean(plog, self.clock.now_ms(), delete_retention_ms=cfg.delete_retention_ms,
                            min_compaction_lag_ms=cfg.min_compaction_lag_ms,
                            min_cleanable_ratio=cfg.min_cleanable_ratio, force=force)
        if isinstance(plan, C.CleanResult):
            return plan
        try:
            try:
                await self._off_loop(C.build_clean, plan)
            except BaseException:
                await asyncio.shield(self._off_loop(C.discard_clean, plan))
                raise
            if not C.commit_clean(plan):
                self.abandoned += 1
                log.info("%s: the log changed while it was being cleaned; cleaning abandoned", plog.path)
                await asyncio.shield(self._off_loop(C.discard_clean, plan))
                return C.CleanResult(0, 0, 0, plan.ratio, plan.first_dirty, False)
            await asyncio.shield(self._off_loop(C.sync_swaps, plan))
            result = C.install_clean(plan)
            await asyncio.shield(self._off_loop(C.finish_clean, plan))
            self.cleanings += 1
            return result
        finally:
            plog.cleaning = False
            self._release(plan)

    def _release(self, plan: C.CleanPlan) -> None:
        """Close the plan's frozen handles on the worker, after any step still running
        there (a cancelled cleaning's build may still be reading them)."""
        try:
            self._executor.submit(plan.release)
        except RuntimeError:  # the executor is shut down: nothing runs there any more
            plan.release()

    def close(self) -> None:
        """Wait for a worker step in progress and stop the thread."""
        self._executor.shutdown(wait=True)
