"""The transaction state machine of one transactional id (sans-IO), Kafka's
``TransactionState`` / ``TransactionMetadata``.

Theory of operation
-------------------
A transactional id moves through these states (TV1, the protocol every client speaks
before KIP-890 part 2)::

    (new) ─InitProducerId─▶ Empty ─AddPartitions─▶ Ongoing ─EndTxn(commit)─▶ PrepareCommit
                              ▲                     │  │                        │ markers
                              │                     │  └─EndTxn(abort)─▶ PrepareAbort
                              │                     │                        │ markers
                              │                     └─timeout / InitProducerId: PrepareEpochFence
                              │                              (epoch + 1) ─▶ PrepareAbort
              InitProducerId (epoch + 1)                                     │
    CompleteCommit / CompleteAbort ◀─────────────────────────────────────────┘
              └─ transactional.id.expiration.ms ─▶ Dead (tombstone)

``PrepareCommit`` / ``PrepareAbort`` is the *decision*: once its record is in
``__transaction_state`` the outcome is fixed, and the coordinator writes the markers to
every partition of the transaction (again after a restart, for every transaction found
in a Prepare state) before it writes ``CompleteCommit`` / ``CompleteAbort``.
``PrepareEpochFence`` is never stored: it is the step of an abort the coordinator starts
itself (a timed-out transaction, or InitProducerId while one is ongoing) that bumps the
epoch, so the old producer is fenced; the record written is the PrepareAbort with the
bumped epoch.

:data:`TRANSITIONS` is Kafka's table of legal moves (a state → the states it may be
entered from) and :func:`transition` the only place that builds a metadata in a new
state; it raises :class:`IllegalTransition` on a move the table does not allow (a
coordinator bug, never a client error). :class:`TxnMetadata` is immutable: a transition
returns a new one, which becomes the state only when its record is replayed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """A transaction state; ``value`` is its id in TransactionLogValue.TransactionStatus,
    ``label`` Kafka's name (DescribeTransactions, ListTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> TxnState:
        """The state named ``label`` (Kafka's spelling). Raises ValueError."""
        for s, name in _LABELS.items():
            if name == label:
                return s
        raise ValueError(f"unknown transaction state {label!r}")


_LABELS = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

S = TxnState
#: state -> the states it may be entered from (Kafka's ``validPreviousStates``).
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT,
                                S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: states in which a transaction's outcome is decided and its markers are being written
COMPLETING = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
#: states without a transaction in progress (a new one may begin, the id may expire)
IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow: a coordinator bug, not a client error."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: the epoch cannot be bumped twice more (one bump is
    kept for fencing), so the next InitProducerId hands out a new producer id."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What ``__transaction_state`` holds for one transactional id (TransactionLogValue),
    plus ``last_producer_epoch``: the epoch before the last bump of the same producer id
    (derived on replay, never stored; KIP-360 retries of InitProducerId)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1  # TransactionStartTimestampMs: when the ongoing transaction began
    update_ms: int = -1  # TransactionLastUpdateTimestampMs
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def sorted_partitions(self) -> list[TopicPartition]:
        return sorted(self.partitions)


def transition(meta: TxnMetadata, new: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
    """``meta`` moved to ``new`` with ``changes`` applied and ``update_ms = now_ms``.
    Raises :class:`IllegalTransition` if the table does not allow the move."""
    if meta.state not in TRANSITIONS[new]:
        raise IllegalTransition(f"transactional id {meta.transactional_id!r}: "
                                f"{meta.state.label} -> {new.label}")
    return replace(meta, state=new, update_ms=now_ms, **changes)  # type: ignore[arg-type]


def with_replayed(old: TxnMetadata | None, new: TxnMetadata) -> TxnMetadata:
    """``new`` as replayed after ``old``, with its ``last_producer_epoch`` derived as
    Kafka keeps it: an epoch bump by InitProducerId (into Empty) remembers the old epoch
    (a retried InitProducerId carrying it gets the same answer again); a fencing bump
    (into PrepareAbort) and a new producer id forget it; anything else carries it over."""
    if old is None or old.producer_id != new.producer_id:
        return new
    if new.producer_epoch > old.producer_epoch:
        last = old.producer_epoch if new.state is TxnState.EMPTY else NO_PRODUCER_EPOCH
        return replace(new, last_producer_epoch=last)
    return replace(new, last_producer_epoch=old.last_producer_epoch)
