"""Transactions on a partition log: markers, the last stable offset, aborted transactions.

A mixin of :class:`~.partition_log.PartitionLog`, kept apart to keep that module small
(see :mod:`.transactions` for the theory of operation). It uses the log's producer
state, segments and offsets and owns ``txn_index`` (:class:`~.txn_index.TxnIndex`).
"""

from __future__ import annotations

import logging

from hightide.protocol.records import BatchHeader, validate_batches

from .producer_state import ProducerStateError, ProducerStateManager
from .log_reads import LogReads
from .results import RecordsRead
from .segment import LogSegment
from .transactions import CompletedTxn, marker_batch
from .txn_index import AbortedTxn, TxnIndex

__all__ = ["TransactionalLog"]

log = logging.getLogger("hightide.log")


class TransactionalLog(LogReads):
    """The transactional operations of a partition log (see the module docstring)."""

    path: str
    producer_state: ProducerStateManager
    txn_index: TxnIndex
    _segments: list[LogSegment]
    _bases: list[int]
    _hw: int
    _leo: int
    _log_start: int
    _dir_dirty: bool

    def _write_batches(self, buf: bytes, headers: list[BatchHeader], now_ms: int, leader_epoch: int | None) -> int:
        raise NotImplementedError

    # ================================================================== reads

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction, else the high
        watermark; never above the high watermark nor below the log start offset. O(1)."""
        hw = self._hw
        first = self.producer_state.first_unstable_offset()
        if first is None or first >= hw:
            return hw
        return max(first, self._log_start)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """True if this partition holds an open transaction of ``producer_id`` under
        ``producer_epoch`` (a produce to it then needs no verification, as in Kafka)."""
        return self.producer_state.has_ongoing_transaction(producer_id, producer_epoch)

    def read_committed(self, offset: int, max_bytes: int) -> tuple[RecordsRead, list[tuple[int, int]]]:
        """A read_committed read: like ``read_records(offset, max_bytes, max_offset=LSO)``
        (a large read may be a region the caller must close), plus
        the aborted transactions (producer id, first offset) that may have batches in
        what was read. The range's upper bound comes from the segment's offset index (no
        header walk), as Kafka's fetchUpperBoundOffset; a log without aborted
        transactions pays nothing extra. Raises OffsetOutOfRange like ``read``."""
        sl = self.read_slice(offset, max_bytes, max_offset=self.last_stable_offset)
        if sl is None:
            return RecordsRead(b"", -1, self._hw, self._log_start), []
        result = RecordsRead(self._slice_records(sl), sl.first_offset, self._hw, self._log_start)
        if not self.txn_index.entries:
            return result, []
        seg = self._segments[self._segment_index(sl.first_offset)]
        upper = seg.offset_index.offset_from_position(sl.position + sl.size)
        if upper is None:
            upper = seg.next_offset
        return result, self.txn_index.collect(offset, min(upper, self.last_stable_offset))

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction that may have
        batches in ``[fetch_offset, upper_bound)`` (for a read_committed Fetch of that
        range), from memory: empty at no cost when the partition never had an abort,
        otherwise a bisection plus the overlapping entries. May name transactions with no
        batch in the range (clients ignore those), never misses one."""
        return self.txn_index.collect(fetch_offset, upper_bound)

    # ================================================================== markers

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      now_ms: int, leader_epoch: int | None = None) -> int:
        """Append an end-transaction marker (a control batch, see :mod:`.transactions`)
        ending ``producer_id``'s open transaction here; returns the marker's offset.

        Checks first, like Kafka: a producer epoch older than the partition's current
        epoch for that producer raises ProducerStateError(INVALID_PRODUCER_EPOCH), a
        coordinator epoch older than the one of its last marker raises
        ProducerStateError(TRANSACTION_COORDINATOR_FENCED); nothing is written then. A
        marker for a producer with no open transaction here is written all the same
        (the partition was added to the transaction but got no data). The marker carries
        ``leader_epoch`` (default: the log's :attr:`leader_epoch`).

        On success the transaction is closed (the LSO moves past it if it was the
        earliest open one) and an ABORT adds an entry to the aborted transactions index.
        Disk errors raise OSError exactly as :meth:`append` does. The caller (the
        broker) wakes parked fetches of the partition and, if the topic's flush policy
        asks for it, waits for durability, as after a produce.
        """
        rejected = self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if rejected is not None:
            raise ProducerStateError(rejected.error_code, rejected.message)
        batch = marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        headers = validate_batches(batch, None, client_origin=False)
        offset = self._write_batches(batch, headers, now_ms, leader_epoch)
        completed = self.producer_state.apply_marker(producer_id, producer_epoch, coordinator_epoch, offset, commit,
                                                     now_ms)
        if completed.aborted:
            self._index_aborted(completed, self._segments[-1].base_offset)
        return offset

    def _aborted_entry(self, completed: CompletedTxn) -> AbortedTxn:
        """The index entry of an aborted transaction just completed (the producer state
        already without it): its LSO is the earliest other open transaction, else the
        offset after the marker."""
        nxt = self.producer_state.first_unstable_offset()
        lso = completed.last_offset + 1 if nxt is None else nxt
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)

    def _index_aborted(self, completed: CompletedTxn, segment_base: int) -> None:
        try:
            self.txn_index.append(self._aborted_entry(completed), segment_base)
        except OSError as exc:  # memory has it; the next start rebuilds it from the log
            log.warning("%s: could not write the aborted transaction index: %s", self.path, exc)
        self._dir_dirty = True

    def _replayed_marker(self, completed: CompletedTxn) -> None:
        """Replay hook: an ABORT marker found while rebuilding producer state."""
        if completed.aborted:
            self.txn_index.add_replayed(self._aborted_entry(completed))
