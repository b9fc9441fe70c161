"""Idempotent-producer state of one partition (sans-IO).

For every producer id the partition remembers the current epoch and the metadata of
the last :data:`NUM_BATCHES_TO_RETAIN` batches. Before an append, each batch is checked
(:meth:`ProducerStateManager.check`), after it the state is updated
(:meth:`ProducerStateManager.update`). Rules follow Kafka ≥ 2.5 (KIP-360):

* producer id -1: not idempotent, no checks.
* unknown producer id: accepted with any sequence (its state may have been lost to
  retention or DeleteRecords; the broker cannot tell, so it trusts the producer).
* epoch older than the current one: INVALID_PRODUCER_EPOCH (47).
* same epoch and (base_sequence, last_sequence) equal to one of the cached batches:
  :class:`Duplicate` — answer with the original offsets, append nothing.
* newer epoch: must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45).
* same epoch: base_sequence must be last_sequence + 1 (int32 wrap-around: 0 after
  2**31-1), else OUT_OF_ORDER_SEQUENCE_NUMBER (45).
* a non-transactional data batch while the producer has an open transaction:
  INVALID_TXN_STATE (48), like Kafka's ProducerAppendInfo.
* control batches (transaction markers) carry no sequence numbers; they end the open
  transaction (see :meth:`ProducerStateManager.check_marker` / ``apply_marker``): an
  older producer epoch is INVALID_PRODUCER_EPOCH (47), an older coordinator epoch
  TRANSACTION_COORDINATOR_FENCED (52).

The first offsets of the open transactions are also kept sorted
(:meth:`ProducerStateManager.first_unstable_offset` is O(1)), for the last stable offset.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hightide.protocol.records import BatchHeader

from .transactions import CompletedTxn

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE",
    "TRANSACTION_COORDINATOR_FENCED",
    "BatchMetadata",
    "ProducerEntry",
    "Accepted",
    "ACCEPTED",
    "Duplicate",
    "Rejected",
    "CheckResult",
    "ProducerStateError",
    "ProducerStateManager",
    "ProducerAppend",
]

NUM_BATCHES_TO_RETAIN = 5
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
_INT32_MAX = 2**31 - 1
_TXN_OR_CONTROL = 0x30  # batch attributes: transactional (bit 4), control (bit 5)


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    """State of one producer id: epoch, last batches (oldest first), open transaction
    (its first offset, None when none) and the epoch of the coordinator that wrote its
    last marker (-1 before any)."""

    producer_id: int
    epoch: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
            self.current_txn_first_offset,
            self.coordinator_epoch,
        )


class Accepted(NamedTuple):
    """The batch may be appended."""


ACCEPTED = Accepted()


class Duplicate(NamedTuple):
    """The batch was already appended: acknowledge with these offsets, do not append."""

    first_offset: int
    last_offset: int
    timestamp: int


class Rejected(NamedTuple):
    """The batch must be refused with ``error_code``."""

    error_code: int
    message: str


CheckResult = Accepted | Duplicate | Rejected


class ProducerStateError(Exception):
    """Raised by the log when a batch is :class:`Rejected`; carries the Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def _check(entry: ProducerEntry | None, h: BatchHeader) -> CheckResult:
    if h.producer_id < 0 or entry is None:
        return ACCEPTED
    epoch = h.producer_epoch
    if epoch == entry.epoch and not h.is_control:
        first, last = h.base_sequence, h.last_sequence
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return Duplicate(b.first_offset, b.last_offset, b.timestamp)
    if epoch < entry.epoch:
        return Rejected(
            INVALID_PRODUCER_EPOCH,
            f"epoch {epoch} of producer {h.producer_id} is older than the current epoch {entry.epoch}",
        )
    if h.is_control:
        return ACCEPTED
    if entry.current_txn_first_offset is not None and not h.is_transactional:
        return Rejected(
            INVALID_TXN_STATE,
            f"expected a transactional write from producer {h.producer_id}: its transaction starting at offset "
            f"{entry.current_txn_first_offset} is still open",
        )
    if epoch != entry.epoch:
        if h.base_sequence != 0 and entry.epoch != -1:
            return Rejected(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"invalid sequence {h.base_sequence} for new epoch {epoch} of producer {h.producer_id} "
                f"(current epoch {entry.epoch}); a new epoch must start at 0",
            )
        return ACCEPTED
    last_seq = entry.last_seq
    if not _in_sequence(last_seq, h.base_sequence):
        return Rejected(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"out of order sequence {h.base_sequence} for producer {h.producer_id} "
            f"(last sequence {last_seq})",
        )
    return ACCEPTED


