"""The log of one partition: a directory of segments (Kafka's on-disk layout).

Synchronous and single-threaded; every file is reached through a
:class:`~.storage.Storage` engine (POSIX by default). Append and read never look inside
batches beyond their 61-byte headers; only the timestamp lookups decode one batch.
Reads live in :mod:`.log_reads`, transactions in :mod:`.txn_log`, producer-state loading
and snapshots in :mod:`.producer_snapshots` (mixins of :class:`PartitionLog`).

Files in ``<data-dir>/<topic>-<partition>/``:

* ``<20-digit base offset>.log`` / ``.index`` / ``.timeindex`` per segment;
* ``log-start-offset``: text, the log start offset, written durably by the flush that
  follows a change (:mod:`.flush`). Segments below a new log start offset are unlinked
  at once, so a power cut may keep the unlinks and lose the new value; the loader then
  takes ``max(file, first segment's base)`` as the start, which is never above the
  true one and only shows records a not-yet-durable deletion had hidden (never loses
  a record above the log start offset);
* ``recovery-point``: text, an offset up to which everything was fsynced: checkpointed
  by a flush at most once per :data:`RECOVERY_POINT_CHECKPOINT_MS` (Kafka's
  ``log.flush.offset.checkpoint.interval.ms``, 60 s) and by ``close()``, not at every
  flush (a stale one only costs recovery work after a crash; a lowered one, after a
  truncation, is written durably by the next flush);
* ``<20-digit offset>.snapshot``: producer state built from the batches below that
  offset (:mod:`.snapshots`), written at every roll (at the new segment's base offset),
  after an unclean start that replayed batches and by ``close()`` (at the LEO); the
  newest :data:`SNAPSHOTS_KEPT` are kept, none below the log start offset or above the
  LEO;
* ``producer-state.snapshot``: the single JSON snapshot of older versions, read once
  (after a clean shutdown) and deleted;
* ``cleaner-offset-checkpoint``: log compaction progress, see :mod:`.cleaner_files`
  (compaction itself lives in :mod:`.cleaner`);
* ``<20-digit base offset>.txnindex``: aborted transactions whose ABORT marker is in that
  segment (:mod:`.txn_index`; markers, the LSO and the rest of transactions live in
  :mod:`.txn_log`).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

from hightide.protocol.records import (
    RECORD_LIST_TOO_LARGE,
    BatchHeader,
    InvalidRecords,
)

from .cleaner_files import CleanerCheckpoint, truncate_cleaner_checkpoint
from .config import LogConfig
from .flush import FlushJob, run_flush
from .leader_epochs import LeaderEpochCache
from .loader import (
    LOG_START_OFFSET_FILE,
    PRODUCER_SNAPSHOT_FILE,
    RECOVERY_POINT_FILE,
    load_segments,
)
from .producer_snapshots import SNAPSHOTS_KEPT, ProducerSnapshots
from .replica_log import ReplicaLog, UnexpectedAppendOffset
from .producer_state import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    Duplicate,
    ProducerStateError,
    ProducerStateManager,
    Rejected,
)
from .results import AppendResult, FileSlice, OffsetOutOfRange, ReadResult, partition_dir
from .segment import LogSegment
from .storage import POSIX, Storage, StorageFile, remove_tree, write_small_file
from .txn_index import TxnIndex
from .txn_log import TransactionalLog

__all__ = [
    "PartitionLog",
    "LogOffline",
    "UnexpectedAppendOffset",
    "AppendResult",
    "ReadResult",
    "FileSlice",
    "OffsetOutOfRange",
    "partition_dir",
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "PRODUCER_SNAPSHOT_FILE",
    "SNAPSHOTS_KEPT",
]

log = logging.getLogger("hightide.log")

_INT32_MAX = 2**31 - 1

# Append failures that leave nothing behind and may go away by themselves (space or
# descriptors freed): the log stays writable. Any other error takes it offline.
#: The recovery-point file is written by a flush at most this often (Kafka's
#: ``log.flush.offset.checkpoint.interval.ms`` default), and at close.
RECOVERY_POINT_CHECKPOINT_MS = 60_000

TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN,
                              errno.EINTR})


class LogOffline(OSError):
    """The log no longer accepts appends (a failed fsync, or an I/O error that could not
    be cleaned up); reads keep working. Cleared only by reopening the log, i.e. by
    restarting the broker, which recovers the files from disk."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(errno.EIO, f"log offline: {reason}; restart the broker to recover it", path)


