"""The log's side of Kafka transactions (sans-IO): control records and the verifier seam.

Theory of operation
-------------------
A transactional producer writes batches with the *transactional* attribute bit; they
belong to the producer's open transaction in that partition, which starts at the first
such batch (:class:`~.producer_state.ProducerEntry.current_txn_first_offset`). The
transaction coordinator ends it by having a **control batch** (a *marker*) appended to
the partition: attributes transactional + control, the producer's id and epoch, no
sequence, and one record whose key is ``int16 version (0), int16 type`` (0 = ABORT,
1 = COMMIT) and whose value is ``int16 version (0), int32 coordinator epoch`` — Kafka's
``EndTransactionMarker``. Consumers never see control records as messages.

* The **last stable offset** (LSO) of a partition is the first offset of its earliest
  open transaction, else the high watermark; ``read_committed`` consumers read only
  below it.
* Every ABORT marker adds an entry to the **aborted transactions index**
  (:mod:`.txn_index`): (producer id, first offset, last offset = the marker's offset,
  the LSO once this transaction is complete). A ``read_committed`` fetch returns the
  entries overlapping the fetched range and the client drops the aborted batches.

Who calls what
--------------
* Produce of a transactional batch (KIP-890 part 1): unless the partition already holds
  an open transaction of that producer id and epoch
  (:meth:`PartitionLog.has_ongoing_transaction`), the broker asks a
  :class:`TxnVerifier` whether the partition was added to the producer's ongoing
  transaction, and appends only on :data:`ErrorCode.none`.
* The transaction coordinator (WriteTxnMarkers) calls
  :meth:`PartitionLog.append_marker` for every partition of a completing transaction.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from typing import NamedTuple, Protocol

from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, decode_records

__all__ = [
    "ABORT",
    "COMMIT",
    "TxnVerifier",
    "NoTransactionCoordinator",
    "ControlMarker",
    "CompletedTxn",
    "marker_batch",
    "parse_marker",
    "verification_error_for_produce",
]

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class TxnVerifier(Protocol):
    """KIP-890 part 1: may a transactional batch be appended to this partition?

    Implemented by the transaction coordinator. Called on the event loop, once per
    (producer, partition) and transaction (not per batch: only when the partition has no
    open transaction of that producer id and epoch yet); must answer from memory without
    blocking. Returns, like Kafka's coordinator answering a verify-only AddPartitionsToTxn:

    * ``ErrorCode.none``: the transaction of ``transactional_id`` is ongoing with this
      producer id and epoch, and the partition was added to it;
    * ``ErrorCode.invalid_producer_id_mapping``: no such transactional id, or it maps to
      another producer id;
    * ``ErrorCode.producer_fenced``: the epoch is not the transaction's current epoch
      (the produce path answers INVALID_PRODUCER_EPOCH for it, as Kafka does);
    * ``ErrorCode.concurrent_transactions``: the transaction is completing (prepare
      commit/abort);
    * ``ErrorCode.invalid_txn_state``: the partition was not added to the transaction;
    * ``ErrorCode.coordinator_load_in_progress`` / ``not_coordinator`` /
      ``coordinator_not_available`` / ``network_exception``: cannot tell now (the produce
      path answers the retriable NOT_ENOUGH_REPLICAS, as Kafka does).

    When the answer must come from elsewhere (the coordinator is another broker), an
    awaitable of it instead: the produce path holds the partition until it resolves (as
    Kafka's ReplicaManager holds the produce for AddPartitionsToTxnManager) and then
    appends or refuses. It must resolve within a bound of its own and must not raise;
    the caller waits for it without cancelling it, so it may be shared between callers.
    """

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode | Awaitable[ErrorCode]: ...


class NoTransactionCoordinator:
    """The verifier of a broker without a transaction coordinator: no transactional id is
    known, so every verification answers INVALID_PRODUCER_ID_MAPPING, which is what
    Kafka's coordinator answers for a transactional id it has no state for."""

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode:
        """Always ``ErrorCode.invalid_producer_id_mapping`` (see the class docstring)."""
        return ErrorCode.invalid_producer_id_mapping


_RETRIABLE_VERIFY = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                               ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                               ErrorCode.not_coordinator})


def verification_error_for_produce(error: ErrorCode) -> tuple[ErrorCode, str]:
    """The (error, message) a Produce partition answers for a failed verification, as
    Kafka's ReplicaManager translates them: PRODUCER_FENCED becomes
    INVALID_PRODUCER_EPOCH (older clients do not know it in Produce), coordinator
    trouble becomes the retriable NOT_ENOUGH_REPLICAS, the rest stay as they are."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, "the producer epoch is not the transaction's current epoch"
    if error in _RETRIABLE_VERIFY:
        return (ErrorCode.not_enough_replicas,
                f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name}")
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    if error == ErrorCode.invalid_producer_id_mapping:
        return error, "the transactional id has no ongoing transaction with this producer id"
    return error, f"transaction verification failed: {error.name}"


class ControlMarker(NamedTuple):
    """A decoded end-transaction marker."""

    commit: bool
    coordinator_epoch: int


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker (Kafka's CompletedTxn): its first offset, the
    marker's offset, and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """One control batch (base offset 0, to be assigned by the log) holding Kafka's
    end-transaction marker record; see the module docstring for the layout."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value, (), timestamp_ms)], producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=-1, is_transactional=True, is_control=True)


def parse_marker(batch: bytes) -> ControlMarker | None:
    """The marker of a whole control batch (header included), None when its first
    record is not an end-transaction marker (an unknown control type or key version,
    which Kafka's readers skip too). Raises InvalidRecords when the batch is corrupt."""
    records = decode_records(batch)
    if not records or records[0].key is None or len(records[0].key) < 4:
        return None
    version, kind = _KEY.unpack_from(records[0].key)
    if version != 0 or kind not in (ABORT, COMMIT):
        return None
    value = records[0].value
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= 6 else -1
    return ControlMarker(kind == COMMIT, epoch)
