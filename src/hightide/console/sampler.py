"""The console's background sampler: one :class:`LagMonitor` snapshot of every consumer
group and one share snapshot per interval, and a bounded in-memory history per group.

Pages read the latest snapshot (fast, whatever the cluster's size); the charts read the
history. The monitor is the CLI's and exporter's (same lag math, same status tracker),
kept across samples so the status window fills and interpolation has its samples.

When the cluster cannot be reached the sampler keeps the last good snapshot, records the
error and when it happened (the pages show a banner, never a stack trace), closes the
client and connects again on the next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..client import AdminClient, KafkaError
from ..lag import StatusRules
from ..monitoring.monitor import LagMonitor, Snapshot
from ..monitoring.share_monitor import ShareSnapshot, share_snapshot

__all__ = ["HistoryPoint", "Sampler", "UNREACHABLE"]

log = logging.getLogger("hightide.console")

UNREACHABLE = (KafkaError, OSError, asyncio.TimeoutError, ValueError)
"""What a lost or unreachable cluster raises through the admin client."""


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One sample of a group: total positive offset lag, and its largest best time lag
    with that value's certainty (None when unknown)."""

    time_ms: int
    total_lag: int | None
    max_time_lag_ms: int | None
    certainty: str | None


class Sampler:
    """Samples ``bootstrap`` every ``interval_s``; keeps ``history_s`` seconds of points per
    group (at most ``max_points``). ``client_options`` are passed to :class:`AdminClient`."""

    def __init__(self, bootstrap: str, *, interval_s: float = 5.0, history_s: float = 3600.0,
                 max_points: int = 720, rules: StatusRules | None = None,
                 client_options: dict[str, Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.history_ms = int(history_s * 1000)
        self.max_points = max_points
        self.rules = rules or StatusRules(window_ms=max(1, int(interval_s * 10_000)), min_samples=5)
        self.client_options = {"request_timeout_s": 5.0, **(client_options or {})}
        self.clock = clock
        self.admin: AdminClient | None = None
        self.monitor: LagMonitor | None = None
        self.snapshot: Snapshot | None = None
        self.share: ShareSnapshot | None = None
        self.history: dict[str, deque[HistoryPoint]] = {}
        self.error: str | None = None
        self.error_since_ms: int | None = None
        self.last_ok_ms: int | None = None
        self.samples = 0
        self.last_duration_s: float | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start sampling in the background (call from the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        """Stop sampling and close the client. Idempotent."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self._drop_client()

    async def _run(self) -> None:
        while True:
            await self.sample()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            except TimeoutError:
                pass

    # -- the client ------------------------------------------------------------------------------
    async def client(self) -> AdminClient:
        """The connected admin client, connecting if needed. Raises one of
        :data:`UNREACHABLE` when the cluster cannot be reached."""
        if self.admin is None:
            admin = AdminClient(self.bootstrap, **{"client_id": "hightide-console", **self.client_options})
            try:
                await admin.start()
            except BaseException:
                await admin.close()
                raise
            self.admin = admin
            if self.monitor is None:
                self.monitor = LagMonitor(admin, rules=self.rules)
            self.monitor.admin = admin
        return self.admin

    async def _drop_client(self) -> None:
        admin, self.admin = self.admin, None
        if admin is not None:
            try:
                await admin.close()
            except Exception:  # closing a broken client: nothing left to do
                log.debug("closing the admin client failed", exc_info=True)

    def failed(self, exc: BaseException) -> None:
        """Record that the cluster could not be reached (pages show the banner)."""
        now = int(self.clock() * 1000)
        if self.error is None:
            self.error_since_ms = now
        self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    # -- sampling -------------------------------------------------------------------------------
    async def sample(self) -> bool:
        """Take one snapshot now (waits for one in progress instead of starting a second).
        Returns True when it succeeded; on failure records the error and keeps the last
        good snapshot."""
        if self._lock.locked():
            async with self._lock:
                return self.error is None
        async with self._lock:
            try:
                admin = await self.client()
                assert self.monitor is not None
                # The monitor reads an unlistable cluster as "no groups": ask for the
                # brokers first so that a lost cluster is an error, not an empty page.
                await admin.metadata(topics=[])
                snap = await self.monitor.snapshot()
                share = await share_snapshot(admin)
            except UNREACHABLE as exc:
                first = self.error is None
                self.failed(exc)
                if first:  # once per outage, not once per round
                    log.warning("console: cannot reach %s: %s (retrying every %s s)", self.bootstrap,
                                self.error, self.interval_s)
                await self._drop_client()
                return False
            if self.error is not None:
                log.warning("console: %s reachable again", self.bootstrap)
            self.snapshot, self.share = snap, share
            self.error = self.error_since_ms = None
            self.last_ok_ms = snap.time_ms
            self.last_duration_s = snap.duration_s
            self.samples += 1
            self._record(snap)
            return True

    def wake(self) -> None:
        """Ask the background loop for a sample now."""
        self._wake.set()

    def _record(self, snap: Snapshot) -> None:
        cutoff = snap.time_ms - self.history_ms
        for name, rep in snap.groups.items():
            best = [p.time_lag for p in rep.partitions if p.time_lag is not None and p.time_lag.ms is not None]
            top = max(best, key=lambda t: t.ms) if best else None
            point = HistoryPoint(snap.time_ms, rep.total_lag if rep.partitions else None,
                                 top.ms if top else None, top.certainty.value if top else None)
            h = self.history.get(name)
            if h is None:
                h = self.history[name] = deque(maxlen=self.max_points)
            h.append(point)
            while h and h[0].time_ms < cutoff:
                h.popleft()
        for name in [g for g in self.history if g not in snap.groups]:
            h = self.history[name]
            while h and h[0].time_ms < cutoff:
                h.popleft()
            if not h:
                del self.history[name]

    def series(self, group: str) -> dict[str, list[Any]]:
        """The group's history as columns for the chart: ``t`` (seconds), ``lag``,
        ``time_lag_s`` (exact or estimated values) and ``time_lag_bound_s`` (lower bounds),
        null where a column has no value at that time."""
        pts = list(self.history.get(group, ()))
        return {"t": [p.time_ms / 1000 for p in pts],
                "lag": [p.total_lag for p in pts],
                "time_lag_s": [None if p.max_time_lag_ms is None or p.certainty == "lower_bound"
                               else p.max_time_lag_ms / 1000 for p in pts],
                "time_lag_bound_s": [p.max_time_lag_ms / 1000 if p.max_time_lag_ms is not None
                                     and p.certainty == "lower_bound" else None for p in pts]}
