"""The share-partition manager: the IO shell around :class:`~hightide.share.partition.SharePartition`
and the share session cache (``broker.share_manager``).

* A share partition is loaded lazily on first use: ``broker.share_persister.read`` (the
  share coordinator, on whichever broker leads its state); an uninitialised one starts
  where ``share.auto.offset.reset`` says (latest, earliest or by_duration) and is
  recorded with ``initialize``.
* Acquisitions read whole batches from the log (``PartitionLog.read``, the bytes are
  never decoded: only the 61-byte batch headers are parsed to learn offsets and control
  batches) and hand the core the batch ranges.
* Every acknowledgement is persisted through ``broker.share_persister.write`` before it is
  answered. Writes of one share partition are coalesced: one write is in flight at a
  time and it always carries the whole current window, so a write that completes covers
  every change made before it started (group commit). A failed write drops the cached
  partition, so the next use re-reads the persisted state (what was not persisted is
  undone, at-least-once delivery holds).
* Lock expiry runs on a timer; records that become AVAILABLE again wake long-polling
  ShareFetches through ``wake`` (``broker.waiters``).

Built from narrow things (never the broker): the session cache's size, the node id, the
partition logs, ``wake``, the share groups (a
:class:`~hightide.share.types.ShareGroupView`), the ``persister`` (the share coordinator
wherever it is) and, optionally, the local share coordinator (``state``: its synchronous
summary tells a state reset behind our back).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import parse_share_auto_offset_reset
from ..group.share_backlog_assignor import PartitionBacklog
from ..lag.share import share_lag
from ..log.partition_log import OffsetOutOfRange, PartitionLog
from ..protocol.errors import ErrorCode
from ..protocol.records import iter_headers
from ..share.partition import AckBatch, AckError, Acquired, LogBatch, SharePartition
from ..share.session import ShareSessionCache
from ..share.types import ShareGroupSettings, ShareGroupView, SharePersister, ShareStateKey
from ..aio.clock import SYSTEM_CLOCK, Clock
from .runtime import CoordinatorUnavailable

if TYPE_CHECKING:
    from ..cluster.image import MetadataImage
    from .share_state import ShareStateRuntime

log = logging.getLogger("hightide.share")

LOCK_TIMER_INTERVAL_S = 0.05
_MEMBER_CHECK_TICKS = 20  # departed members' records are released within a second
# A departed member's share session waits this long for the client's final-epoch request.
DEPARTED_SESSION_RETENTION_MS = 30_000
LEADER_EPOCH = 0
_MIN_READ = 16 * 1024


@dataclass(eq=False)
class _Entry:
    key: ShareStateKey
    topic: str
    core: SharePartition
    version: int = 0  # bumped on every state change
    persisted: int = 0  # the version the last successful write carried
    writing: bool = False
    waiters: list[tuple[int, asyncio.Future]] = field(default_factory=list)
    bytes_per_record: float = 256.0  # learnt from reads, sizes the next read


@dataclass(slots=True)
class FetchResult:
    """What one acquisition of one partition produced."""

    error_code: int = 0
    error_message: str | None = None
    records: list = field(default_factory=list)  # buffers (whole batches, as stored)
    acquired: list[Acquired] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(r) for r in self.records)


class SharePartitionManager:
    def __init__(self, *, max_sessions: int, node_id: int,
                 partition_log: Callable[[str, int], PartitionLog | None], wake: Callable[[Hashable], None],
                 groups: ShareGroupView, persister: SharePersister, state: ShareStateRuntime | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.node_id = node_id
        self.clock = clock  # acquisition locks, departed sessions, by_duration resets
        self.partition_log = partition_log
        self._wake_key = wake
        self.groups = groups
        self.persister = persister
        self.state = state
        self.sessions = ShareSessionCache(max_sessions)
        self._parts: dict[ShareStateKey, _Entry] = {}
        self._loading: dict[ShareStateKey, asyncio.Task] = {}
        self._writes: set[asyncio.Task] = set()
        self.writes = 0  # persister writes issued (bench / tests)

    # -- group side ------------------------------------------------------------------
    def settings(self, group_id: str) -> ShareGroupSettings:
        """The group's effective settings (group configs over broker defaults)."""
        return self.groups.settings(group_id)

    def is_member(self, group_id: str, member_id: str) -> bool:
        return self.groups.is_member(group_id, member_id)

    # -- long-poll wake-ups --------------------------------------------------------------
    @staticmethod
    def wait_key(key: ShareStateKey) -> tuple:
        """The ``broker.waiters`` key a ShareFetch of this share partition waits on (besides
        the partition's append key): set when records become acquirable without an append."""
        return ("share", key.group_id, key.topic_id, key.partition)

    def _wake(self, key: ShareStateKey) -> None:
        self._wake_key(self.wait_key(key))

    # -- backlog snapshots (the backlog share assignor) -------------------------------
    def backlog(self, key: ShareStateKey, topic: str) -> PartitionBacklog | None:
        """The share partition's backlog now: from the loaded partition (its lag against
        the log end offset, and the records each member has acquired), else from the
        local share coordinator's committed state (lag only; a partition not started yet
        counts the records ``share.auto.offset.reset`` will start it with); None when
        neither knows (no log here, state elsewhere or loading). Synchronous, no IO."""
        plog = self.partition_log(topic, key.partition)
        if plog is None:
            return None
        e = self._parts.get(key)
        if e is not None:
            core = e.core
            return PartitionBacklog(core.lag(plog.log_end_offset),
                                    {m: core.acquired_count(m) for m in sorted(core.holders())})
        if self.state is None:
            return None
        try:
            st = self.state.summary(key)
        except CoordinatorUnavailable:
            return None
        if st.error_code != 0:
            return None
        if st.start_offset < 0:  # not started yet: it will start where share.auto.offset.reset says
            return PartitionBacklog(max(0, plog.log_end_offset - self._reset_offset(self.settings(key.group_id), plog)))
        return PartitionBacklog(share_lag(plog.log_end_offset, st.start_offset, st.delivery_complete_count).lag)

    # -- loading ---------------------------------------------------------------------
    def cached(self, key: ShareStateKey) -> SharePartition | None:
        e = self._parts.get(key)
        return None if e is None else e.core

    def invalidate(self, key: ShareStateKey) -> None:
        """Forget the cached share partition (its persisted state changed behind our back,
        e.g. AlterShareGroupOffsets); the next use re-reads it."""
        e = self._parts.pop(key, None)
        if e is not None:
            self._wake(key)

    @property
    def _persister(self) -> SharePersister:
        """The share coordinator of a share partition wherever it is
        (``broker.share_persister``)."""
        return self.persister

    def follow_leadership(self, image: MetadataImage) -> None:
        """Cluster mode, after a metadata change: forget the share partitions of topic
        partitions this node no longer leads (or that are gone); their ShareFetches are
        refused NOT_LEADER_OR_FOLLOWER from now on and the new leader loads the state
        the share coordinator persisted. Acquisitions not persisted are lost, as when a
        Kafka leader moves (the records are delivered again)."""
        node = self.node_id
        for key in list(self._parts):
            t = image.topic_by_id(key.topic_id)
            p = t.partitions.get(key.partition) if t is not None else None
            if p is None or p.leader != node:
                self.invalidate(key)

    async def _entry(self, key: ShareStateKey, topic: str) -> tuple[_Entry | None, int, str | None]:
        e = self._parts.get(key)
        if e is not None and self._state_was_reset(key):
            self.invalidate(key)  # the group was deleted and re-created, or its offsets deleted
            e = None
        if e is not None:
            e.core.settings = self.settings(key.group_id)
            return e, 0, None
        task = self._loading.get(key)
        if task is None:  # one load per share partition, not cancelled with a requester
            task = asyncio.get_running_loop().create_task(self._load_and_store(key, topic))
            self._loading[key] = task
        return await asyncio.shield(task)

    def _state_was_reset(self, key: ShareStateKey) -> bool:
        """True when the persisted state is uninitialised although we hold the partition
        (its state was deleted, maybe initialised again, behind our back). Uses the share
        coordinator's synchronous summary when it has one (no IO)."""
        coordinator = self.state
        if coordinator is None:
            return False
        try:
            if coordinator.initialized(key):
                return False  # the usual answer, without building a summary
            st = coordinator.summary(key)
        except CoordinatorUnavailable:  # not loaded: keep what we hold
            return False
        return st.error_code == 0 and st.start_offset < 0

    async def _load_and_store(self, key: ShareStateKey, topic: str) -> tuple[_Entry | None, int, str | None]:
        try:
            res = await self._load(key, topic)
        except Exception as exc:  # answer the waiting requests, never hang them
            log.exception("loading share partition %s failed", key)
            res = (None, int(ErrorCode.unknown_server_error), str(exc))
        finally:
            self._loading.pop(key, None)
        if res[0] is not None:
            self._parts[key] = res[0]
        return res

    async def _load(self, key: ShareStateKey, topic: str) -> tuple[_Entry | None, int, str | None]:
        persister = self._persister
        plog = self.partition_log(topic, key.partition)
        if plog is None:
            return None, int(ErrorCode.unknown_topic_or_partition), None
        settings = self.settings(key.group_id)
        st = await persister.read(key, LEADER_EPOCH)
        if st.error_code == 0 and st.start_offset >= 0:
            core = SharePartition.from_state(st, settings)
        elif st.error_code in (0, ErrorCode.invalid_request):  # no state yet (uninitialised)
            start = self._reset_offset(settings, plog)
            epoch = st.state_epoch if st.error_code == 0 else 0
            code = await persister.initialize(key, epoch, start)
            if code:
                return None, int(code), "initializing the share partition state failed"
            core = SharePartition(start, settings, state_epoch=epoch)
        else:
            return None, int(st.error_code), st.error_message
        core.move_start(plog.log_start_offset)
        return _Entry(key, topic, core), 0, None

    def _reset_offset(self, settings: ShareGroupSettings, plog: PartitionLog) -> int:
        mode, duration_ms = parse_share_auto_offset_reset(settings.auto_offset_reset)
        if mode == "earliest":
            return plog.log_start_offset
        if mode == "by_duration" and duration_ms is not None:
            found = plog.offset_for_timestamp(self.clock.now_ms() - duration_ms,
                                              max_offset=plog.high_watermark)
            return plog.high_watermark if found is None else found[0]
        return plog.high_watermark

    # -- acquire -----------------------------------------------------------------------
    async def prepare(self, key: ShareStateKey, topic: str) -> tuple[int, str | None]:
        """Load the share partition if needed; (error code, message)."""
        _, code, msg = await self._entry(key, topic)
        return code, msg

    def acquire(self, key: ShareStateKey, member_id: str, max_records: int, max_bytes: int, *,
                batch_size: int = 0, strict: bool = False, now_ms: int | None = None) -> FetchResult:
        """Acquire records of a loaded share partition for ``member_id`` (synchronous: the
        log read and the state change happen without yielding)."""
        e = self._parts.get(key)
        if e is None:
            return FetchResult(int(ErrorCode.unknown_topic_or_partition), "share partition not loaded")
        plog = self.partition_log(e.topic, key.partition)
        if plog is None:
            return FetchResult(int(ErrorCode.unknown_topic_or_partition))
        now = self.clock.now_ms() if now_ms is None else now_ms
        core = e.core
        if core.move_start(plog.log_start_offset):
            e.version += 1
        if not core.can_acquire() or max_records <= 0 or max_bytes <= 0:
            return FetchResult()
        # read_committed share groups never see past the last stable offset
        hw = plog.last_stable_offset if core.settings.isolation_level == "read_committed" else plog.high_watermark
        nfo = core.next_fetch_offset
        if nfo >= hw:
            return FetchResult()
        # Read about what max_records needs (bytes per record learnt from earlier reads),
        # not max_bytes: a share fetch wants hundreds of records, not megabytes.
        want = min(max_bytes, max(_MIN_READ, int(e.bytes_per_record * min(max_records, hw - nfo) * 1.25)))
        try:
            data = plog.read(nfo, want, max_offset=hw).data
        except OffsetOutOfRange:
            return FetchResult()
        except OSError:
            return FetchResult(int(ErrorCode.kafka_storage_error))
        headers = list(iter_headers(data))
        if not headers:
            return FetchResult()
        span = headers[-1].last_offset - headers[0].base_offset + 1
        e.bytes_per_record = max(len(data) / span, 1.0)
        batches = [LogBatch(h.base_offset, h.last_offset, h.is_control) for h in headers]
        acquired = core.acquire(member_id, batches, max_records, now, batch_size=batch_size, strict=strict)
        e.version += 1
        if not acquired:
            return FetchResult()
        lo, hi = acquired[0].first_offset, acquired[-1].last_offset
        i = 0
        while headers[i].last_offset < lo:
            i += 1
        j = len(headers) - 1
        while headers[j].base_offset > hi:
            j -= 1
        view = memoryview(data)[headers[i].position:headers[j].position + headers[j].size]
        return FetchResult(records=[view], acquired=acquired)

    # -- acknowledge ---------------------------------------------------------------------
    async def acknowledge(self, key: ShareStateKey, topic: str, member_id: str,
                          batches: Iterable[AckBatch]) -> tuple[int, str | None]:
        """Apply acknowledgements and persist them; (error code, message) when durable."""
        e, code, msg = await self._entry(key, topic)
        if e is None:
            return code, msg
        try:
            e.core.acknowledge(member_id, list(batches), self.clock.now_ms())
        except AckError as exc:
            return exc.error_code, exc.message
        e.version += 1
        self._wake(key)  # records released, or room in the window for new ones
        return await self._persist(e)

    def release_member(self, group_id: str, member_id: str, keys: Iterable[ShareStateKey] | None = None) -> None:
        """Release what ``member_id`` holds (its share session closed or it left the group)
        and persist in the background."""
        for key, e in list(self._parts.items()):
            if key.group_id != group_id or (keys is not None and key not in keys):
                continue
            if e.core.release_member(member_id):
                e.version += 1
                self._persist_later(e)
                self._wake(key)

    def close_session(self, group_id: str, member_id: str) -> None:
        """A final-epoch request closed the member's share session: everything it still
        holds in the group is released (even on partitions it forgot meanwhile)."""
        self.sessions.remove(group_id, member_id)
        self.release_member(group_id, member_id)

    def member_left(self, group_id: str, member_id: str, now_ms: int | None = None) -> None:
        """The group coordinator removed ``member_id``: free its records now. Its share
        session stays (marked departed) so the client's final ShareAcknowledge/ShareFetch,
        sent after the leave heartbeat, still finds it (Kafka ends a session only on the
        final epoch or when its connection closes); :meth:`release_departed` drops it
        after ``DEPARTED_SESSION_RETENTION_MS`` if the client never closes it."""
        self.sessions.mark_departed(group_id, member_id, self.clock.now_ms() if now_ms is None else now_ms)
        self.release_member(group_id, member_id)

    # -- persistence ---------------------------------------------------------------------
    async def _persist(self, e: _Entry) -> tuple[int, str | None]:
        if e.persisted >= e.version:
            return 0, None
        fut = asyncio.get_running_loop().create_future()
        e.waiters.append((e.version, fut))
        if not e.writing:
            self._start_writer(e)
        return await fut

    def _persist_later(self, e: _Entry) -> None:
        if not e.writing and e.persisted < e.version:
            self._start_writer(e)

    def _start_writer(self, e: _Entry) -> None:
        e.writing = True
        t = asyncio.get_running_loop().create_task(self._writer(e))
        self._writes.add(t)
        t.add_done_callback(self._writes.discard)

    async def _writer(self, e: _Entry) -> None:
        persister = self._persister
        try:
            while e.persisted < e.version:
                if self._parts.get(e.key) is not e:  # invalidated: its state was replaced
                    self._finish(e, None, (int(ErrorCode.unknown_server_error), "the share partition state was reset"))
                    return
                v = e.version
                core = e.core
                self.writes += 1
                try:
                    code = await persister.write(e.key, core.state_epoch, LEADER_EPOCH, core.start_offset,
                                                 core.delivery_complete_count, core.to_state_batches())
                except Exception:
                    log.exception("writing share state of %s failed", e.key)
                    code = int(ErrorCode.unknown_server_error)
                if code:
                    log.warning("writing share state of %s failed with error %d; reloading it", e.key, code)
                    if self._parts.get(e.key) is e:
                        del self._parts[e.key]
                    self._finish(e, None, (int(code), "persisting the share partition state failed"))
                    return
                e.persisted = v
                self._finish(e, v, (0, None))
        finally:
            e.writing = False

    @staticmethod
    def _finish(e: _Entry, upto: int | None, result: tuple[int, str | None]) -> None:
        keep = []
        for v, fut in e.waiters:
            if upto is None or v <= upto:
                if not fut.done():
                    fut.set_result(result)
            else:
                keep.append((v, fut))
        e.waiters = keep

    # -- timers --------------------------------------------------------------------------
    def expire_locks(self, now_ms: int) -> int:
        """Release records whose acquisition lock ran out; returns partitions changed."""
        n = 0
        for e in list(self._parts.values()):
            d = e.core.next_lock_deadline()
            if d is not None and d <= now_ms and e.core.expire_locks(now_ms):
                e.version += 1
                n += 1
                self._persist_later(e)
                self._wake(e.key)
        return n

    def release_departed(self, now_ms: int | None = None) -> int:
        """Release records held by members the share group no longer has (fenced or
        left), as Kafka does when a member leaves, instead of waiting for their locks.
        Their share sessions are only marked departed (see :meth:`member_left`) and are
        dropped ``DEPARTED_SESSION_RETENTION_MS`` later unless closed by the client first
        or evicted to make room. Returns the members whose records were released."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        n = 0
        for key, e in list(self._parts.items()):
            for member in e.core.holders():
                if not self.is_member(key.group_id, member):
                    self.sessions.mark_departed(key.group_id, member, now)
                    self.release_member(key.group_id, member)
                    n += 1
        for s in self.sessions.sessions():
            if self.is_member(s.group_id, s.member_id):
                self.sessions.mark_present(s.group_id, s.member_id)
            else:
                self.sessions.mark_departed(s.group_id, s.member_id, now)
        self.sessions.expire_departed(now, DEPARTED_SESSION_RETENTION_MS)
        return n

    async def run_timers(self) -> None:
        ticks = 0
        while True:
            await self.clock.sleep(LOCK_TIMER_INTERVAL_S)
            ticks += 1
            try:
                self.expire_locks(self.clock.now_ms())
                if ticks % _MEMBER_CHECK_TICKS == 0:
                    self.release_departed()
            except Exception:
                log.exception("share lock expiry failed")

    async def close(self) -> None:
        """Wait (briefly) for in-flight state writes."""
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=5)

