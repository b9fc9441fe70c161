"""Records of the ``__transaction_state`` topic, byte-compatible with Apache Kafka.

* key: int16 record type 0 (TransactionLogKey) + ``TransactionalId`` (int16-length string);
* value: int16 version + TransactionLogValue. Version 0 (what Kafka writes before
  transaction version 2, and what hightide writes): ProducerId int64, ProducerEpoch
  int16, TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions
  (nullable array of {Topic, PartitionIds}; null in Empty), TransactionLastUpdateTimestampMs
  int64, TransactionStartTimestampMs int64. Version 1 is flexible and adds the tagged
  fields PreviousProducerId (0), NextProducerId (1) and ClientTransactionVersion (2);
  both versions decode.
* a null value is a tombstone: the transactional id expired.

The codecs are generated from Kafka's record definitions (:mod:`.records_gen`); this
module maps a TransactionLogValue to and from :class:`~.state.TxnMetadata`.
Transactional ids map to partitions with Kafka's
``Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions``.
"""

from __future__ import annotations

from ..group.records import java_abs, java_string_hash
from ..protocol.coordinator_codec import RecordFormatError
from . import records_gen as G
from .state import TxnMetadata, TxnState

STATE_TOPIC = "__transaction_state"

TxnRecordError = RecordFormatError
"""A key or value that is not a valid ``__transaction_state`` record."""


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (Kafka's placement)."""
    return java_abs(java_string_hash(transactional_id)) % num_partitions


def encode_key(transactional_id: str) -> bytes:
    return G.encode_key(G.TransactionLogKey(transactional_id))


def encode_value(meta: TxnMetadata | None) -> bytes | None:
    """TransactionLogValue v0 (None for a tombstone); partitions null in Empty, grouped by
    topic in sorted order otherwise."""
    if meta is None:
        return None
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if meta.state is not TxnState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for t, p in meta.sorted_partitions():
            by_topic.setdefault(t, []).append(p)
        partitions = tuple((t, tuple(ps)) for t, ps in by_topic.items())
    # (v0 has no tagged fields: previous/next producer id and client version are not written)
    return G.encode_transaction_log_value(tuple.__new__(G.TransactionLogValue, (
        meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state.value, partitions, meta.update_ms,
        meta.start_ms, meta.prev_producer_id, meta.next_producer_id, meta.client_transaction_version)))


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key type hightide does not know. Raises
    TxnRecordError."""
    key = G.decode_key(data)
    return None if key is None else key.transactional_id


def decode_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    """The metadata a value holds (None for a tombstone). Raises TxnRecordError."""
    if data is None:
        return None
    v = G.decode_transaction_log_value(data)
    try:
        state = TxnState(v.transaction_status)
    except ValueError as exc:
        raise TxnRecordError(str(exc)) from None
    partitions = frozenset((t, p) for t, ps in v.transaction_partitions or () for p in ps)
    return TxnMetadata(transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state, partitions,
                       v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms,
                       prev_producer_id=v.previous_producer_id, next_producer_id=v.next_producer_id,
                       client_transaction_version=v.client_transaction_version)