class PartitionLog(TransactionalLog, ProducerSnapshots, ReplicaLog):
    """One partition's log. Invariant: log_start_offset <= high_watermark <= log_end_offset.

    Create with :meth:`open`. Not thread-safe; never blocks on anything but file IO.
    """

    def __init__(self, storage: Storage, path: str, config: LogConfig, segments: list[LogSegment],
                 now_ms: int) -> None:
        self.storage = storage
        self.path = path
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start = segments[0].base_offset
        self._leo = segments[-1].next_offset
        self._hw = self._leo
        self._recovery_point = 0
        self.producer_state = ProducerStateManager()
        self.txn_index = TxnIndex(storage, path)
        self.unflushed_messages = 0
        self._last_flush_ms = now_ms
        #: The recovery point the file holds (None: not written by this process), and when
        #: it was written (wall ms): the file is checkpointed at most once per
        #: ``RECOVERY_POINT_CHECKPOINT_MS``.
        self._rp_on_disk: int | None = None
        self._rp_written_ms = 0
        self._dir_dirty = True  # new segment files may have been created by the load
        self._parent_dir_dirty = False  # the partition directory itself is new
        self._log_start_on_disk: int | None = None  # the value the file holds durably
        self._closed = False
        #: bumped whenever segments are removed or truncated by anything but the
        #: cleaner (retention, DeleteRecords, truncation): a clean planned before
        #: is abandoned (see :mod:`.cleaner`)
        self.generation = 0
        self.cleaning = False  # a clean of this log is in progress (never two at once)
        self.swap_pending = False  # committed cleaner swap files not installed yet
        #: the cleaner's checkpoint as last read or written (None: read it from disk)
        self.cleaner_checkpoint: CleanerCheckpoint | None = None
        self.offline_reason: str | None = None
        self._append_failing = False
        self._snapshots: list[int] = []  # offsets of the snapshot files on disk, ascending
        self._unsynced_snapshots: list[str] = []  # written without fsync; the next flush does it
        #: batch headers replayed into the producer state by the last (re)load, after the
        #: snapshot it started from (all of them without one)
        self.producer_state_replayed = 0
        #: How an append moves the high watermark. None (one replica): the HW follows the
        #: LEO. A partition with more replicas gets a callable here from the broker's replica
        #: manager; an append then leaves the HW alone and calls it (a leader advances the HW
        #: from its ISR's log end offsets, a follower takes its leader's).
        self.after_append: Callable[[], None] | None = None
        self.epochs = LeaderEpochCache()  # see :mod:`.replica_log` and :mod:`.leader_epochs`
        self._leader_epoch: int | None = None
        #: the recovery point dropped (a truncation): the next flush writes the file durably
        self._recovery_point_lowered = False
        #: opened with ``defer_recovery_flush`` and not flushed yet (see :meth:`open`)
        self.recovery_flush_pending = False
        #: Called with this log whenever it may come to need a flush: an append, a new log
        #: start offset, a truncation, a failed flush's leftovers (the flusher's periodic
        #: policy looks at such logs, not at every log; see :mod:`hightide.disk.flusher`).
        #: None: nobody listens.
        self.on_dirty: Callable[[PartitionLog], None] | None = None

    # ================================================================== opening

    @classmethod
    def open(cls, path: str, config: LogConfig, now_ms: int, *, clean_shutdown: bool,
             storage: Storage = POSIX, defer_recovery_flush: bool = False) -> PartitionLog:
        """Open (creating if needed) the partition directory ``path`` and recover it.

        After an unclean shutdown the last segment, and every segment past the recovery
        point, is scanned with CRC checks; after a clean one none is (see
        :func:`~.loader.load_segments`). Invalid tails are truncated (WARNING
        on ``hightide.log``); an invalid batch inside an older segment also deletes all
        later segments. Missing or inconsistent index files are rebuilt. Producer state
        comes from the newest usable snapshot at or below the recovered LEO plus the
        batches after it (all batch headers without one); after replaying any, a
        snapshot at the LEO is written so the next start begins there. All file access
        goes through ``storage``. ``defer_recovery_flush``: the flush of a log recovered
        after an unclean stop (below) is left to the caller, who must :meth:`flush` the
        log before anything uses it (``recovery_flush_pending``): a loader that flushes
        many at once (after one ``sync``).
        """
        loaded = load_segments(storage, path, config, clean_shutdown=clean_shutdown)
        segments, start_ckpt, recovery_point = loaded.segments, loaded.log_start_checkpoint, loaded.recovery_point
        interval = config.index_interval_bytes
        self = cls(storage, path, config, segments, now_ms)
        self._parent_dir_dirty = loaded.created
        # without the file a reload starts at the first segment's base: nothing to write
        # while the log start is that (a new log)
        self._log_start_on_disk = start_ckpt if start_ckpt is not None else segments[0].base_offset
        self._recovery_point = min(recovery_point, self._leo)
        start = max(start_ckpt or 0, segments[0].base_offset)
        if start > self._leo:
            log.warning("%s: log start offset %d is past the log end %d; emptying the log", path, start, self._leo)
            for seg in segments:
                seg.delete()
            self._delete_all_snapshots()
            self._segments = [LogSegment(storage, path, start, interval)]
            self._bases = [start]
            self._leo = self._hw = self._recovery_point = start
        self._log_start = start
        self._delete_segments_below_start()
        if self._segments[-1].size:
            self._segments[-1].first_append_ms = now_ms
        if loaded.created:  # an empty new directory: no aborted transactions, snapshots or epochs to read
            return self
        if self.txn_index.load(self._bases):
            self._dir_dirty = True
        self._load_producer_state(clean_shutdown)
        self._load_leader_epochs()
        if loaded.recovered_any and not clean_shutdown and not loaded.created:
            # After an unclean stop the recovered segments, the cut tail, and the producer
            # state snapshot taken above are made durable and the recovery point moves to
            # the log end before anything is appended. Without it a second unclean start
            # passes over that snapshot (a control batch lies between it and the old
            # recovery point) and rebuilds the producer state from the log start, losing
            # a transaction that began in a deleted segment
            # (tests/unit/test_txn_log_properties.py found it when this flush was skipped).
            # A new partition, or one after a clean stop, fsyncs nothing here: its
            # directory entries ride on its first flush (``_parent_dir_dirty``; lost in
            # a crash before, the empty log is created again when its partition opens).
            if defer_recovery_flush:
                self.recovery_flush_pending = True
            else:
                self.flush(now_ms)
        return self

    # ================================================================== properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned (LEO)."""
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        """Set by replication later; clamped to [log start offset, LEO]."""
        self._hw = max(self._log_start, min(value, self._leo))

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    # ================================================================== append

    def append(
        self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int,
        leader_epoch: int | None = None,
    ) -> AppendResult:
        """Append already validated batches (``headers`` from ``validate_batches(buf)``).

        Checks idempotent producers first, batch by batch against the state left by the
        earlier ones (raises ProducerStateError). A single re-sent batch returns the
        original offsets with ``duplicate=True`` and writes nothing; a duplicate inside a
        multi-batch append is rejected as OUT_OF_ORDER_SEQUENCE_NUMBER. Raises
        InvalidRecords(RECORD_LIST_TOO_LARGE) if the batches exceed segment.bytes. Rolls
        the active segment when full or older than segment.ms, assigns consecutive
        offsets and the leader epoch (``leader_epoch``, default :attr:`leader_epoch`; a
        new one is recorded in the epoch cache), stamps LogAppendTime if the topic uses
        it, and writes everything with one ``pwritev`` (page cache only). Advances the HW to the
        new LEO (one replica), else calls :attr:`after_append`.

        A writable memoryview ``buf`` (a Produce request's receive buffer) has those
        header fields patched in place and is written from directly, even when the
        append then fails; bytes, bytearrays and read-only views are never modified. No
        reference to ``buf`` is kept after the call (producer state, indexes and the
        epoch cache take numbers from ``headers``).

        Raises OSError when the disk refuses the write; nothing of it is then visible or
        left in the file. Full disk and out-of-descriptors errors leave the log writable
        (the next append is tried afresh); anything else, and any append after a failed
        fsync, raises :class:`LogOffline`.
        """
        if not headers:
            raise ValueError("append needs at least one batch")
        if self.offline_reason is not None:
            raise LogOffline(self.path, self.offline_reason)
        total = 0
        count = 0
        for h in headers:
            total += h.length + 12
            count += h.records_count
        cfg = self.config
        if total > cfg.segment_bytes:
            raise InvalidRecords(
                RECORD_LIST_TOO_LARGE, f"{total} bytes of batches exceed segment.bytes {cfg.segment_bytes}"
            )
        log_append_ms = now_ms if cfg.log_append_time else None
        first = self._leo
        offset = first
        txn = None
        for h in headers:
            last = offset + h.last_offset_delta
            if h.producer_id >= 0:
                if txn is None:
                    txn = self.producer_state.begin()
                r = txn.check(h)
                if type(r) is Duplicate:
                    if len(headers) == 1:
                        return AppendResult(r.first_offset, r.last_offset, r.timestamp, self._log_start, True)
                    raise ProducerStateError(
                        OUT_OF_ORDER_SEQUENCE_NUMBER, "duplicate batch inside a multi-batch append"
                    )
                if type(r) is Rejected:
                    raise ProducerStateError(r.error_code, r.message)
                txn.update(h, offset, last, h.max_timestamp if log_append_ms is None else log_append_ms)
            offset = last + 1
        self._write_batches(buf, headers, now_ms, leader_epoch, (offset, total, count))
        if txn is not None:
            txn.commit()
        return AppendResult(first, offset - 1, -1 if log_append_ms is None else log_append_ms, self._log_start)

    def _write_batches(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int,
                       leader_epoch: int | None, sums: tuple[int, int, int] | None = None, *,
                       verbatim: bool = False) -> int:
        """Write checked batches at the LEO (rolling first if due), advance LEO and HW.
        Returns the first offset written. ``sums``: (the LEO after them, their bytes,
        their records) when the caller has them already. ``verbatim``: the batches keep
        their offsets and epochs (a follower: the HW never follows the LEO, the caller
        records their epochs). Raises OSError like :meth:`append`."""
        if self.offline_reason is not None:
            raise LogOffline(self.path, self.offline_reason)
        first = self._leo
        if sums is None:
            sums = (first + sum(h.last_offset_delta + 1 for h in headers), sum(h.length + 12 for h in headers),
                    sum(h.records_count for h in headers))
        offset, total, count = sums
        cfg = self.config
        log_append_ms = now_ms if cfg.log_append_time else None
        seg = self._segments[-1]
        try:
            if seg.size > 0 and (
                seg.size + total > cfg.segment_bytes
                or (seg.first_append_ms is not None and now_ms - seg.first_append_ms > cfg.segment_ms)
                or offset - 1 - seg.base_offset > _INT32_MAX
            ):
                seg = self.roll(now_ms)
            # only a memoryview handed over is patched in place; bytes and bytearrays never change
            mv = buf if isinstance(buf, memoryview) else memoryview(buf).toreadonly()
            epoch = max(0, self.leader_epoch) if leader_epoch is None else leader_epoch
            seg.append(mv, headers, None if verbatim else first, epoch, log_append_ms)
        except OSError as exc:
            self._append_failed(exc, seg)
            raise
        if self._append_failing:
            self._append_failing = False
            log.warning("%s: appends work again", self.path)
        if seg.first_append_ms is None:
            seg.first_append_ms = now_ms
        self._leo = offset
        self.unflushed_messages += count
        if self.on_dirty is not None:
            self.on_dirty(self)
        if not verbatim and epoch >= 0 and epoch != self.epochs.latest_epoch:
            self.epochs.assign(epoch, first)
        if self.after_append is None:
            if not verbatim:
                self._hw = offset
        else:
            self.after_append()
        return first

    def _append_failed(self, exc: OSError, seg: LogSegment) -> None:
        """Log a failed append once per episode; take the log offline unless the error is
        transient and the failed write was cut off cleanly."""
        if exc.errno in TRANSIENT_ERRNOS and not seg.tail_broken:
            if not self._append_failing:
                self._append_failing = True
                log.warning("%s: append failed, nothing written, log stays writable: %s", self.path, exc)
            return
        self.go_offline(f"append failed: {exc}")

    def go_offline(self, reason: str) -> None:
        """Refuse appends from now on (reads continue); logged once at ERROR."""
        if self.offline_reason is None:
            self.offline_reason = reason
            log.error("%s: log is offline for appends (%s); restart the broker to recover it", self.path, reason)

    # ================================================================== segments

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active one is empty)."""
        active = self._segments[-1]
        if active.size == 0:
            return active
        active.on_roll()
        seg = LogSegment(self.storage, self.path, self._leo, self.config.index_interval_bytes)
        seg.truncate_to_position(0)  # a leftover file at this offset would be stale
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        self._take_snapshot(sync=False)
        return seg

    def maybe_roll_by_time(self, now_ms: int) -> bool:
        """Roll if the non-empty active segment's first append is older than segment.ms."""
        seg = self._segments[-1]
        if seg.size > 0 and seg.first_append_ms is not None and now_ms - seg.first_append_ms > self.config.segment_ms:
            self.roll(now_ms)
            return True
        return False

    def _persist_log_start(self) -> None:
        """Write the log start offset file now, durably (blocking: only truncation,
        which lowers it, needs that; raising it is left to the next flush)."""
        write_small_file(self.storage, os.path.join(self.path, LOG_START_OFFSET_FILE), f"{self._log_start}\n")
        self.storage.fsync_dir(self.path)
        self._log_start_on_disk = self._log_start

    def _delete_segments(self, n: int) -> int:
        """Delete the ``n`` oldest segments (never all); returns bytes freed."""
        self.generation += 1
        freed = 0
        for seg in self._segments[:n]:
            freed += seg.size
            seg.delete()
        del self._segments[:n]
        del self._bases[:n]
        self.txn_index.drop_below(self._bases[0])
        self._dir_dirty = True
        return freed

    def _delete_segments_below_start(self) -> int:
        if self.swap_pending:
            return 0  # the cleaner is installing some of them; it calls this when done
        n = 0
        while n + 1 < len(self._segments) and self._segments[n + 1].base_offset <= self._log_start:
            n += 1
        return self._delete_segments(n) if n else 0

    def _advance_log_start(self, new_start: int) -> None:
        """Raise the log start offset; the file follows with the next flush."""
        if new_start > self._log_start:
            self._log_start = new_start
            self._dirtied()
            self.epochs.truncate_from_start(new_start)
            for off in [o for o in self._snapshots if o < new_start]:
                self._remove_snapshot(off)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` (-1 = high watermark) the new log start offset if
        it is larger and delete segments wholly below it (never the active one); the new
        value is written durably by the next flush (see the module docstring for what a
        power cut before it can do). Raises OffsetOutOfRange for offset > HW or a negative offset other than -1.
        Returns the resulting log start offset (the partition's low watermark).
        """
        if offset == -1:
            offset = self._hw
        if offset < 0 or offset > self._hw:
            raise OffsetOutOfRange(f"cannot delete records before {offset}: high watermark is {self._hw}")
        self._advance_log_start(offset)
        self._delete_segments_below_start()
        return self._log_start

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms then retention.bytes, like Kafka's
        retention thread: oldest first, stopping at the first segment that is kept, only
        segments wholly below the HW, never an empty active segment; if every segment is
        deletable a new active segment is rolled first. The log start offset advances to
        the first remaining segment. Returns the bytes deleted.
        """
        cfg = self.config
        freed = 0
        if cfg.retention_ms >= 0:
            freed += self._delete_while(lambda s: now_ms - s.largest_timestamp() > cfg.retention_ms, now_ms)
        if cfg.retention_bytes >= 0:
            diff = self.size_bytes - cfg.retention_bytes
            if diff > 0:

                def by_size(s: LogSegment) -> bool:
                    nonlocal diff
                    if diff - s.size >= 0:
                        diff -= s.size
                        return True
                    return False

                freed += self._delete_while(by_size, now_ms)
        return freed

    def _delete_while(self, predicate: object, now_ms: int) -> int:
        if self.swap_pending:
            return 0  # retried by the next retention check
        segs = self._segments
        n = 0
        for i, seg in enumerate(segs):
            is_last = i == len(segs) - 1
            if is_last and seg.size == 0:
                break
            upper = self._leo if is_last else segs[i + 1].base_offset
            if self._hw >= upper and predicate(seg):  # type: ignore[operator]
                n += 1
            else:
                break
        if n == 0:
            return 0
        if n == len(segs):
            self.roll(now_ms)
        freed = self._delete_segments(n)
        self._advance_log_start(self._segments[0].base_offset)
        return freed

    def truncate_to(self, offset: int) -> None:
        """Remove everything at offsets >= ``offset`` (whole batches: a batch containing
        ``offset`` goes entirely). Truncating at or below the first segment empties the
        log and restarts it at ``offset``. Snapshots above the new LEO are deleted (all of
        them when the log is emptied) and producer state is reloaded from the newest
        remaining one plus the batches after it. The leader-epoch cache loses the entries
        starting at or past the new LEO, even when no batch goes (as Kafka: an epoch a
        former leader started without appending anything conflicts with the new one)."""
        if offset >= self._leo:
            self.epochs.truncate_from_end(self._leo)
            return
        if self.swap_pending:
            raise RuntimeError("truncate_to while a cleaner swap is being installed")
        self.generation += 1
        interval = self.config.index_interval_bytes
        if offset <= self._segments[0].base_offset:
            for seg in self._segments:
                seg.delete()
            self._segments = [LogSegment(self.storage, self.path, offset, interval)]
            self._segments[0].recover()
            self._bases = [offset]
            self._log_start = offset
            self._persist_log_start()
            self._delete_all_snapshots()
        else:
            while self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
                self._bases.pop()
            seg = self._segments[-1]
            h = seg.find_batch(offset)
            if h is not None:
                seg.truncate_to_position(h.position)
        self._dir_dirty = True
        self._leo = self._segments[-1].next_offset
        self._log_start = min(self._log_start, self._leo)
        self._hw = min(self._hw, self._leo)
        self._recovery_point = min(self._recovery_point, self._leo)
        self._recovery_point_lowered = True  # durable with the next flush (see _load_leader_epochs)
        self._dirtied()
        self.epochs.truncate_from_end(self._leo)
        truncate_cleaner_checkpoint(self.storage, self.path, self._leo)
        self.cleaner_checkpoint = None
        self._reload_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset``, which may be past the LEO (Kafka's
        ``truncateFullyAndStartAt``: a replica installing a metadata snapshot that ends at
        ``offset``). Every segment and producer snapshot is deleted; the new log start
        offset is durable when this returns (blocking file work: segments are unlinked)."""
        if self.swap_pending:
            raise RuntimeError("truncate_fully_and_start_at while a cleaner swap is being installed")
        self.generation += 1
        for seg in self._segments:
            seg.delete()
        self._segments = [LogSegment(self.storage, self.path, offset, self.config.index_interval_bytes)]
        self._segments[0].recover()
        self._bases = [offset]
        self._log_start = self._leo = self._hw = self._recovery_point = offset
        self._recovery_point_lowered = True
        self._dirtied()
        self.epochs.clear()
        self._persist_log_start()
        self._delete_all_snapshots()
        self._dir_dirty = True
        truncate_cleaner_checkpoint(self.storage, self.path, offset)
        self.cleaner_checkpoint = None
        self._reload_producer_state()

    def mark_dir_dirty(self) -> None:
        """Files were created, renamed or removed in the directory: fsync it next flush."""
        self._dir_dirty = True

    def retry_deferred_deletions(self) -> int:
        """Delete the segments below the log start offset whose deletion waited for a
        cleaner swap (DeleteRecords meanwhile). Returns bytes freed."""
        return self._delete_segments_below_start()

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Log cleaner hook: put ``new`` in place of ``old`` in the segment list.

        ``old`` must be a consecutive run of non-active segments and ``new`` must start at
        ``old[0]``'s base offset and hold no offset at/after the next segment's base. The
        caller handles the files (see :mod:`.cleaner_files`); offsets, the log start
        offset, HW and LEO are unchanged.
        """
        i = self._segments.index(old[0])
        j = i + len(old)
        if self._segments[i:j] != old or j >= len(self._segments):
            raise ValueError("replace_segments needs a consecutive run of non-active segments")
        if new.base_offset != old[0].base_offset or new.next_offset > self._segments[j].base_offset:
            raise ValueError("the replacement segment does not fit in place of the old ones")
        self._segments[i:j] = [new]
        self._bases[i:j] = [new.base_offset]
        self._dir_dirty = True
        if self.txn_index.entries:  # the merged segments' aborted transactions now belong to ``new``
            try:
                self.txn_index.rewrite_segment(new.base_offset, self._bases)
                for seg in old[1:]:
                    self.txn_index.unlink_segment(seg.base_offset)
            except OSError as exc:  # memory is right; the next start merges the files
                log.warning("%s: could not rewrite the aborted transaction index: %s", self.path, exc)

    # ================================================================== durability

    def _flush_due(self, now_ms: int) -> bool:
        if self.unflushed_messages <= 0 and self._recovery_point >= self._leo:
            return False
        n = self.config.flush_interval_messages
        if n is not None and self.unflushed_messages >= n:
            return True
        ms = self.config.flush_interval_ms
        return ms is not None and now_ms - self._last_flush_ms >= ms

    def _metadata_dirty(self) -> bool:
        # a changed leader-epoch checkpoint rides on the next flush: nothing below the
        # recovery point needs it before (see ReplicaLog._load_leader_epochs)
        # a new directory's entry matters once the log holds something (an empty log lost
        # in a crash is created again when its partition opens)
        return (self._log_start_on_disk != self._log_start or (self._parent_dir_dirty and self._leo > self._log_start)
                or self._recovery_point_lowered)

    def flush_pending(self) -> bool:
        """Something a flush would make durable is not yet (unflushed batches, a new log
        start offset, a lowered recovery point, a new directory's entry): the flusher's
        periodic policy keeps looking at the log until it is flushed. Never for an
        offline or closed log."""
        if self.offline_reason is not None or self._closed:
            return False
        return self.unflushed_messages > 0 or self._recovery_point < self._leo or self._metadata_dirty()

    def needs_flush(self, now_ms: int) -> bool:
        """True when flush.messages or flush.ms says unflushed data must be fsynced, or
        a new log start offset or lowered recovery point (or a new partition
        directory) is not durable yet. Never
        after a failed fsync: retrying it could report success for pages the kernel
        already dropped (Linux clears the error once reported). Never for a closed
        (deleted) log."""
        if self.offline_reason is not None or self._closed:
            return False
        return self._flush_due(now_ms) or self._metadata_dirty()

    def flush(self, now_ms: int | None = None) -> int:
        """fsync dirty segments and indexes, write the log start offset, then persist the
        recovery point (= LEO). Returns the flushed offset. Blocking; the broker uses the
        three-step form (:meth:`begin_flush`, :func:`run_flush` on a worker thread,
        :meth:`end_flush`)."""
        job = self.begin_flush(now_ms)
        try:
            run_flush(job)
        except OSError:
            self.end_flush(job, ok=False)
            raise
        self.end_flush(job, ok=True)
        self.recovery_flush_pending = False
        return self._recovery_point

    def begin_due_flush(self, now_ms: int) -> FlushJob:
        """:meth:`begin_flush` when the flush policy says so, else a job that only makes
        the log start offset and directory entries durable (no segment fsync, the
        recovery point stays)."""
        return self.begin_flush(now_ms, full=self._flush_due(now_ms))

    def begin_flush(self, now_ms: int | None = None, *, full: bool = True) -> FlushJob:
        """On the thread that owns the log: write pending index entries and capture what
        must be made durable (dup'd handles, so a segment deleted meanwhile cannot
        invalidate them) together with the LEO they cover. Appends after this call are
        not covered by the job's offset (but may be made durable by it anyway). Without
        ``full`` only the small files and directories are included."""
        files: list[StorageFile] = []
        if full:
            try:
                for seg in self._segments:
                    files.extend(seg.take_dirty_files())
            except OSError as exc:  # e.g. EMFILE from dup: nothing is fsynced this time
                for f in files:
                    f.close()
                for seg in self._segments:
                    seg.mark_dirty()
                return FlushJob(self.storage, [], (), self._leo, None, error=exc)
        snapshot_files = self._take_snapshot_files()
        small: tuple[tuple[str, str], ...] = ()
        log_start = None
        if self._log_start_on_disk != self._log_start:
            log_start = self._log_start
            small = ((os.path.join(self.path, LOG_START_OFFSET_FILE), f"{log_start}\n"),)
        small += self._replication_small_files(full)
        dirs: list[str] = []
        if self._dir_dirty or small or snapshot_files:
            dirs.append(self.path)
        if self._parent_dir_dirty:
            dirs.append(os.path.dirname(os.path.abspath(self.path)))
        self._dir_dirty = self._parent_dir_dirty = False
        if not full:
            return FlushJob(self.storage, [], tuple(dirs), self._recovery_point, None,
                            snapshot_files=snapshot_files, small_files=small, log_start=log_start)
        write_rp = (self._rp_on_disk != self._leo and self._rp_checkpoint_due(now_ms)
                    and not any(p.endswith(RECOVERY_POINT_FILE) for p, _ in small))
        self.unflushed_messages = 0
        if now_ms is not None:
            self._last_flush_ms = now_ms
        return FlushJob(self.storage, files, tuple(dirs), self._leo,
                        os.path.join(self.path, RECOVERY_POINT_FILE) if write_rp else None,
                        snapshot_files=snapshot_files, small_files=small, log_start=log_start)

    def _dirtied(self) -> None:
        if self.on_dirty is not None:
            self.on_dirty(self)

    def _rp_checkpoint_due(self, now_ms: int | None) -> bool:
        """Whether a full flush at ``now_ms`` writes the recovery-point file: never written
        yet, a blocking flush without a time (close), or ``RECOVERY_POINT_CHECKPOINT_MS``
        since the last write (or the clock went back)."""
        if self._rp_on_disk is None or now_ms is None:
            return True
        return not 0 <= now_ms - self._rp_written_ms < RECOVERY_POINT_CHECKPOINT_MS

    def end_flush(self, job: FlushJob, *, ok: bool) -> None:
        """On the owning thread, after :func:`run_flush`: advance the recovery point and
        note the log start offset as durable. A job that could not even be captured
        (``job.error``) only marks everything dirty for the next flush. A failed fsync
        takes the log offline for appends, as Kafka takes the log directory offline:
        after a failed fsync the kernel may have dropped the dirty pages and reports
        the error only once, so a later fsync "succeeding" would prove nothing, and
        nothing past the recovery point may be acknowledged as durable. A restart
        recovers the log from what is on disk."""
        if ok:
            self._recovery_point = max(self._recovery_point, min(job.offset, self._leo))
            if job.recovery_file is not None:
                self._rp_on_disk = job.offset
                self._rp_written_ms = self._last_flush_ms
            elif any(p.endswith(RECOVERY_POINT_FILE) for p, _ in job.small_files):
                self._rp_on_disk = None  # a lowered one, written durably
            if job.log_start is not None and job.small_files_ok:
                self._log_start_on_disk = job.log_start
            if not job.small_files_ok:
                self._dir_dirty = True
                self._small_files_lost(job)
                self._dirtied()
        else:
            self._small_files_lost(job)
            for seg in self._segments:
                seg.mark_dirty()
            self._dir_dirty = True
            if os.path.dirname(os.path.abspath(self.path)) in job.dir_paths:
                self._parent_dir_dirty = True
            if job.error is None:
                self.go_offline("an fsync failed")
            else:
                self._dirtied()  # nothing was captured: everything waits for the next flush

    def close(self) -> None:
        """Flush, write the producer state snapshot and close all files."""
        if self._closed:
            return
        if self.offline_reason is not None:
            # No fsync retry and no producer snapshot: the next start must not trust
            # this log (no clean-shutdown marker is written) and recovers it from disk.
            self.abandon()
            raise LogOffline(self.path, self.offline_reason)
        snapshot = self._leo not in self._snapshots
        if snapshot and self.producer_state.producers:
            self._take_snapshot(sync=False)  # fsynced by the flush: there is state to lose
            snapshot = False
        self.flush()
        if snapshot:  # an empty state is cheap to rebuild: no fsync
            self._take_snapshot(sync=False)
            self._unsynced_snapshots = []
        for seg in self._segments:
            seg.close()
        self._closed = True

    def abandon(self) -> None:
        """Close every file without flushing anything, as a killed process would."""
        for seg in self._segments:
            try:
                seg.close()
            except OSError:
                pass
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (DeleteTopics)."""
        for seg in self._segments:
            seg.close()
        self._closed = True
        self.generation += 1
        remove_tree(self.storage, self.path)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.path!r}, start={self._log_start}, hw={self._hw}, "
            f"leo={self._leo}, segments={len(self._segments)})"
        )
