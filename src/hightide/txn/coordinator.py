"""The transaction coordinator shard of one ``__transaction_state`` partition (sans-IO),
Kafka's ``TransactionCoordinator`` + ``TransactionStateManager`` for the transactional ids
placed in that partition.

Shaped like the group shard: each request method validates against the current state
and returns a :class:`TxnResult` — the records to append (``(transactional_id,
TxnMetadata or None)``), the response, and the markers to write once the records are
committed — without touching state; :meth:`TxnShard.replay` is the only mutator, used
after an append and to load the partition at start-up. Time is an argument.

The runtime (``hightide.coordinator.transactions``) appends the records, replays them, and
only then answers; for a result carrying :class:`Markers` it writes the markers to the
transaction's partitions and then runs :meth:`TxnShard.complete` (the CompleteCommit /
CompleteAbort record). At start-up every transaction found in PrepareCommit /
PrepareAbort (:meth:`TxnShard.completing`) has its markers written again.

Error codes follow Kafka (TV1, the protocol of EndTxn ≤ v4): an unknown transactional id
or another producer id is INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED
(the handlers answer INVALID_PRODUCER_EPOCH to versions before KIP-588), a transaction
being completed CONCURRENT_TRANSACTIONS, an EndTxn that does not fit the state
INVALID_TXN_STATE, a timeout outside (0, ``transaction.max.timeout.ms``]
INVALID_TRANSACTION_TIMEOUT.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from .state import (
    COMPLETING,
    IDLE,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
    transition,
    with_replayed,
)

Record = tuple[str, "TxnMetadata | None"]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


@dataclass(frozen=True, slots=True)
class Markers:
    """Markers to write once the Prepare record is committed: a COMMIT (``commit``) or
    ABORT control batch of ``producer_id``/``producer_epoch`` to each of ``partitions``;
    then :meth:`TxnShard.complete`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int = 0


@dataclass(frozen=True, slots=True)
class InitResponse:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


#: InitProducerId's answer when a new producer id is needed and none was passed in: the
#: caller allocates one and runs the request again with it.
NEED_PRODUCER_ID = InitResponse(ErrorCode.none, -2, -2)


@dataclass
class TxnResult:
    records: list[Record] = field(default_factory=list)
    response: object = None
    markers: Markers | None = None


