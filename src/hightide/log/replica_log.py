"""Replication on a partition log: leader epochs, follower appends and follower truncation.

A mixin of :class:`~.partition_log.PartitionLog`, kept apart to keep that module small.
It owns ``epochs`` (the :class:`~.leader_epochs.LeaderEpochCache`, see that module for
the rules and the ``leader-epoch-checkpoint`` file) and ``_leader_epoch``.

* A leader stamps its batches with :attr:`leader_epoch` (set by :meth:`become_leader`,
  Kafka's ``maybeAssignEpochStartOffset(leaderEpoch, logEndOffset)`` in
  ``Partition.makeLeader``); every append records a new epoch's start offset.
* A follower appends the leader's batches as they are (:meth:`append_as_follower`: same
  offsets, same epochs, same bytes), takes the leader's high watermark (the
  ``high_watermark`` setter, capped at its LEO) and log start offset
  (:meth:`maybe_increment_log_start`), and truncates where the leader says its log
  diverged (``truncate_to``) or restarts past the leader's log start
  (``truncate_fully_and_start_at``); both keep the epoch cache consistent.
* At start-up :meth:`_load_leader_epochs` reconciles the checkpoint file with the batches.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

from hightide.protocol.records import InvalidRecords, BatchHeader

from .config import LogConfig
from .flush import FlushJob
from .leader_epochs import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
    read_checkpoint,
)
from .loader import RECOVERY_POINT_FILE
from .log_reads import LogReads
from .producer_state import ProducerStateManager
from .results import AppendResult, OffsetOutOfRange
from .segment import LogSegment
from .storage import Storage
from .transactions import CompletedTxn, parse_marker

__all__ = ["ReplicaLog", "UnexpectedAppendOffset"]

log = logging.getLogger("hightide.log")


class UnexpectedAppendOffset(ValueError):
    """A follower append does not continue the log: its first batch starts before the log
    end offset (an overlap), offsets inside it go backwards, or it leaves a gap in a log
    that is not compacted (only compaction removes offsets). Nothing was written."""


class ReplicaLog(LogReads):
    """Leader epochs and follower operations of a partition log (see the module docstring)."""

    storage: Storage
    path: str
    config: LogConfig
    producer_state: ProducerStateManager
    epochs: LeaderEpochCache
    offline_reason: str | None
    generation: int
    _leader_epoch: int | None
    _segments: list[LogSegment]
    _leo: int
    _hw: int
    _log_start: int
    _recovery_point: int
    _recovery_point_lowered: bool
    after_append: Callable[[], None] | None

    # -- provided by PartitionLog and its other mixins
    def _write_batches(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int,
                       leader_epoch: int | None, sums: tuple[int, int, int] | None = None, *,
                       verbatim: bool = False) -> int:
        raise NotImplementedError

    def _index_aborted(self, completed: CompletedTxn, segment_base: int) -> None:
        raise NotImplementedError

    def _advance_log_start(self, new_start: int) -> None:
        raise NotImplementedError

    def _delete_segments_below_start(self) -> int:
        raise NotImplementedError

    def truncate_to(self, offset: int) -> None:
        raise NotImplementedError

    # ================================================================== epochs

    @property
    def leader_epoch(self) -> int:
        """The leader epoch of this log: the one given to :meth:`become_leader`, else the
        newest epoch in the log, else -1 (none yet). Batches appended as a leader carry
        it (epoch 0 while it is -1)."""
        if self._leader_epoch is not None:
            return self._leader_epoch
        latest = self.epochs.latest_epoch
        return -1 if latest is None else latest

    def become_leader(self, epoch: int) -> None:
        """This replica leads the partition in ``epoch`` from now on: later leader appends
        carry it, and the epoch starts at the log end offset (so OffsetForLeaderEpoch
        answers for it before anything is appended). An epoch older than the newest one
        in the log is refused with ValueError (epochs never go back)."""
        latest = self.epochs.latest_epoch
        if latest is not None and epoch < latest:
            raise ValueError(f"{self.path}: leader epoch {epoch} is older than the log's latest epoch {latest}")
        self._leader_epoch = epoch
        self.epochs.assign(epoch, self._leo)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch for ``epoch`` on this log: (the largest epoch <= it, where
        that epoch ends), (-1, -1) when undefined; see
        :meth:`~.leader_epochs.LeaderEpochCache.end_offset_for`."""
        return self.epochs.end_offset_for(epoch, self._leo)

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """The leader's check of a follower's Fetch (v12+; Kafka's ``Partition.readRecords``):
        None when the follower's log is a prefix of ours as far as it can tell (or it sent
        no LastFetchedEpoch, -1), else (epoch, end offset) to answer as DivergingEpoch
        (no records): the largest epoch <= ``last_fetched_epoch`` we have and where it
        ends here, when that epoch is older or ends before ``fetch_offset``. Raises
        OffsetOutOfRange when that end is unknown or ``fetch_offset`` is below the log
        start offset."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch == UNDEFINED_EPOCH or end == UNDEFINED_EPOCH_OFFSET:
            raise OffsetOutOfRange(f"could not determine the end offset of the last fetched epoch "
                                   f"{last_fetched_epoch}")
        if fetch_offset < self._log_start:
            raise OffsetOutOfRange(f"fetch offset {fetch_offset} is below the log start offset {self._log_start}")
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def _assign_epochs(self, headers: list[BatchHeader]) -> None:
        """Record the start of every new epoch among ``headers`` (written verbatim)."""
        epochs = self.epochs
        for h in headers:
            e = h.partition_leader_epoch
            if e >= 0 and e != epochs.latest_epoch:
                epochs.assign(e, h.base_offset)

    def _load_leader_epochs(self) -> None:
        """Start-up: the checkpoint file's entries cut to [log start, LEO], then the batch
        headers after the recovery point (after an unclean shutdown; every header when the
        file is missing or unreadable) assigned on top. The file never misses an epoch
        of the batches below the recovery point on disk: a flush writes the checkpoint
        before the recovery point, and a truncation rewrites the recovery point durably
        with its next flush (the follower waits for that flush before appending)."""
        entries = read_checkpoint(self.storage, self.path)
        cache = LeaderEpochCache(entries or ())
        cache.truncate_from_end(self._leo)
        scan_from = self._log_start if entries is None else max(self._recovery_point, self._log_start)
        if scan_from < self._leo:
            self._assign_epochs_from(cache, scan_from)
        cache.truncate_from_start(self._log_start)
        if entries is None and len(cache):
            cache.dirty = True
        self.epochs = cache

    def _assign_epochs_from(self, cache: LeaderEpochCache, offset: int) -> None:
        """Assign the epochs of the batches from ``offset`` to the LEO. Epochs never go
        down along a log, so when the first and the last of those batches share one, it
        is the only one (two header reads, not a walk: a log written before epoch
        checkpoints existed has epoch 0 throughout)."""
        first = next(self._headers_from(offset), None)
        last = next(self._headers_from(self._leo - 1), None)
        if first is None or last is None:
            return
        if first.partition_leader_epoch == last.partition_leader_epoch:
            headers: Iterator[BatchHeader] | list[BatchHeader] = [first]
        else:
            headers = self._headers_from(offset)
        for h in headers:
            e = h.partition_leader_epoch
            if e >= 0 and e != cache.latest_epoch:
                cache.assign(e, h.base_offset)

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches whose last offset is >= ``offset``, in order."""
        for seg in self._segments:
            if seg.next_offset <= offset:
                continue
            start = seg.offset_index.lookup(offset) if offset > seg.base_offset else 0
            for h in seg.iter_headers(start):
                if h.base_offset + h.last_offset_delta >= offset:
                    yield h

    # ================================================================== durability

    def _replication_small_files(self, full: bool) -> tuple[tuple[str, str], ...]:
        """The leader-epoch checkpoint if it changed, and the recovery point if a
        truncation lowered it (a full job writes the LEO it covers: its segments are
        fsynced before the small files), both written durably by the job."""
        out: tuple[tuple[str, str], ...] = ()
        text = self.epochs.take_checkpoint()
        if text is not None:
            out += ((os.path.join(self.path, LEADER_EPOCH_CHECKPOINT_FILE), text),)
        if self._recovery_point_lowered:
            self._recovery_point_lowered = False
            point = self._leo if full else self._recovery_point
            out += ((os.path.join(self.path, RECOVERY_POINT_FILE), f"{point}\n"),)
        return out

    def _small_files_lost(self, job: FlushJob) -> None:
        """A job's small files may not have been written: write them again next time."""
        for path, _ in job.small_files:
            if path.endswith(LEADER_EPOCH_CHECKPOINT_FILE):
                self.epochs.dirty = True
            elif path.endswith(RECOVERY_POINT_FILE):
                self._recovery_point_lowered = True

    # ================================================================== follower

    def append_as_follower(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader],
                           now_ms: int) -> AppendResult:
        """Append the leader's batches exactly as they are (offsets, leader epochs, bytes).

        ``headers`` come from ``validate_batches(buf, client_origin=False)`` (CRC checked
        there). The first batch must start at the log end offset and each next one right
        after the previous; a compacted log may skip offsets between batches (the
        leader's cleaner removed them). Raises :class:`UnexpectedAppendOffset` otherwise,
        writing nothing. Producer state and transaction markers are applied as the leader
        applied them, new epochs go to the epoch cache; the high watermark is left alone
        (the follower takes the leader's; ``after_append`` is called when set). Raises
        OSError like ``append``.
        """
        if not headers:
            raise ValueError("append_as_follower needs at least one batch")
        self._check_contiguous(headers)
        total = count = 0
        for h in headers:
            total += h.length + 12
            count += h.records_count
        first = headers[0].base_offset
        self._write_batches(buf, headers, now_ms, None, (headers[-1].next_offset, total, count), verbatim=True)
        self._leader_epoch = None  # a follower now: leader_epoch is the leader's, from its batches
        self._assign_epochs(headers)
        self._apply_producer_batches(buf, headers)
        return AppendResult(first, headers[-1].last_offset, -1, self._log_start)

    def _check_contiguous(self, headers: list[BatchHeader]) -> None:
        expect = self._leo
        gaps_allowed = self.config.compact
        for h in headers:
            if h.base_offset < expect:
                raise UnexpectedAppendOffset(
                    f"{self.path}: batch at offset {h.base_offset} overlaps the log, which continues at {expect}")
            if h.base_offset > expect and not gaps_allowed:
                raise UnexpectedAppendOffset(
                    f"{self.path}: batch at offset {h.base_offset} leaves a gap after {expect - 1} "
                    f"in a log that is not compacted")
            expect = h.next_offset

    def _apply_producer_batches(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Producer state of batches written verbatim: data batches update their
        producer, transaction markers end transactions (ABORTs indexed), as replay does."""
        ps = self.producer_state
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        for h in headers:
            if h.producer_id < 0:
                continue
            if h.is_control:
                try:
                    marker = parse_marker(bytes(mv[h.position:h.position + h.length + 12]))
                except InvalidRecords as exc:
                    log.warning("%s: unreadable control batch at offset %d: %s", self.path, h.base_offset, exc)
                    marker = None
                if marker is not None:
                    completed = ps.apply_marker(h.producer_id, h.producer_epoch, marker.coordinator_epoch,
                                                h.base_offset, marker.commit, h.max_timestamp)
                    if completed.aborted:
                        self._index_aborted(completed, self._segments[-1].base_offset)
                    continue
            ps.update(h, h.base_offset, h.last_offset, h.max_timestamp)

    def maybe_increment_log_start(self, offset: int) -> bool:
        """A follower takes the leader's log start offset: raise ours to ``offset``
        (capped at our high watermark, which the leader's start never passes once we
        have caught up) and delete segments wholly below it. True if it moved."""
        new = min(offset, self._hw)
        if new <= self._log_start:
            return False
        self._advance_log_start(new)
        self._delete_segments_below_start()
        return True
