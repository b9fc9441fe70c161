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
* control batches (transaction markers) only bump the epoch and end the open
  transaction; they carry no sequence numbers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hightide.protocol.records import BatchHeader

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
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
_INT32_MAX = 2**31 - 1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    """State of one producer id: epoch, last batches (oldest first), open transaction."""

    producer_id: int
    epoch: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

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
    """Producer id -> :class:`ProducerEntry` for one partition. Pure in-memory."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, h: BatchHeader) -> CheckResult:
        """Check one batch against the current state (see module docstring)."""
        if h.producer_id < 0:
            return ACCEPTED
        return _check(self.producers.get(h.producer_id), h)

    def update(self, h: BatchHeader, first_offset: int, last_offset: int, now_ms: int) -> None:
        """Record an appended batch. ``now_ms`` is the batch's timestamp as stored
        (MaxTimestamp, or the append time for LogAppendTime topics)."""
        if h.producer_id < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
        _update(entry, h, first_offset, last_offset, now_ms)

    def begin(self) -> ProducerAppend:
        """Start checking several batches of one append sequentially (see ProducerAppend)."""
        return ProducerAppend(self)

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open transaction (for the LSO), None if none."""
        offs = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset is not None]
        return min(offs) if offs else None

    def clear(self) -> None:
        self.producers.clear()

    # ------------------------------------------------------------- snapshots

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of all entries."""
        return {
            "version": 1,
            "producers": [
                {
                    "id": e.producer_id,
                    "epoch": e.epoch,
                    "last_timestamp": e.last_timestamp,
                    "txn_first_offset": e.current_txn_first_offset,
                    "batches": [list(b) for b in e.batches],
                }
                for e in self.producers.values()
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProducerStateManager:
        """Inverse of :meth:`to_json`; raises ValueError/KeyError/TypeError on bad input."""
        if data.get("version") != 1:
            raise ValueError("unsupported producer state snapshot version")
        mgr = cls()
        for p in data["producers"]:
            e = ProducerEntry(int(p["id"]), int(p["epoch"]))
            e.last_timestamp = int(p["last_timestamp"])
            t = p["txn_first_offset"]
            e.current_txn_first_offset = None if t is None else int(t)
            for b in p["batches"]:
                e.batches.append(BatchMetadata(*(int(x) for x in b)))
            mgr.producers[e.producer_id] = e
        return mgr


class ProducerAppend:
    """Checks and updates for the batches of one append, applied on :meth:`commit`.

    Later batches are checked against the state as updated by earlier ones; nothing is
    visible in the manager until commit (so a rejected append leaves no trace).
    """

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self._updated: dict[int, ProducerEntry] = {}

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
        _update(e, h, first_offset, last_offset, timestamp)

    def commit(self) -> None:
        self._manager.producers.update(self._updated)
        self._updated = {}