def _update(entry: ProducerEntry, h: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> None:
    if h.producer_epoch != entry.epoch:
        entry.epoch = h.producer_epoch
        entry.batches.clear()
    entry.last_timestamp = timestamp
    if h.is_control:
        entry.current_txn_first_offset = None
        return
    entry.batches.append(BatchMetadata(h.base_sequence, h.last_sequence, first_offset, last_offset, timestamp))
    if h.is_transactional and entry.current_txn_first_offset is None:
        entry.current_txn_first_offset = first_offset


class ProducerStateManager:
    """Producer id -> :class:`ProducerEntry` for one partition. Pure in-memory.

    Besides ``producers`` it keeps ``(first offset, producer id)`` of every open
    transaction sorted, so the first unstable offset costs nothing to read; every
    change of an entry's ``current_txn_first_offset`` goes through :meth:`_track`.
    """

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing: list[tuple[int, int]] = []

    def _track(self, pid: int, old_first: int | None, new_first: int | None) -> None:
        """Keep ``_ongoing`` in step with one producer's open transaction."""
        if old_first == new_first:
            return
        ongoing = self._ongoing
        if old_first is not None:
            i = bisect_left(ongoing, (old_first, pid))
            if i < len(ongoing) and ongoing[i] == (old_first, pid):
                del ongoing[i]
        if new_first is not None:
            insort(ongoing, (new_first, pid))

    def check(self, h: BatchHeader) -> CheckResult:
        """Check one batch against the current state (see module docstring)."""
        if h.producer_id < 0:
            return ACCEPTED
        return _check(self.producers.get(h.producer_id), h)

    def update(self, h: BatchHeader, first_offset: int, last_offset: int, now_ms: int) -> None:
        """Record an appended batch. ``now_ms`` is the batch's timestamp as stored
        (MaxTimestamp, or the append time for LogAppendTime topics). A control batch
        given here ends the open transaction without checks (use :meth:`apply_marker`
        to learn what it completed)."""
        if h.producer_id < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
        old = entry.current_txn_first_offset
        _update(entry, h, first_offset, last_offset, now_ms)
        self._track(h.producer_id, old, entry.current_txn_first_offset)

    def begin(self) -> ProducerAppend:
        """Start checking several batches of one append sequentially (see ProducerAppend)."""
        return ProducerAppend(self)

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open transaction (for the LSO), None if none. O(1)."""
        return self._ongoing[0][0] if self._ongoing else None

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of every open transaction, ascending."""
        return list(self._ongoing)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """True if ``producer_id`` has an open transaction here under ``producer_epoch``."""
        e = self.producers.get(producer_id)
        return e is not None and e.epoch == producer_epoch and e.current_txn_first_offset is not None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Rejected | None:
        """Kafka's checks before an end-transaction marker is appended: None if it may
        be, else INVALID_PRODUCER_EPOCH (the producer epoch is older than the current
        one) or TRANSACTION_COORDINATOR_FENCED (the coordinator epoch is older than the
        one of the producer's last marker)."""
        e = self.producers.get(producer_id)
        if e is None:
            return None
        if producer_epoch < e.epoch:
            return Rejected(INVALID_PRODUCER_EPOCH,
                            f"marker epoch {producer_epoch} of producer {producer_id} is older than the current "
                            f"epoch {e.epoch}")
        if coordinator_epoch < e.coordinator_epoch:
            return Rejected(TRANSACTION_COORDINATOR_FENCED,
                            f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, older "
                            f"than {e.coordinator_epoch}")
        return None

    def apply_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, offset: int,
                     commit: bool, timestamp: int) -> CompletedTxn:
        """Record an appended marker at ``offset`` (no checks: see :meth:`check_marker`)
        and return the transaction it completed; a marker without an open transaction
        completes an empty one starting at the marker itself, as in Kafka."""
        e = self.producers.get(producer_id)
        if e is None:
            e = self.producers[producer_id] = ProducerEntry(producer_id)
        if producer_epoch != e.epoch:
            e.epoch = producer_epoch
            e.batches.clear()
        first = e.current_txn_first_offset
        self._track(producer_id, first, None)
        e.current_txn_first_offset = None
        e.coordinator_epoch = coordinator_epoch
        e.last_timestamp = timestamp
        return CompletedTxn(producer_id, offset if first is None else first, offset, not commit)

    def clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()

    def _rebuild_ongoing(self) -> None:
        self._ongoing = sorted((e.current_txn_first_offset, e.producer_id) for e in self.producers.values()
                               if e.current_txn_first_offset is not None)

    def _commit(self, updated: Iterable[ProducerEntry]) -> None:
        producers = self.producers
        for e in updated:
            old = producers.get(e.producer_id)
            old_first = old.current_txn_first_offset if old is not None else None
            producers[e.producer_id] = e
            if old_first != e.current_txn_first_offset:
                self._track(e.producer_id, old_first, e.current_txn_first_offset)

    # ------------------------------------------------------------- snapshots

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of all entries (version 2: with the coordinator
        epoch; the open transaction's first offset is Kafka's CurrentTxnFirstOffset)."""
        return {
            "version": 2,
            "producers": [
                {
                    "id": e.producer_id,
                    "epoch": e.epoch,
                    "last_timestamp": e.last_timestamp,
                    "txn_first_offset": e.current_txn_first_offset,
                    "coordinator_epoch": e.coordinator_epoch,
                    "batches": [list(b) for b in e.batches],
                }
                for e in self.producers.values()
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProducerStateManager:
        """Inverse of :meth:`to_json` (also reads version 1, without coordinator
        epochs); raises ValueError/KeyError/TypeError on bad input."""
        version = data.get("version")
        if version not in (1, 2):
            raise ValueError("unsupported producer state snapshot version")
        mgr = cls()
        for p in data["producers"]:
            e = ProducerEntry(int(p["id"]), int(p["epoch"]))
            e.last_timestamp = int(p["last_timestamp"])
            t = p["txn_first_offset"]
            e.current_txn_first_offset = None if t is None else int(t)
            e.coordinator_epoch = int(p["coordinator_epoch"]) if version == 2 else -1
            for b in p["batches"]:
                e.batches.append(BatchMetadata(*(int(x) for x in b)))
            mgr.producers[e.producer_id] = e
        mgr._rebuild_ongoing()
        return mgr


class ProducerAppend:
    """Checks and updates for the batches of one append, applied on :meth:`commit`.

    Later batches are checked against the state as updated by earlier ones; nothing is
    visible in the manager until commit (so a rejected append leaves no trace).
    """

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self._updated: dict[int, ProducerEntry] = {}
        self._txn = False  # a transactional or control batch: open transactions may change

    def _entry(self, pid: int) -> ProducerEntry | None:
        e = self._updated.get(pid)
        return e if e is not None else self._manager.producers.get(pid)

    def check(self, h: BatchHeader) -> CheckResult:
        if h.producer_id < 0:
            return ACCEPTED
        return _check(self._entry(h.producer_id), h)

    def update(self, h: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> None:
        pid = h.producer_id
        if pid < 0:
            return
        e = self._updated.get(pid)
        if e is None:
            cur = self._manager.producers.get(pid)
            e = cur.copy() if cur is not None else ProducerEntry(pid)
            self._updated[pid] = e
        if h.attributes & _TXN_OR_CONTROL:
            self._txn = True
        _update(e, h, first_offset, last_offset, timestamp)

    def commit(self) -> None:
        if self._txn:
            self._manager._commit(self._updated.values())
        else:  # plain idempotent batches never open or close a transaction
            self._manager.producers.update(self._updated)
        self._updated = {}
        self._txn = False
