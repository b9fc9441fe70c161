"""Read-after-write across brokers (seed 004): a broker answers a forwarded write, and
serves a metadata read, only at a metadata offset every unfenced broker has applied.

Theory of operation: the controller tells each broker, in every heartbeat answer, the
lowest metadata offset applied by all unfenced brokers (the LAO). With
``metadata.read.consistency=acknowledged`` a :class:`ReadGate` holds

* a **forwarded write** until the LAO and this broker's own applied offset both reach the
  offset of the write's last record (the EnvelopeResponse's MetadataOffset tag): once it
  is answered, the write is visible on every unfenced broker;
* a **metadata read** (Metadata, DescribeConfigs, DescribeCluster, DescribeAcls,
  DescribeClientQuotas, DescribeUserScramCredentials, DescribeTopicPartitions) until the
  LAO reaches the offset of the last *content* record (anything but NoOp) this broker has
  applied *and* this broker has applied the LAO, re-checked right before the handler
  runs: every read answered anywhere is at an offset every unfenced broker has applied
  and at least as new as every write answered before. A broker the LAO counts has always
  applied it; one it does not count (fenced, or its copy stopped: a restarted broker's
  stale copy, a local copy whose fsync failed) is behind it and waits, so a later read on
  any broker never goes backwards.

Each wait is bounded by ``metadata.read.max.wait.ms``: past it the request is answered
anyway and a WARNING (at most one per ``WARN_INTERVAL_S``, with the count of the others)
says which offset it waited for and what the LAO was (a paused or slow broker holds the
LAO back until the controller fences it, after ``broker.session.timeout.ms``).
``local``: no waits at all (Kafka's behaviour: the gap between brokers is visible).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable

from ..aio.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("hightide.read_gate")

WARN_INTERVAL_S = 10.0
#: Metadata reads gated by the LAO (api key → name); ListGroups/DescribeGroups are not.
GATED_READS = {3: "Metadata", 29: "DescribeAcls", 32: "DescribeConfigs", 48: "DescribeClientQuotas",
               50: "DescribeUserScramCredentials",
               60: "DescribeCluster", 75: "DescribeTopicPartitions"}


class ReadGate:
    """``lao()`` is the known lowest acknowledged offset (-1: unknown), ``applied()`` this
    broker's applied metadata offset, ``content()`` the offset of its last applied content
    record. Call :meth:`advance` whenever one of them rises. Deadlines are on ``clock``'s
    ``monotonic()`` (the waits themselves run on the loop's time)."""

    def __init__(self, consistency: str, max_wait_ms: int, *, lao: Callable[[], int], applied: Callable[[], int],
                 content: Callable[[], int], clock: Clock = SYSTEM_CLOCK) -> None:
        self.acknowledged = consistency == "acknowledged"
        self.clock = clock
        self.max_wait_ms = max_wait_ms
        self._lao = lao
        self._applied = applied
        self._content = content
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # (offset, seq, future), heap
        self._applied_waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # applied here only
        self._seq = itertools.count()
        self._last_warning = 0.0
        self._suppressed = 0
        self.timeouts = 0  # waits that ran out (for tests and metrics)

    def covered(self, offset: int) -> bool:
        """True if every unfenced broker, this one included, has applied ``offset``."""
        return self._lao() >= offset and self._applied() >= offset

    def advance(self) -> None:
        """Wake the waits whose offset is covered now."""
        _wake(self._waiters, self.covered)
        applied = self._applied()
        _wake(self._applied_waiters, lambda offset: applied >= offset)

    async def wait_applied(self, offset: int, timeout_s: float) -> bool:
        """Wait (in either mode) until this broker has applied ``offset``, at most
        ``timeout_s``; True if it has."""
        if self._applied() >= offset:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._applied_waiters, (offset, next(self._seq), fut))
        try:
            await asyncio.wait((fut,), timeout=timeout_s)  # never wait_for: it can swallow a cancel
        finally:
            if not fut.done():
                fut.cancel()
                self._applied_waiters = _live(self._applied_waiters)
        return self._applied() >= offset

    async def wait_write(self, offset: int, what: str, deadline: float | None = None) -> bool:
        """Hold a forwarded write until ``offset`` is covered (acknowledged mode), at most
        ``metadata.read.max.wait.ms`` and never past ``deadline`` (monotonic: the
        request's own); True if covered, False if answered without."""
        if not self.acknowledged or offset < 0:
            return True
        until = self.clock.monotonic() + self.max_wait_ms / 1000
        return await self._wait(offset, what, until if deadline is None else min(until, deadline))

    async def wait_read(self, what: str) -> bool:
        """Hold a metadata read until the LAO covers this broker's last applied content
        record, checked again when woken (more may have been applied meanwhile); True if
        covered when the caller proceeds (synchronously after this returns)."""
        if not self.acknowledged:
            return True
        deadline = self.clock.monotonic() + self.max_wait_ms / 1000
        while True:
            target, lao = self._content(), self._lao()
            if self.covered(target) and self._applied() >= lao:
                return True
            if not self.covered(target):
                if not await self._wait(target, what, deadline):
                    return False
            elif not await self.wait_applied(lao, deadline - self.clock.monotonic()):
                # behind what every unfenced broker applied: this broker is not counted
                # (fenced, or its copy stopped), so writes answered elsewhere may be missing here
                self._timed_out(lao, what)
                return False

    async def _wait(self, offset: int, what: str, deadline: float) -> bool:
        if self.covered(offset):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        try:
            done, _ = await asyncio.wait((fut,), timeout=max(0.0, deadline - self.clock.monotonic()))
            if done or self.covered(offset):
                return True
            self._timed_out(offset, what)
            return False
        finally:
            if not fut.done():
                fut.cancel()
                self._waiters = _live(self._waiters)

    def _timed_out(self, offset: int, what: str) -> None:
        self.timeouts += 1
        now = self.clock.monotonic()
        if now - self._last_warning < WARN_INTERVAL_S:
            self._suppressed += 1
            return
        others = f" ({self._suppressed} more since the last warning)" if self._suppressed else ""
        self._last_warning, self._suppressed = now, 0
        log.warning("answering %s after metadata.read.max.wait.ms=%d without read-after-write: it needs metadata "
                    "offset %d on every unfenced broker, but the lowest acknowledged offset is %d and this broker "
                    "applied %d (a broker is slow, paused or cut off from the controller; it is fenced after "
                    "broker.session.timeout.ms)%s", what, self.max_wait_ms, offset, self._lao(), self._applied(),
                    others)

    def wake_all(self) -> None:
        """Answer every held request now (shutting down)."""
        waiters, self._waiters = self._waiters + self._applied_waiters, []
        self._applied_waiters = []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_result(None)


_Heap = list[tuple[int, int, "asyncio.Future[None]"]]


def _wake(heap: _Heap, ready: Callable[[int], bool]) -> None:
    while heap and ready(heap[0][0]):
        _, _, fut = heapq.heappop(heap)
        if not fut.done():
            fut.set_result(None)


def _live(heap: _Heap) -> _Heap:
    out = [w for w in heap if not w[2].done()]
    heapq.heapify(out)
    return out
