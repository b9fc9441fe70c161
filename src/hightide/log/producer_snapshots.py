"""Producer state of a partition log: loading it at start-up (newest usable snapshot plus
the batch headers after it) and the ``<offset>.snapshot`` files (:mod:`.snapshots`).

A mixin of :class:`~.partition_log.PartitionLog`, kept apart to keep that module small;
it uses the log's segments, offsets and storage engine and owns ``_snapshots`` (offsets
of the snapshot files, ascending) and ``_unsynced_snapshots`` (written without fsync;
the next flush fsyncs them).
"""

from __future__ import annotations

import json
import logging
import os

from .loader import PRODUCER_SNAPSHOT_FILE
from .log_reads import LogReads
from hightide.protocol.records import LOG_OVERHEAD, BatchHeader, InvalidRecords

from .producer_state import ProducerStateManager
from .segment import LogSegment
from .snapshots import (
    SnapshotCorrupt,
    delete_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from .storage import Storage, StorageFile, read_small_file
from .transactions import CompletedTxn, parse_marker
from .txn_index import TxnIndex

__all__ = ["ProducerSnapshots", "SNAPSHOTS_KEPT"]

log = logging.getLogger("hightide.log")

SNAPSHOTS_KEPT = 2  # producer-state snapshots kept per partition (newest first)


class ProducerSnapshots(LogReads):
    """Producer-state loading and snapshot files (see the module docstring)."""

    storage: Storage
    path: str
    producer_state: ProducerStateManager
    producer_state_replayed: int
    txn_index: TxnIndex
    _segments: list[LogSegment]
    _bases: list[int]
    _leo: int
    _log_start: int
    _recovery_point: int
    _dir_dirty: bool
    _snapshots: list[int]
    _unsynced_snapshots: list[str]

    def _replayed_marker(self, completed: CompletedTxn) -> None:
        raise NotImplementedError  # TransactionalLog's, which precedes this class in PartitionLog's MRO

    def _load_producer_state(self, clean_shutdown: bool) -> None:
        legacy = self._read_legacy_snapshot(clean_shutdown)
        try:
            self._snapshots = list_snapshots(self.storage, self.path)
        except OSError as exc:
            log.warning("%s: cannot list producer state snapshots: %s", self.path, exc)
            self._snapshots = []
        from_offset = self._reload_producer_state(legacy, None if clean_shutdown else self._recovery_point)
        if from_offset < self._leo or (legacy is not None and from_offset == legacy[0]):
            self._take_snapshot(sync=False)  # fsynced by the flush that follows recovery

    def _read_legacy_snapshot(self, clean_shutdown: bool) -> tuple[int, ProducerStateManager] | None:
        """The ``producer-state.snapshot`` of older versions (trusted only after a clean
        shutdown, like they did), deleted once read."""
        snap_path = os.path.join(self.path, PRODUCER_SNAPSHOT_FILE)
        result = None
        try:
            data = json.loads(read_small_file(self.storage, snap_path))
            snap_offset = int(data["offset"])
            if clean_shutdown and snap_offset <= self._leo:
                result = snap_offset, ProducerStateManager.from_json(data["state"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable producer state snapshot %s: %s", snap_path, e)
        try:
            self.storage.unlink(snap_path)
        except OSError:
            pass
        return result

    def _reload_producer_state(self, legacy: tuple[int, ProducerStateManager] | None = None,
                               recovery_point: int | None = None) -> int:
        """Like Kafka's truncateAndReload: delete the snapshots outside [log start, LEO],
        load the newest usable one (else ``legacy``, else nothing) and replay the batches
        after it. The aborted transactions index is rebuilt from the same offset (its
        entries for markers below it are trusted). Returns the offset the replay started
        from.

        ``recovery_point`` (an unclean start): a snapshot above it is passed over when a
        control batch lies between the two, as Kafka rebuilds the transaction index of
        every segment past the recovery point: after a power cut the kernel may have
        written back a marker and the snapshot but not the marker's index entry."""
        for off in [o for o in self._snapshots if o > self._leo or o < self._log_start]:
            self._remove_snapshot(off)
        base = self._segments[0].base_offset
        state, from_offset = None, base
        for off in reversed(self._snapshots):
            if legacy is not None and legacy[0] >= off:
                break
            try:
                snap = read_snapshot(self.storage, self.path, off)
                if off > base and snap.last_batch != self._boundary_batch(off):
                    raise SnapshotCorrupt("the log below it has changed")
            except SnapshotCorrupt as e:
                log.warning("%s: discarding producer state snapshot at %d: %s", self.path, off, e)
                self._remove_snapshot(off)
                continue
            except OSError as e:
                log.warning("%s: cannot read producer state snapshot at %d: %s", self.path, off, e)
                continue
            if recovery_point is not None and off > recovery_point and self._has_control_batch(recovery_point, off):
                continue
            state, from_offset = snap.state, off
            break
        if state is None and legacy is not None:
            from_offset, state = legacy
        self.producer_state = state if state is not None else ProducerStateManager()
        self.txn_index.forget_from(from_offset)
        self.producer_state_replayed = self._replay_producer_state(from_offset)
        try:
            if self.txn_index.sync_files(from_offset, self._bases):
                self._dir_dirty = True
        except OSError as exc:  # memory is right; the next start rebuilds the files
            log.warning("%s: could not write the aborted transaction index: %s", self.path, exc)
        return from_offset

    def _replay_producer_state(self, from_offset: int) -> int:
        """Apply the batch headers at/after ``from_offset``; returns how many were read."""
        ps = self.producer_state
        n = 0
        for seg in self._segments:
            if seg.next_offset <= from_offset:
                continue
            start = seg.offset_index.lookup(from_offset) if from_offset > seg.base_offset else 0
            for h in seg.iter_headers(start):
                if h.base_offset >= from_offset:
                    n += 1
                    if h.producer_id < 0:
                        continue
                    if h.is_control and self._replay_marker(seg, h):
                        continue
                    ps.update(h, h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp)
        return n

    def _has_control_batch(self, from_offset: int, to_offset: int) -> bool:
        """True if a control batch starts in [from_offset, to_offset) (headers only)."""
        for seg in self._segments:
            if seg.next_offset <= from_offset or seg.base_offset >= to_offset:
                continue
            start = seg.offset_index.lookup(from_offset) if from_offset > seg.base_offset else 0
            for h in seg.iter_headers(start):
                if h.base_offset >= to_offset:
                    break
                if h.is_control and h.base_offset >= from_offset:
                    return True
        return False

    def _replay_marker(self, seg: LogSegment, h: BatchHeader) -> bool:
        """Apply the end-transaction marker in control batch ``h`` (decoding its one
        record); False if it holds no marker Kafka knows (then it only ends the open
        transaction, like any control batch)."""
        try:
            marker = parse_marker(seg.read_at(h.position, h.length + LOG_OVERHEAD))
        except (InvalidRecords, OSError) as exc:
            log.warning("%s: unreadable control batch at offset %d: %s", self.path, h.base_offset, exc)
            return False
        if marker is None:
            return False
        completed = self.producer_state.apply_marker(h.producer_id, h.producer_epoch, marker.coordinator_epoch,
                                                     h.base_offset, marker.commit, h.max_timestamp)
        self._replayed_marker(completed)
        return True

    # ================================================================== snapshots

    def _boundary_batch(self, offset: int) -> tuple[int, int] | None:
        """(base offset, CRC) of the batch ending at ``offset - 1``, None if there is none."""
        if offset <= self._segments[0].base_offset:
            return None
        seg = self._segments[self._segment_index(offset - 1)]
        h = seg.find_batch(offset - 1)
        if h is None or h.base_offset + h.last_offset_delta != offset - 1:
            return None
        return h.base_offset, h.crc

    def _take_snapshot(self, *, sync: bool) -> None:
        """Write a producer-state snapshot at the LEO and keep the newest
        :data:`SNAPSHOTS_KEPT`. Without ``sync`` the file is fsynced by the next flush.
        A failure is logged and otherwise ignored: a snapshot only saves replay work."""
        off = self._leo
        try:
            path = write_snapshot(self.storage, self.path, off, self._boundary_batch(off), self.producer_state,
                                  sync=sync)
        except OSError as exc:
            log.warning("%s: could not write the producer state snapshot at %d: %s", self.path, off, exc)
            return
        if off not in self._snapshots:
            self._snapshots.append(off)
            self._snapshots.sort()
        if not sync:
            self._unsynced_snapshots.append(path)
        self._dir_dirty = True
        while len(self._snapshots) > SNAPSHOTS_KEPT:
            self._remove_snapshot(self._snapshots[0])

    def _remove_snapshot(self, offset: int) -> None:
        try:
            delete_snapshot(self.storage, self.path, offset)
        except OSError as exc:
            log.warning("%s: could not delete the producer state snapshot at %d: %s", self.path, offset, exc)
        if offset in self._snapshots:
            self._snapshots.remove(offset)
        if self._unsynced_snapshots:
            gone = snapshot_path(self.path, offset)
            self._unsynced_snapshots = [p for p in self._unsynced_snapshots if p != gone]
        self._dir_dirty = True

    def _delete_all_snapshots(self) -> None:
        try:
            offsets = list_snapshots(self.storage, self.path)
        except OSError:
            offsets = list(self._snapshots)
        for off in offsets:
            self._remove_snapshot(off)
        self._snapshots = []

    @property
    def snapshot_offsets(self) -> tuple[int, ...]:
        """Offsets of the producer-state snapshot files, ascending."""
        return tuple(self._snapshots)

    def _take_snapshot_files(self) -> tuple[StorageFile, ...]:
        """Handles of the snapshots written without fsync, for the flush job (a
        snapshot deleted meanwhile, or an error opening one, is just skipped)."""
        files: list[StorageFile] = []
        for path in self._unsynced_snapshots:
            try:
                files.append(self.storage.open(path, create=False))
            except OSError:
                pass
        self._unsynced_snapshots = []
        files.extend(self.txn_index.take_dirty_files())  # aborted transaction index files, likewise
        return tuple(files)
