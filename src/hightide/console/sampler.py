"""The console's background sampler: one :class:`LagMonitor` snapshot of every consumer
group and one share snapshot per interval, and a bounded in-memory history per group
(share groups too: their total share-partition lag, and a status by the consumer-group
rules, :func:`~hightide.monitoring.share_monitor.judge_share_groups`).

Pages read the latest snapshot (fast, whatever the cluster's size); the charts read the
history. The monitor is the CLI's and exporter's (same lag math, same status tracker),
kept across samples so the status window fills and interpolation has its samples.

When the cluster cannot be reached the sampler keeps the last good snapshot, records the
error and when it happened (the pages show a banner, never a stack trace), closes the
client and connects again on the next round. A sample is stored only whole: one during
which a broker did not answer (a network error anywhere in it, :attr:`Snapshot.outage`;
share groups included — a network error is never "share groups not supported") is an
outage, and so is one that outlasts ``sample_timeout_s``. The pages' banner
(:meth:`Sampler.current_error`) also shows once no whole sample came for two sampling
intervals (plus the last sample's duration), so a sample hanging on a silent broker is
seen within two intervals, before its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..client import AdminClient, KafkaError
from ..lag import StatusRules, StatusTracker
from ..monitoring.monitor import LagMonitor, Snapshot
from ..monitoring.share_monitor import ShareSnapshot, judge_share_groups, share_snapshot, share_total_lag
from .history import GroupHistory

__all__ = ["Sampler", "UNREACHABLE"]

log = logging.getLogger("hightide.console")

UNREACHABLE = (KafkaError, OSError, asyncio.TimeoutError, ValueError)
"""What a lost or unreachable cluster raises through the admin client."""


class Sampler:
    """Samples ``bootstrap`` every ``interval_s``; keeps ``history_s`` seconds of points per
    group (at most ``max_points``). ``client_options`` are passed to :class:`AdminClient`."""

    def __init__(self, bootstrap: str, *, interval_s: float = 5.0, history_s: float = 3600.0,
                 max_points: int = 720, rules: StatusRules | None = None,
                 client_options: dict[str, Any] | None = None, clock: Callable[[], float] = time.time,
                 sample_timeout_s: float | None = None, assume_reset: str | None = "earliest") -> None:
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.history_ms = int(history_s * 1000)
        self.max_points = max_points
        self.rules = rules or StatusRules(window_ms=max(1, int(interval_s * 10_000)), min_samples=5)
        self.client_options = {"request_timeout_s": 5.0, **(client_options or {})}
        self.clock = clock
        self.assume_reset = assume_reset
        """The auto.offset.reset assumed for partitions a group has not committed
        (``--assume-reset``, :attr:`LagMonitor.uncommitted_reset`)."""
        self.sample_timeout_s = sample_timeout_s if sample_timeout_s is not None else max(10.0, 2 * interval_s)
        """A sample not finished by then is abandoned (an outage)."""
        self.monitor: LagMonitor | None = None
        self.snapshot: Snapshot | None = None
        self.share: ShareSnapshot | None = None
        self.history: dict[str, GroupHistory] = {}
        self.share_history: dict[str, GroupHistory] = {}
        """Share groups' history: total share-partition lag (no time lag is measured)."""
        self.share_tracker = StatusTracker(self.rules)
        """The share groups' status windows (:func:`judge_share_groups`)."""
        self.error: str | None = None
        self.error_since_ms: int | None = None
        self.last_ok_ms: int | None = None
        self.samples = 0
        self.last_duration_s: float | None = None
        self._admin: AdminClient | None = None  # the sampler loop's client
        self._web_admin: AdminClient | None = None  # the pages' client (the web loop's)
        self._mutex = threading.Lock()  # history and error, shared with the web thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start sampling on a thread of its own with its own event loop: a snapshot of a
        large cluster runs long synchronous stretches (building 50,000 partition reports
        blocks its loop ~0.8 s), which must not stall the pages. Idempotent."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._thread_main, name="console-sampler", daemon=True)
            self._thread.start()
            self._started.wait()

    def _thread_main(self) -> None:
        loop: asyncio.AbstractEventLoop
        try:
            import uvloop
            loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
            loop = asyncio.new_event_loop()
        self._loop = loop
        self._lock = asyncio.Lock()
        self._task = loop.create_task(self._run(), name="console-sampler")
        self._started.set()
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            loop.run_until_complete(self._drop_client())
            loop.close()

    async def stop(self) -> None:
        """Stop sampling and close both clients. Idempotent."""
        if self._thread is not None and self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
            await asyncio.to_thread(self._thread.join)
        self._thread = None
        web, self._web_admin = self._web_admin, None
        if web is not None:
            await _close(web)

    async def _run(self) -> None:
        while True:
            await self._sample()
            await asyncio.sleep(self.interval_s)

    # -- the clients ----------------------------------------------------------------------------
    def _new_client(self) -> AdminClient:
        return AdminClient(self.bootstrap, **{"client_id": "hightide-console", **self.client_options})

    async def client(self) -> AdminClient:
        """The pages' connected admin client (of the calling loop), connecting if needed.
        Raises one of :data:`UNREACHABLE` when the cluster cannot be reached."""
        if self._web_admin is None:
            admin = self._new_client()
            try:
                await admin.start()
            except BaseException:
                await _close(admin)
                raise
            self._web_admin = admin
        return self._web_admin

    async def _sampler_client(self) -> AdminClient:
        if self._admin is None:
            admin = self._new_client()
            try:
                await admin.start()
            except BaseException:
                await _close(admin)
                raise
            self._admin = admin
            if self.monitor is None:
                self.monitor = LagMonitor(admin, rules=self.rules, uncommitted_reset=self.assume_reset)
            self.monitor.admin = admin
        return self._admin

    async def _drop_client(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await _close(admin)

    def failed(self, exc: BaseException | str) -> None:
        """Record that the cluster could not be reached (pages show the banner)."""
        now = int(self.clock() * 1000)
        with self._mutex:
            if self.error is None:
                self.error_since_ms = now
            if isinstance(exc, str):
                self.error = exc
            else:
                self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def current_error(self, now_ms: int | None = None) -> tuple[str, int | None] | None:
        """(error, since ms) for the pages' banner, or None while samples come: the last
        sample's error, or, when no whole sample came for two sampling intervals plus the
        last sample's duration (one is hanging on a silent broker), that."""
        with self._mutex:
            if self.error is not None:
                return self.error, self.error_since_ms
            last = self.last_ok_ms
            if last is None:
                return None
            now = int(self.clock() * 1000) if now_ms is None else now_ms
            allowed = int((2 * self.interval_s + (self.last_duration_s or 0.0)) * 1000)
            if now - last > allowed:
                return (f"no answer from the cluster: no whole sample for {(now - last) / 1000:.1f} s "
                        f"(a sample is still waiting)", last)
            return None

    # -- sampling -------------------------------------------------------------------------------
    async def sample(self) -> bool:
        """Take one snapshot now, on the sampler's loop (waits for one in progress instead
        of starting a second). Returns True when it succeeded; on failure records the error
        and keeps the last good snapshot. Without :meth:`start`, samples on the caller's loop."""
        if self._loop is None or self._thread is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            return await self._sample()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._sample(), self._loop))

    async def _sample(self) -> bool:
        assert self._lock is not None
        if self._lock.locked():
            async with self._lock:
                return self.error is None
        async with self._lock:
            try:
                async with asyncio.timeout(self.sample_timeout_s):
                    admin = await self._sampler_client()
                    assert self.monitor is not None
                    # Ask for the brokers first so that a lost cluster is an error at once.
                    await admin.metadata(topics=[])
                    snap = await self.monitor.snapshot()
                    share = await share_snapshot(admin)
                if snap.outage:  # a broker stopped answering during the sample: not stored
                    raise _Outage(snap.outage[0])
                if share is not None:
                    share = judge_share_groups(share, self.share_tracker)
            except (*UNREACHABLE, _Outage) as exc:
                first = self.error is None
                if isinstance(exc, _Outage):
                    self.failed(str(exc))
                elif isinstance(exc, TimeoutError):
                    self.failed(f"TimeoutError: no whole sample within {self.sample_timeout_s:g} s")
                else:
                    self.failed(exc)
                if first:  # once per outage, not once per round
                    log.warning("console: cannot reach %s: %s (retrying every %s s)", self.bootstrap,
                                self.error, self.interval_s)
                await self._drop_client()
                return False
            if self.error is not None:
                log.warning("console: %s reachable again", self.bootstrap)
            with self._mutex:
                self._record(snap)
                self._record_share(share, snap.time_ms)
                self.snapshot, self.share = snap, share
                self.error = self.error_since_ms = None
                self.last_ok_ms = snap.time_ms
                self.last_duration_s = snap.duration_s
                self.samples += 1
            return True

    def _record(self, snap: Snapshot) -> None:
        cutoff = snap.time_ms - self.history_ms
        for name, rep in snap.groups.items():
            best = [p.time_lag for p in rep.partitions if p.time_lag is not None and p.time_lag.ms is not None]
            top = max(best, key=lambda t: t.ms or 0) if best else None
            h = self.history.get(name)
            if h is None:
                h = self.history[name] = GroupHistory(self.max_points)
            h.add(snap.time_ms, rep.total_lag if rep.partitions else None, top.ms if top else None,
                  top.certainty.value if top else None)
            h.trim(cutoff)
        for name in [g for g in self.history if g not in snap.groups]:
            h = self.history[name]
            h.trim(cutoff)
            if not len(h):
                del self.history[name]

    def _record_share(self, share: ShareSnapshot | None, time_ms: int) -> None:
        """A point per share group: its total lag (the positive share-partition lags;
        None when none is known)."""
        cutoff = time_ms - self.history_ms
        groups = share.groups if share is not None else {}
        for name, rep in groups.items():
            h = self.share_history.get(name)
            if h is None:
                h = self.share_history[name] = GroupHistory(self.max_points)
            h.add(time_ms, share_total_lag(rep), None, None)
            h.trim(cutoff)
        for name in [g for g in self.share_history if g not in groups]:
            h = self.share_history[name]
            h.trim(cutoff)
            if not len(h):
                del self.share_history[name]

    def series(self, group: str, *, share: bool = False) -> dict[str, list[Any]]:
        """The group's history (a share group's with ``share``) as the chart's columns
        (see :meth:`GroupHistory.columns`); empty columns for a group without history."""
        with self._mutex:
            h = (self.share_history if share else self.history).get(group)
            return h.columns() if h is not None else GroupHistory(1).columns()


class _Outage(Exception):
    """A snapshot met network errors (:attr:`Snapshot.outage`): not stored."""


async def _close(admin: AdminClient) -> None:
    try:
        await admin.close()
    except Exception:  # closing a broken client: nothing left to do
        log.debug("closing the admin client failed", exc_info=True)