class TxnShard:
    """The transactional ids of one ``__transaction_state`` partition."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMetadata] = {}

    # -- reads ----------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TxnMetadata | None:
        """The committed metadata of a transactional id (None: unknown)."""
        return self.txns.get(transactional_id)

    def transactions(self, states: Iterable[TxnState] | None = None,
                     producer_ids: Iterable[int] | None = None,
                     min_duration_ms: int = -1, now_ms: int = 0) -> Iterator[TxnMetadata]:
        """Every transactional id (ListTransactions' filters: states, producer ids, and
        ongoing transactions running longer than ``min_duration_ms`` at ``now_ms``)."""
        st = set(states) if states else None
        pids = set(producer_ids) if producer_ids else None
        for meta in self.txns.values():
            if st is not None and meta.state not in st:
                continue
            if pids is not None and meta.producer_id not in pids:
                continue
            if min_duration_ms >= 0 and (meta.state is not TxnState.ONGOING or
                                         now_ms - meta.start_ms < min_duration_ms):
                continue
            yield meta

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890's check (AddPartitionsToTxn verifyOnly): is each partition in the
        producer's ongoing transaction? NONE if so, INVALID_TXN_STATE if not; every
        partition gets the producer's error (unknown id or mapping, an epoch other than
        the current one, a transaction being completed) instead when there is one."""
        parts = list(partitions)
        meta = self.txns.get(transactional_id)
        code = self._producer_error(meta, producer_id, producer_epoch, exact=True)
        if code is ErrorCode.none and meta is not None and meta.state in COMPLETING:
            code = ErrorCode.concurrent_transactions
        if code is not ErrorCode.none or meta is None:
            return {tp: code for tp in parts}
        ongoing = meta.state is TxnState.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in meta.partitions else ErrorCode.invalid_txn_state
                for tp in parts}

    def completing(self) -> list[Markers]:
        """The markers of every transaction whose outcome is decided (a Prepare state):
        to write (again) after a load."""
        return [self._markers(m, m.state is TxnState.PREPARE_COMMIT) for m in self.txns.values()
                if m.state in COMPLETING]

    def timed_out(self, now_ms: int) -> list[TxnMetadata]:
        """Ongoing transactions that began more than their timeout before ``now_ms``."""
        return [m for m in self.txns.values()
                if m.state is TxnState.ONGOING and m.start_ms + m.timeout_ms < now_ms]

    def next_deadline(self) -> int | None:
        """When the earliest ongoing transaction times out (None: none ongoing)."""
        return min((m.start_ms + m.timeout_ms for m in self.txns.values() if m.state is TxnState.ONGOING),
                   default=None)

    # -- requests (return records; never mutate) ----------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                         new_producer_id: int | None, now_ms: int) -> TxnResult:
        """InitProducerId with a transactional id. ``expected``: the (producer id, epoch)
        the client sends (KIP-360, v3+), None for (-1, -1). Response: an
        :class:`InitResponse`, or :data:`NEED_PRODUCER_ID` when a new producer id is
        needed (the id is new, or its epoch is exhausted) and ``new_producer_id`` is None.
        An ongoing transaction is aborted first (epoch bumped: the old producer is fenced)
        and the answer is CONCURRENT_TRANSACTIONS, so the client retries."""
        if not transactional_id:
            return TxnResult(response=InitResponse(ErrorCode.invalid_request))
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return TxnResult(response=InitResponse(ErrorCode.invalid_transaction_timeout))
        meta = self.txns.get(transactional_id)
        if meta is None:
            if new_producer_id is None:
                return TxnResult(response=NEED_PRODUCER_ID)
            new = TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, TxnState.EMPTY,
                              update_ms=now_ms)
            return self._result(new, InitResponse(ErrorCode.none, new_producer_id, 0))
        if meta.state in COMPLETING:
            return TxnResult(response=InitResponse(ErrorCode.concurrent_transactions))
        if expected is not None and not _valid_producer_id(meta, expected):
            return TxnResult(response=InitResponse(ErrorCode.producer_fenced))
        if meta.state is TxnState.ONGOING:
            return self._fence_and_abort(meta, now_ms, InitResponse(ErrorCode.concurrent_transactions))
        if meta.state not in IDLE:
            return TxnResult(response=InitResponse(ErrorCode.unknown_server_error))
        return self._bump(meta, timeout_ms, expected, new_producer_id, now_ms)

    def _bump(self, meta: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None,
              new_producer_id: int | None, now_ms: int) -> TxnResult:
        """Kafka's ``prepareIncrementProducerEpoch``: a retry (the client's epoch is the one
        before the last bump) gets the current id and epoch again; another epoch than the
        current is fenced; an exhausted epoch rotates to a new producer id."""
        if expected is not None and expected[1] != NO_PRODUCER_EPOCH and expected[1] != meta.producer_epoch:
            if expected == (meta.producer_id, meta.last_producer_epoch) or \
                    (expected[0] == meta.prev_producer_id and epoch_exhausted(expected[1])):
                return TxnResult(response=InitResponse(ErrorCode.none, meta.producer_id, meta.producer_epoch))
            return TxnResult(response=InitResponse(ErrorCode.producer_fenced))
        reset = dict(timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        if epoch_exhausted(meta.producer_epoch):
            if new_producer_id is None:
                return TxnResult(response=NEED_PRODUCER_ID)
            new = transition(meta, TxnState.EMPTY, now_ms, producer_id=new_producer_id, producer_epoch=0,
                             prev_producer_id=meta.producer_id, **reset)
        else:
            new = transition(meta, TxnState.EMPTY, now_ms, producer_epoch=meta.producer_epoch + 1, **reset)
        return self._result(new, InitResponse(ErrorCode.none, new.producer_id, new.producer_epoch))

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int) -> TxnResult:
        """AddPartitionsToTxn / AddOffsetsToTxn (the group's offsets partition). Response:
        the ErrorCode for every partition. Partitions already in the ongoing transaction
        write nothing; otherwise the transaction is Ongoing with them added (begun now if
        it was not ongoing)."""
        parts = frozenset(partitions)
        meta = self.txns.get(transactional_id)
        code = self._producer_error(meta, producer_id, producer_epoch, exact=True)
        if code is not ErrorCode.none or meta is None:
            return TxnResult(response=code)
        if meta.state in COMPLETING:
            return TxnResult(response=ErrorCode.concurrent_transactions)
        if meta.state is TxnState.ONGOING and parts <= meta.partitions:
            return TxnResult(response=ErrorCode.none)
        if meta.state is not TxnState.ONGOING and meta.state not in IDLE:
            return TxnResult(response=ErrorCode.invalid_txn_state)
        start = meta.start_ms if meta.state is TxnState.ONGOING else now_ms
        new = transition(meta, TxnState.ONGOING, now_ms, partitions=meta.partitions | parts, start_ms=start)
        return self._result(new, ErrorCode.none)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int) -> TxnResult:
        """EndTxn (TV1). Response: an ErrorCode. From Ongoing: PrepareCommit/PrepareAbort
        and the markers to write. A retry of a completed EndTxn with the same outcome is
        NONE; the same outcome still being written CONCURRENT_TRANSACTIONS; the other
        outcome, or no transaction (Empty), INVALID_TXN_STATE."""
        meta = self.txns.get(transactional_id)
        code = self._producer_error(meta, producer_id, producer_epoch, exact=True)
        if code is not ErrorCode.none or meta is None:
            return TxnResult(response=code)
        s = meta.state
        if s is TxnState.ONGOING:
            new = transition(meta, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now_ms)
            return TxnResult([(transactional_id, new)], ErrorCode.none, self._markers(new, commit))
        same = (s is TxnState.COMPLETE_COMMIT or s is TxnState.PREPARE_COMMIT) == commit
        if s in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return TxnResult(response=ErrorCode.none if same else ErrorCode.invalid_txn_state)
        if s in COMPLETING:
            return TxnResult(response=ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state)
        return TxnResult(response=ErrorCode.invalid_txn_state)

    def complete(self, markers: Markers, now_ms: int) -> TxnResult:
        """After ``markers`` are written: CompleteCommit/CompleteAbort (partitions
        cleared), if the transaction is still the one they were for; else nothing."""
        meta = self.txns.get(markers.transactional_id)
        want = TxnState.PREPARE_COMMIT if markers.commit else TxnState.PREPARE_ABORT
        if meta is None or meta.state is not want or \
                (meta.producer_id, meta.producer_epoch) != (markers.producer_id, markers.producer_epoch):
            return TxnResult()
        final = TxnState.COMPLETE_COMMIT if markers.commit else TxnState.COMPLETE_ABORT
        return self._result(transition(meta, final, now_ms, partitions=frozenset()), ErrorCode.none)

    def abort_timed_out(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        now_ms: int) -> TxnResult:
        """The coordinator aborts a transaction past its timeout (epoch bumped, so the
        producer is fenced); nothing if it is no longer that ongoing transaction."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is not TxnState.ONGOING or \
                (meta.producer_id, meta.producer_epoch) != (producer_id, producer_epoch):
            return TxnResult()
        return self._fence_and_abort(meta, now_ms, ErrorCode.none)

    def expire(self, now_ms: int) -> TxnResult:
        """Tombstones for transactional ids idle (Empty, CompleteCommit, CompleteAbort)
        longer than ``transactional.id.expiration.ms`` (through Dead)."""
        records: list[Record] = []
        for tid, meta in self.txns.items():
            if meta.state in IDLE and meta.update_ms + self.config.id_expiration_ms <= now_ms:
                transition(meta, TxnState.DEAD, now_ms)  # validates the move
                records.append((tid, None))
        return TxnResult(records, len(records))

    # -- the only mutator ----------------------------------------------------------------
    def replay(self, transactional_id: str, meta: TxnMetadata | None) -> None:
        if meta is None:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = with_replayed(self.txns.get(transactional_id), meta)

    # -- helpers -----------------------------------------------------------------------------
    def _producer_error(self, meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                        exact: bool = False) -> ErrorCode:
        """INVALID_PRODUCER_ID_MAPPING (unknown id, other producer id) or PRODUCER_FENCED
        (an older epoch; with ``exact`` any other epoch, as for client requests)."""
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch < meta.producer_epoch or (exact and producer_epoch != meta.producer_epoch):
            return ErrorCode.producer_fenced
        return ErrorCode.none

    def _fence_and_abort(self, meta: TxnMetadata, now_ms: int, response: object) -> TxnResult:
        """Ongoing → PrepareEpochFence (epoch + 1, unless at the maximum) → PrepareAbort;
        the PrepareAbort record and the ABORT markers with the bumped epoch."""
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else meta.producer_epoch
        fenced = transition(meta, TxnState.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=epoch)
        new = transition(fenced, TxnState.PREPARE_ABORT, now_ms)
        return TxnResult([(meta.transactional_id, new)], response, self._markers(new, False))

    @staticmethod
    def _markers(meta: TxnMetadata, commit: bool) -> Markers:
        return Markers(meta.transactional_id, meta.producer_id, meta.producer_epoch, commit,
                       tuple(meta.sorted_partitions()))

    @staticmethod
    def _result(new: TxnMetadata, response: object) -> TxnResult:
        return TxnResult([(new.transactional_id, replace(new, last_producer_epoch=NO_PRODUCER_EPOCH))], response)


def _valid_producer_id(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: the producer id a client sends must be the current one, or the previous
    one when its epoch was exhausted (the client missed the rotation's answer)."""
    pid, epoch = expected
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or pid == meta.producer_id or
            (pid == meta.prev_producer_id and epoch_exhausted(epoch)))
