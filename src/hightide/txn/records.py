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

Transactional ids map to partitions with Kafka's
``Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions``.
"""

from __future__ import annotations

import struct

from ..group.records import java_abs, java_string_hash
from .state import NO_PRODUCER_ID, TxnMetadata, TxnState

STATE_TOPIC = "__transaction_state"
KEY_TYPE = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class TxnRecordError(ValueError):
    """A key or value that is not a valid ``__transaction_state`` record."""


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (Kafka's placement)."""
    return java_abs(java_string_hash(transactional_id)) % num_partitions


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(KEY_TYPE) + _I16.pack(len(data)) + data


def encode_value(meta: TxnMetadata | None) -> bytes | None:
    """TransactionLogValue v0 (None for a tombstone); partitions null in Empty."""
    if meta is None:
        return None
    out = bytearray(_I16.pack(0))
    out += _I64.pack(meta.producer_id) + _I16.pack(meta.producer_epoch) + _I32.pack(meta.timeout_ms)
    out += _I8.pack(meta.state.value)
    if meta.state is TxnState.EMPTY:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p in meta.sorted_partitions():
            by_topic.setdefault(t, []).append(p)
        out += _I32.pack(len(by_topic))
        for t, parts in by_topic.items():
            name = t.encode()
            out += _I16.pack(len(name)) + name + _I32.pack(len(parts))
            for p in parts:
                out += _I32.pack(p)
    out += _I64.pack(meta.update_ms) + _I64.pack(meta.start_ms)
    return bytes(out)


class _R:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def fixed(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise TxnRecordError("record truncated")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(v)

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise TxnRecordError("record truncated")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise TxnRecordError("record truncated")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.fixed(_I16)
        if n < 0:
            raise TxnRecordError("null string")
        return self.raw(n).decode()

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.fixed(_I32)

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key type hightide does not know."""
    r = _R(data)
    if r.fixed(_I16) != KEY_TYPE:
        return None
    return r.string(False)


def decode_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    """The metadata a value holds (None for a tombstone). Raises TxnRecordError."""
    if data is None:
        return None
    r = _R(data)
    version = r.fixed(_I16)
    if version not in (0, 1):
        raise TxnRecordError(f"unknown TransactionLogValue version {version}")
    flex = version >= 1
    pid, epoch, timeout = r.fixed(_I64), r.fixed(_I16), r.fixed(_I32)
    try:
        state = TxnState(r.fixed(_I8))
    except ValueError as exc:
        raise TxnRecordError(str(exc)) from exc
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(r.array_len(flex), 0)):
        topic = r.string(flex)
        for _ in range(max(r.array_len(flex), 0)):
            partitions.add((topic, r.fixed(_I32)))
        if flex:
            r.tags()
    update_ms, start_ms = r.fixed(_I64), r.fixed(_I64)
    tags = r.tags() if flex else {}
    return TxnMetadata(
        transactional_id, pid, epoch, timeout, state, frozenset(partitions), start_ms, update_ms,
        prev_producer_id=_I64.unpack(tags[0])[0] if 0 in tags else NO_PRODUCER_ID,
        next_producer_id=_I64.unpack(tags[1])[0] if 1 in tags else NO_PRODUCER_ID,
        client_transaction_version=_I16.unpack(tags[2])[0] if 2 in tags else 0)
