"""Log compaction (Kafka's log cleaner) for one partition, synchronous.

:func:`clean` keeps, in every non-active segment, only the latest record of each key:

* The **clean section** lies below the cleaner checkpoint (:mod:`.cleaner_files`), the
  **dirty section** from it up to the *first uncleanable offset*: the active segment's
  base, the last stable offset, and — with ``min.compaction.lag.ms`` — the base of the
  first dirty segment whose largest timestamp is newer than ``now - lag``. Only whole
  segments below that offset are cleaned; the active segment is never touched.
* An offset map (key → last offset) is built over the dirty section only, as Kafka does:
  a key whose newest version sits in the active segment (or past the lag limit) keeps its
  older versions until a later cleaning maps that newer version.
* Every cleanable segment (clean and dirty) is rewritten keeping a record iff it has a
  key, no newer offset for its key is in the map, and it is not an expired tombstone.
  Tombstones (null values) are kept on the cleaning that first sees them; a later
  cleaning removes them once ``delete.retention.ms`` has passed since their segment was
  first cleaned (``first-cleaned ms + delete.retention.ms < now``; Kafka ≥ 3.1 keeps
  this horizon in the batch, hightide in the checkpoint, per segment).
* Control batches and transactional batches are kept byte for byte and not mapped
  (an aborted value must never shadow older ones; Kafka removes aborted records and
  old markers once safe, hightide keeps them, and read_committed readers skip aborted
  ones through the ``.txnindex``, which ``PartitionLog.replace_segments`` merges
  along with the segments). The last stable offset bounds the dirty section. Records without a key are dropped (Kafka's cleaner does the same; produce
  rejects them on compacted topics, see :func:`validate_compacted_batch`).
* Batches whose records all survive are copied byte for byte. Others are re-encoded
  with the same base offset, LastOffsetDelta, BaseTimestamp, producer id/epoch/base
  sequence, leader epoch and attributes (so the same compression codec), and the
  surviving records' bytes unchanged — their offset and timestamp deltas stay valid;
  MaxTimestamp is recomputed (CreateTime). A batch left without records is dropped,
  unless it is the last data batch of its producer id in the log: then an empty batch
  header is kept so the producer's sequence state survives a restart.
* Consecutive cleaned segments are merged while the cleaned bytes so far plus the next
  segment's size before cleaning fit in ``segment.bytes`` (Kafka sums sizes before
  cleaning only, so it merges less per pass) and they share the same first-cleaned
  time (so merging never delays a tombstone's removal).
* Crash safety: a group is written to ``<base>.log.cleaned`` (and its indexes to
  ``.index.cleaned``/``.timeindex.cleaned``), fsynced, renamed to a swap file (the
  commit point), the directory fsynced, then installed by
  :func:`.cleaner_files.complete_swap`, which ``PartitionLog.open`` also runs for a swap
  left by a crash.

Off the event loop. A cleaning is a sequence of steps alternating between the thread
that owns the log ("loop") and a worker thread ("worker"); only the loop steps touch
the :class:`PartitionLog` object, and they are short (no reads of record data, no fsync):

1. :func:`plan_clean` (loop): freeze the cleanable segments (closed segments below the
   first uncleanable offset) and the rest of the log as it is now: dup'd file handles
   and sizes, so the worker's reads stay valid whatever the loop does meanwhile. Marks
   the log ``cleaning``: never two cleanings of one log at once.
2. :func:`build_clean` (worker): build the offset map, write the cleaned groups and
   their index files, fsync them.
3. :func:`commit_clean` (loop): if the frozen segments are still exactly the log's
   (same segment objects at the same place, same sizes, no retention, DeleteRecords,
   truncation or deletion since the plan: ``PartitionLog.generation``), rename each
   changed group to its swap file (the commit) and mark the log ``swap_pending``, which
   defers segment deletion by retention and DeleteRecords; otherwise abandon the
   cleaning (:func:`discard_clean` on the worker).
4. :func:`sync_swaps` (worker): fsync the directory, so the commit is durable before
   any old segment is unlinked.
5. :func:`install_clean` (loop): rename the old segments' files to ``.deleted``, the
   swap files and indexes into place (renames only), open the new segments (from their
   prebuilt indexes) and put them in the segment list.
6. :func:`finish_clean` (worker): unlink the ``.deleted`` files, write the cleaner
   checkpoint and fsync the directory.
7. :func:`end_clean` (loop, always): release the frozen handles, clear ``cleaning``.

:func:`clean` runs all steps in sequence on the calling thread.

Offsets, the log start offset, HW and LEO never change. Fetch slices (``FileSlice``)
of a rewritten segment become invalid, like after retention.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from hightide.protocol.records import LOG_OVERHEAD, BatchHeader

from .cleaner_files import (
    CleanerCheckpoint,
    SegmentCleanInfo,
    cleaned_path,
    read_cleaner_checkpoint,
    swap_path,
    write_cleaner_checkpoint,
)
from .cleaner_records import filter_batch, parse_records, validate_compacted_batch
from .index import IndexCorrupt
from .partition_log import PartitionLog
from .segment import LogSegment, SegmentCorrupt, iter_file_headers, segment_name
from .storage import StorageFile

__all__ = [
    "DEFAULT_DELETE_RETENTION_MS",
    "CleanPlan",
    "CleanResult",
    "build_clean",
    "clean",
    "commit_clean",
    "discard_clean",
    "end_clean",
    "finish_clean",
    "install_clean",
    "plan_clean",
    "sync_swaps",
    "validate_compacted_batch",
]

log = logging.getLogger("hightide.log")

DEFAULT_DELETE_RETENTION_MS = 86_400_000
_INT32_MAX = 2**31 - 1
_OFF_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")  # at byte 23 of a batch
_MAX_TS = struct.Struct(">q")  # at byte 35 of a batch


class CleanResult(NamedTuple):
    """Outcome of a cleaning.

    ``bytes_before``/``bytes_after``: size of the cleanable segments before and after
    (0/0 when nothing was cleaned). ``records_removed``: records dropped.
    ``dirty_ratio``: dirty bytes / (clean + dirty bytes) of the cleanable segments when
    called. ``cleaned_up_to``: the cleaner checkpoint afterwards (first offset not yet
    cleaned). ``cleaned``: whether a cleaning ran (False too when it was abandoned
    because the log changed under it).
    """

    bytes_before: int
    bytes_after: int
    records_removed: int
    dirty_ratio: float
    cleaned_up_to: int
    cleaned: bool = True


def _crash_hook(stage: str) -> None:
    """Called at ``"cleaned"`` (``.cleaned`` file written) and ``"swap"`` (committed,
    not yet installed). Tests replace it to simulate a crash; a no-op otherwise."""


@dataclass
class _Frozen:
    """A segment as the plan saw it: the worker reads ``size`` bytes through ``file``."""

    seg: LogSegment
    base_offset: int
    size: int
    file: StorageFile
    mtime_ns: int = 0


@dataclass
class _Group:
    """Consecutive cleaned segments written as one new segment for [base, end)."""

    members: list[_Frozen]
    base: int
    end: int
    changed: bool


@dataclass
class CleanPlan:
    """What one cleaning works on; built by :func:`plan_clean`, see the module docstring."""

    plog: PartitionLog
    generation: int
    cleanable: list[_Frozen]
    rest: list[_Frozen]  # the segments after them, the active one as far as written
    ends: list[int]
    dirty: list[bool]
    times: list[int]
    drops: list[bool]
    first_dirty: int
    up_to: int
    total: int
    ratio: float
    groups: list[_Group] = field(default_factory=list)
    produced: dict[int, SegmentCleanInfo] = field(default_factory=dict)
    removed: int = 0
    committed: bool = False
    trash: list[str] = field(default_factory=list)  # replaced files renamed to .deleted

    @property
    def path(self) -> str:
        return self.plog.path

    def release(self) -> None:
        """Close the frozen handles (idempotent)."""
        for fz in self.cleanable + self.rest:
            fz.file.close()


# ------------------------------------------------------------------ 1. plan (loop)


def _freeze(seg: LogSegment) -> _Frozen:
    return _Frozen(seg, seg.base_offset, seg.size, seg._f.dup())


def plan_clean(
    plog: PartitionLog,
    now_ms: int,
    *,
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
    min_compaction_lag_ms: int = 0,
    min_cleanable_ratio: float = 0.5,
    force: bool = False,
) -> CleanPlan | CleanResult:
    """Decide whether ``plog`` (a compacted topic's log) is worth cleaning and freeze what
    to clean. Returns a plan (the log is then marked ``cleaning`` until
    :func:`end_clean`) or a CleanResult with ``cleaned=False`` when there is nothing to
    do (or a cleaning of the log is already running).

    Cleans when ``force``, when the dirty ratio is >= ``min_cleanable_ratio`` with some
    dirty bytes, or when a clean segment holds tombstones whose delete retention has
    passed. ``now_ms`` is the cleaner's clock (tombstone horizons and the compaction
    lag are measured on it; the lag is compared with segments' largest timestamps).
    Raises OSError when the handles cannot be dup'd (nothing is then held).
    """
    if plog.cleaning or plog.swap_pending or plog.closed:
        return CleanResult(0, 0, 0, 0.0, 0, False)
    segs = list(plog.segments)
    active = segs[-1]
    ckpt = plog.cleaner_checkpoint
    if ckpt is None:
        ckpt = plog.cleaner_checkpoint = read_cleaner_checkpoint(plog.storage, plog.path)
    first_dirty = ckpt.dirty_offset
    if not plog.log_start_offset <= first_dirty <= plog.log_end_offset:
        first_dirty = plog.log_start_offset
    limit = min(active.base_offset, plog.last_stable_offset)
    n = 0  # segments[:n] are cleanable: each wholly below ``limit``
    while n + 1 < len(segs) and segs[n + 1].base_offset <= limit:
        if (
            min_compaction_lag_ms > 0
            and segs[n + 1].base_offset > first_dirty  # Kafka applies the lag to dirty segments
            and segs[n].largest_timestamp() > now_ms - min_compaction_lag_ms
        ):
            break
        n += 1
    cleanable = segs[:n]
    ends = [s.base_offset for s in segs[1 : n + 1]]
    dirty = [end > first_dirty for end in ends]
    dirty_bytes = sum(s.size for s, d in zip(cleanable, dirty) if d)
    total = sum(s.size for s in cleanable)
    ratio = dirty_bytes / total if total else 0.0
    up_to = max(first_dirty, ends[-1]) if cleanable else first_dirty
    times: list[int] = []  # first-cleaned time of each segment after this cleaning
    drops: list[bool] = []  # its tombstones' delete retention has passed
    due = False  # some clean segment holds tombstones that can go
    for s, d in zip(cleanable, dirty):
        info = None if d else ckpt.segments.get(s.base_offset)
        times.append(now_ms if info is None else info.cleaned_ms)
        expired = info is not None and info.cleaned_ms + delete_retention_ms < now_ms
        drops.append(expired)
        due = due or (expired and info is not None and info.tombstones)
    if not cleanable or not (force or (dirty_bytes and ratio >= min_cleanable_ratio) or due):
        return CleanResult(0, 0, 0, ratio, first_dirty, False)
    frozen: list[_Frozen] = []
    try:
        for s in segs:
            frozen.append(_freeze(s))
    except OSError:
        for fz in frozen:
            fz.file.close()
        raise
    plog.cleaning = True
    return CleanPlan(plog, plog.generation, frozen[:n], frozen[n:], ends, dirty, times, drops, first_dirty,
                     up_to, total, ratio)


# ------------------------------------------------------------------ 2. build (worker)


def _read_batches(fz: _Frozen) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, batch bytes) for every batch of the frozen segment."""
    f = fz.file
    for h in iter_file_headers(f, 0, fz.size):
        yield h, f.pread(h.size, h.position)


def _build_offset_map(segments: list[_Frozen], first_dirty: int) -> dict[bytes, int]:
    """key → last offset over the records at/after ``first_dirty`` in ``segments``
    (keyed records of non-control, non-transactional batches)."""
    offset_map: dict[bytes, int] = {}
    for seg in segments:
        for h, raw in _read_batches(seg):
            if h.last_offset < first_dirty or h.is_control or h.is_transactional or h.records_count == 0:
                continue
            for r in parse_records(h, raw)[1]:
                if r.key is not None and r.offset >= first_dirty:
                    offset_map[r.key] = r.offset
    return offset_map


def _producer_last_batches(segments: list[_Frozen]) -> dict[int, int]:
    """producer id → last offset of its last data (non-control) batch in the log."""
    out: dict[int, int] = {}
    for seg in segments:
        for h in iter_file_headers(seg.file, 0, seg.size):
            if h.producer_id >= 0 and not h.is_control:
                out[h.producer_id] = h.last_offset
    return out


def _index_paths(path: str, base: int) -> tuple[str, str]:
    stem = os.path.join(path, segment_name(base))
    return stem + ".index.cleaned", stem + ".timeindex.cleaned"


class _GroupWriter:
    """Writes consecutive cleaned segments into one ``.cleaned`` file plus its index files.

    A segment may join the open group when it has the same first-cleaned time and the
    bytes written so far plus its size *before* cleaning fit in ``segment.bytes`` (so
    the result fits whatever survives), with relative offsets within int32. Index
    entries are placed exactly as :meth:`LogSegment.recover` would place them.
    """

    def __init__(self, plan: CleanPlan, offset_map: Mapping[bytes, int], producer_last: Mapping[int, int]) -> None:
        self.plan = plan
        self.storage = plan.plog.storage
        self.segment_bytes = plan.plog.config.segment_bytes
        self.interval = plan.plog.config.index_interval_bytes
        self.offset_map = offset_map
        self.producer_last = producer_last
        self.members: list[_Frozen] = []
        self.file: StorageFile | None = None
        self._open_group(0)

    def _open_group(self, cleaned_ms: int) -> None:
        self.cleaned_ms, self.size, self.changed, self.tombstones = cleaned_ms, 0, False, False
        self.since, self.max_ts, self.max_off = 0, -1, -1
        self.off_entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []

    def fits(self, seg: _Frozen, end: int, cleaned_ms: int) -> bool:
        return (
            cleaned_ms == self.cleaned_ms
            and self.size + seg.size <= self.segment_bytes
            and end - 1 - self.members[0].base_offset <= _INT32_MAX
        )

    def add(self, seg: _Frozen, end: int, cleaned_ms: int, drop_tombstones: bool) -> None:
        """Clean ``seg`` (covering offsets up to ``end``) into the open group or a new one."""
        if self.members and not self.fits(seg, end, cleaned_ms):
            self.finish(seg.base_offset)
        if not self.members:
            self.file = self.storage.open(cleaned_path(self.plan.path, seg.base_offset), truncate=True)
            self._open_group(cleaned_ms)
        else:
            self.changed = True  # merging
        self.members.append(seg)
        seg.mtime_ns = seg.file.mtime_ns()
        pending: list[bytes] = []
        pending_size = 0
        for h, raw in _read_batches(seg):
            f = filter_batch(h, raw, self.offset_map, drop_tombstones, self.producer_last)
            self.plan.removed += f.removed
            self.changed = self.changed or f.changed
            self.tombstones = self.tombstones or f.tombstones
            if f.data is not None:
                self._index(h.base_offset, f.data, self.size + pending_size)
                pending.append(f.data)
                pending_size += len(f.data)
                if pending_size >= 1 << 20:
                    self._write(pending)
                    pending, pending_size = [], 0
        self._write(pending)

    def _index(self, base_offset: int, data: bytes, position: int) -> None:
        last = base_offset + _LAST_DELTA.unpack_from(data, 23)[0]
        max_ts = _MAX_TS.unpack_from(data, 35)[0]
        if max_ts > self.max_ts:
            self.max_ts, self.max_off = max_ts, last
        if self.since > self.interval:
            self.off_entries.append((last, position))
            if not self.time_entries or self.max_ts > self.time_entries[-1][0]:
                self.time_entries.append((self.max_ts, self.max_off))
            self.since = 0
        self.since += len(data)

    def _write(self, pieces: list[bytes]) -> None:
        if pieces:
            assert self.file is not None
            data = b"".join(pieces)
            self.file.pwrite(data, self.size)
            self.size += len(data)

    def finish(self, end: int) -> None:
        """Close the open group as the segment for [its base, ``end``) (no-op if none):
        fsync it and write its index files. A single segment that lost nothing is
        dropped again (left alone)."""
        if not self.members:
            return
        members, base = self.members, self.members[0].base_offset
        self.members = []
        file, self.file = self.file, None
        assert file is not None
        path = cleaned_path(self.plan.path, base)
        try:
            if self.changed:
                file.fsync()
        finally:
            file.close()
        self.plan.produced[base] = SegmentCleanInfo(self.cleaned_ms, self.tombstones)
        if not self.changed:
            self.storage.unlink(path)
            return
        self.plan.groups.append(_Group(members, base, end, True))  # before any error: discarded with the plan
        # Like Kafka, keep the last-modified time of the group's last segment: retention
        # by time falls back to it for segments without timestamps.
        self.storage.set_mtime_ns(path, members[-1].mtime_ns)
        if self.max_ts >= 0 and (not self.time_entries or self.max_ts > self.time_entries[-1][0]):
            self.time_entries.append((self.max_ts, self.max_off))  # what on_roll() adds
        off_path, time_path = _index_paths(self.plan.path, base)
        for p, data in (
            (off_path, b"".join(_OFF_ENTRY.pack(o - base, pos) for o, pos in self.off_entries)),
            (time_path, b"".join(_TIME_ENTRY.pack(t, o - base) for t, o in self.time_entries)),
        ):
            f = self.storage.open(p, truncate=True)
            try:
                if data:
                    f.pwrite(data, 0)
                f.fsync()
            finally:
                f.close()

    def abort(self) -> None:
        """After an error: close and drop the open group's ``.cleaned`` file."""
        if self.members:
            base = self.members[0].base_offset
            self.members = []
            if self.file is not None:
                self.file.close()
                self.file = None
            try:
                self.storage.unlink(cleaned_path(self.plan.path, base))
            except OSError:
                pass


def build_clean(plan: CleanPlan) -> None:
    """Worker step: read the frozen segments, write every cleaned group (log and index
    files) and fsync them. Touches no state of the log object. Raises OSError (or
    InvalidRecords for undecodable batches); the files written are then removed by
    :func:`discard_clean`."""
    dirty_segs = [s for s, d in zip(plan.cleanable, plan.dirty) if d]
    offset_map = _build_offset_map(dirty_segs, plan.first_dirty)
    producer_last = _producer_last_batches(plan.cleanable + plan.rest)
    writer = _GroupWriter(plan, offset_map, producer_last)
    try:
        for k, seg in enumerate(plan.cleanable):
            writer.add(seg, plan.ends[k], plan.times[k], plan.drops[k])
        writer.finish(plan.ends[-1])
    except BaseException:
        writer.abort()
        raise


def discard_clean(plan: CleanPlan) -> None:
    """Worker step after an abandoned or failed cleaning: remove its ``.cleaned`` files
    (missing ones are fine). Never call it after :func:`commit_clean` returned True."""
    storage = plan.plog.storage
    for g in plan.groups:
        for p in (cleaned_path(plan.path, g.base), *_index_paths(plan.path, g.base)):
            try:
                storage.unlink(p)
            except OSError:
                pass


# ------------------------------------------------------------------ 3-5. swap (loop, worker, loop)


def _still_current(plan: CleanPlan) -> bool:
    """Whether the frozen cleanable segments are still the log's, unchanged."""
    plog = plan.plog
    if plog.closed or plog.generation != plan.generation or not plan.cleanable:
        return False
    segs = plog.segments
    try:
        i = segs.index(plan.cleanable[0].seg)
    except ValueError:
        return False
    k = len(plan.cleanable)
    if i + k >= len(segs):
        return False
    return all(segs[i + n] is fz.seg and fz.seg.size == fz.size for n, fz in enumerate(plan.cleanable))


def commit_clean(plan: CleanPlan) -> bool:
    """Loop step: if the log still holds the frozen segments, rename every cleaned group
    to its swap file (the commit) and mark the log ``swap_pending``; returns True. If
    the log changed, commits nothing and returns False (then :func:`discard_clean`).
    A rename failure undoes the renames done so far and raises OSError."""
    if not _still_current(plan):
        return False
    storage, path = plan.plog.storage, plan.path
    done: list[_Group] = []
    try:
        for g in plan.groups:
            _crash_hook("cleaned")
            storage.replace(cleaned_path(path, g.base), swap_path(path, g.base, g.end))
            done.append(g)
            plan.plog.swap_pending = True
            _crash_hook("swap")
    except OSError:
        for g in done:
            try:
                storage.replace(swap_path(path, g.base, g.end), cleaned_path(path, g.base))
            except OSError:
                log.exception("%s: could not undo the cleaner's swap of [%d, %d)", path, g.base, g.end)
        plan.plog.swap_pending = False
        raise
    plan.committed = True
    return True


def sync_swaps(plan: CleanPlan) -> None:
    """Worker step: fsync the directory, making the swap renames durable before any old
    segment is unlinked."""
    if plan.groups:
        plan.plog.storage.fsync_dir(plan.path)


def _install_group(plan: CleanPlan, g: _Group) -> None:
    plog = plan.plog
    storage, path = plog.storage, plog.path
    olds = [m.seg for m in g.members]
    for seg in olds:
        seg.close()
    # Renames only (cheap): the old files become ``.deleted`` (unlinked by finish_clean
    # on the worker, or by the loader after a crash), index files first, then the swap
    # file takes the first one's name. Any prefix of these renames that a crash keeps
    # is completed by the loader, which finishes the committed swap.
    for seg in olds:
        for p in (seg.offset_index.path, seg.time_index.path, seg.log_path):
            try:
                storage.replace(p, p + ".deleted")
                plan.trash.append(p + ".deleted")
            except FileNotFoundError:
                pass
    storage.replace(swap_path(path, g.base, g.end), os.path.join(path, segment_name(g.base) + ".log"))
    stem = os.path.join(path, segment_name(g.base))
    off_path, time_path = _index_paths(path, g.base)
    for src, dst in ((off_path, stem + ".index"), (time_path, stem + ".timeindex")):
        try:
            storage.replace(src, dst)
        except FileNotFoundError:
            pass  # rebuilt by recover() below
    new = LogSegment(storage, path, g.base, plog.config.index_interval_bytes)
    try:
        new.load()
    except (IndexCorrupt, SegmentCorrupt) as e:
        log.warning("%s: rebuilding the indexes of a cleaned segment: %s", path, e)
        new.recover()
        new.on_roll()
    plog.replace_segments(olds, new)


def install_clean(plan: CleanPlan) -> CleanResult:
    """Loop step after :func:`sync_swaps`: put every committed group in place of its
    old segments (files and segment list), then run the segment deletions deferred
    meanwhile. Returns the result; the checkpoint is written by :func:`finish_clean`."""
    plog = plan.plog
    try:
        for g in plan.groups:
            _install_group(plan, g)
    finally:
        plog.swap_pending = False
    plog.mark_dir_dirty()
    plog.cleaner_checkpoint = CleanerCheckpoint(plan.up_to, dict(plan.produced))
    plog.retry_deferred_deletions()
    after = sum(s.size for s in plog.segments if s.base_offset < plan.up_to)
    log.info(
        "%s: cleaned offsets below %d: %d -> %d bytes, %d records removed (dirty ratio %.2f)",
        plog.path, plan.up_to, plan.total, after, plan.removed, plan.ratio,
    )
    return CleanResult(plan.total, after, plan.removed, plan.ratio, plan.up_to, True)


# ------------------------------------------------------------------ 6-7. checkpoint, end


def finish_clean(plan: CleanPlan) -> None:
    """Worker step: unlink the replaced segments' files, write the cleaner checkpoint
    (fsynced) and fsync the directory (the installed files' names, the unlinks and the
    checkpoint's rename)."""
    for p in plan.trash:
        try:
            plan.plog.storage.unlink(p)
        except FileNotFoundError:
            pass
    write_cleaner_checkpoint(plan.plog.storage, plan.path, CleanerCheckpoint(plan.up_to, dict(plan.produced)))
    plan.plog.storage.fsync_dir(plan.path)


def end_clean(plan: CleanPlan) -> None:
    """Loop step, always last: release the frozen handles and allow the next cleaning."""
    plan.release()
    plan.plog.cleaning = False


# ------------------------------------------------------------------ synchronous entry point


def clean(
    plog: PartitionLog,
    now_ms: int,
    *,
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
    min_compaction_lag_ms: int = 0,
    min_cleanable_ratio: float = 0.5,
    force: bool = False,
) -> CleanResult:
    """Compact ``plog`` if worth it, every step on the calling thread (see
    :func:`plan_clean` for the arguments and the module docstring for the steps).
    Blocking; call it from the thread that owns the log. On an exception the log stays
    consistent (groups committed are completed at the next start, the checkpoint is
    not advanced)."""
    plan = plan_clean(plog, now_ms, delete_retention_ms=delete_retention_ms,
                      min_compaction_lag_ms=min_compaction_lag_ms, min_cleanable_ratio=min_cleanable_ratio,
                      force=force)
    if isinstance(plan, CleanResult):
        return plan
    try:
        try:
            build_clean(plan)
        except BaseException:
            discard_clean(plan)
            raise
        if not commit_clean(plan):
            discard_clean(plan)
            return CleanResult(0, 0, 0, plan.ratio, plan.first_dirty, False)
        sync_swaps(plan)
        result = install_clean(plan)
        finish_clean(plan)
        return result
    finally:
        end_clean(plan)
