"""The simulation's transactional consume-transform-produce loop (issue 28, item 2) and
its invariants (item 4): :class:`TxnProducer` speaks the real protocol through the
simulated network, :class:`TxnReader` reads its output with ``read_committed``, and
:class:`TxnLedger` (sans-IO) holds what they saw.

One transaction of :class:`TxnProducer` (transactional id ``tx0``), as Kafka's
``KafkaProducer`` with ``sendOffsetsToTransaction`` does it:

1. the group's committed offset of an input partition (OffsetFetch with
   ``require_stable``, so a pending transactional commit answers UNSTABLE_OFFSET_COMMIT
   and is retried), then up to 5 input records from there (Fetch);
2. AddPartitionsToTxn for one or two output partitions, a transactional Produce of one
   batch per output partition (its values ``b"tx0:<txn>:<partition>:<i>"``), with the
   producer id, epoch and per-partition sequence of this epoch;
3. AddOffsetsToTxn and TxnOffsetCommit of the input position past the records read;
4. EndTxn: commit (70%) or abort, a seeded choice.

Any error inside a transaction is handled as a Kafka client does with an abortable error
and then an epoch bump: EndTxn(abort) is tried once, then InitProducerId is sent again
(which fences the old epoch and completes whatever the coordinator still holds), and the
sequences start again at 0. An InitProducerId answered settles the earlier transaction:
aborted unless its EndTxn(commit) was sent without an answer (then *in doubt*: committed
or aborted, but all or nothing).

Invariants (:class:`TxnLedger`; each violation is an :class:`~.checker.Anomaly`):

- **read_committed never shows aborted or open data**: a record read with
  ``read_committed`` (the broker's LSO and aborted-transaction list, filtered as a Kafka
  consumer filters: :class:`~hightide.protocol.aborted.AbortedFilter`) belongs to a
  transaction whose EndTxn(commit) was sent;
- **a committed transaction's records are all visible**: an acknowledged commit's batch,
  at the offsets its Produce was acknowledged at, is read in full once the LSO passes it;
- **atomicity**: a transaction (in doubt included) is visible in all its output
  partitions or in none;
- **transaction outcomes are not lost**: the group's committed offset (OffsetFetch) is
  never below the offset of an acknowledged committed transaction, and is always the
  offset of a transaction that was committed or is in doubt (never one only an aborted
  transaction wrote);
- at the end (:meth:`TxnProducer.final_check`): every acknowledged commit is visible in
  full, within the liveness bound.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..client.errors import KafkaError, error_for
from ..client.transactions import _coordinator_request, add_partitions_to_txn, end_txn, init_transactional_producer
from ..client.types import TopicPartition
from ..protocol.aborted import AbortedFilter
from ..protocol.records import build_batch, decode_records, iter_headers
from .checker import TP, Anomaly
from .clients import CALL_TIMEOUT_S, _Client

__all__ = ["TxnLedger", "TxnProducer", "TxnReader", "read_committed"]

TXN_ID = "tx0"
TXN_GROUP = "gtx"
#: The transaction timeout InitProducerId asks for (the coordinator aborts a transaction
#: open longer than this; the final check waits within the liveness bound for it).
TXN_TIMEOUT_MS = 10_000
COMMIT_P = 0.7
TXN_COORDINATOR = 1  # FindCoordinator key type


@dataclass
class _Txn:
    number: int
    values: dict[TP, list[bytes]]
    #: (group, input partition, offset) its TxnOffsetCommit commits
    commit: tuple[str, TP, int]
    offsets: dict[TP, int] = field(default_factory=dict)  # acknowledged base offsets
    #: open, committing, aborting (EndTxn sent), committed, aborted (acknowledged or
    #: settled by a new InitProducerId), in-doubt (EndTxn(commit) sent, never answered)
    state: str = "open"
    visible: dict[TP, bool] = field(default_factory=dict)  # decided per partition


class TxnLedger:
    """See the module doc. Sans-IO: told what the clients did and saw."""

    def __init__(self) -> None:
        self.txns: dict[int, _Txn] = {}
        self.counts: dict[str, int] = {"txns committed": 0, "txns aborted": 0, "txns in doubt": 0}

    # --- the producer's side -----------------------------------------------------------
    def begin(self, number: int, values: dict[TP, list[bytes]], commit: tuple[str, TP, int]) -> None:
        self.txns[number] = _Txn(number, values, commit)

    def produced(self, number: int, offsets: dict[TP, int]) -> None:
        self.txns[number].offsets.update(offsets)

    def ending(self, number: int, commit: bool) -> None:
        txn = self.txns[number]
        if txn.state in ("open", "aborting"):
            txn.state = "committing" if commit else "aborting"

    def ended(self, number: int, commit: bool) -> None:
        txn = self.txns[number]
        if txn.state not in ("committing", "aborting") or (txn.state == "committing") != commit:
            raise Anomaly(f"transaction {number}: EndTxn({'commit' if commit else 'abort'}) answered in state "
                          f"{txn.state}")
        self._settle(txn, "committed" if commit else "aborted")

    def reinitialized(self) -> None:
        """InitProducerId was answered: every unsettled transaction is settled now."""
        for txn in self.txns.values():
            if txn.state in ("open", "aborting"):
                self._settle(txn, "aborted")
            elif txn.state == "committing":
                self._settle(txn, "in-doubt")

    def _settle(self, txn: _Txn, state: str) -> None:
        txn.state = state
        self.counts[{"committed": "txns committed", "aborted": "txns aborted", "in-doubt": "txns in doubt"}[state]] += 1

    # --- offsets -------------------------------------------------------------------------
    def commit_floor(self, group: str, tp: TP) -> int:
        """The highest offset an acknowledged committed transaction committed for ``tp``."""
        return max((t.commit[2] for t in self.txns.values()
                    if t.state == "committed" and t.commit[:2] == (group, tp)), default=-1)

    def fetched_offset(self, group: str, tp: TP, offset: int, *, floor: int) -> None:
        """OffsetFetch answered ``offset`` (-1: none); ``floor`` is :meth:`commit_floor`
        from before it was sent."""
        if offset < floor:
            raise Anomaly(f"group {group} {_tp(tp)}: offset fetch answered {offset} after the transaction that "
                          f"committed {floor} was acknowledged")
        if offset < 0:
            return
        writers = [t for t in self.txns.values() if t.commit == (group, tp, offset)]
        if writers and all(t.state == "aborted" for t in writers):
            raise Anomaly(f"group {group} {_tp(tp)}: offset fetch answered {offset}, committed only by aborted "
                          f"transaction(s) {[t.number for t in writers]}")
        if not writers:
            raise Anomaly(f"group {group} {_tp(tp)}: offset fetch answered {offset}, which no transaction committed")

    # --- reads ---------------------------------------------------------------------------
    def committed_snapshot(self) -> list[int]:
        """The acknowledged committed transactions now (before a read is sent)."""
        return [n for n, t in self.txns.items() if t.state == "committed"]

    def read_committed(self, tp: TP, records: list[tuple[int, bytes]], lso: int, snapshot: list[int]) -> None:
        """A read_committed read of ``tp`` from offset 0 up to ``lso`` found ``records``
        ((offset, value), aborted data filtered out, control records skipped)."""
        self.counts["read_committed reads"] = self.counts.get("read_committed reads", 0) + 1
        seen: dict[int, dict[int, bytes]] = {}
        for offset, value in records:
            number = _txn_of(value)
            if number is None or number not in self.txns:
                raise Anomaly(f"{_tp(tp)} offset {offset}: read_committed shows {value!r}, which no transaction wrote")
            txn = self.txns[number]
            if txn.state not in ("committing", "committed", "in-doubt"):
                raise Anomaly(f"{_tp(tp)} offset {offset}: read_committed shows {value!r} of transaction {number} "
                              f"({txn.state}: its commit was never sent)")
            seen.setdefault(number, {})[offset] = value
        for number in snapshot:
            txn = self.txns[number]
            base = txn.offsets.get(tp)
            if base is None:
                continue
            want = txn.values[tp]
            if base + len(want) <= lso:
                got = [seen.get(number, {}).get(base + i) for i in range(len(want))]
                if got != want:
                    raise Anomaly(f"{_tp(tp)}: committed transaction {number} wrote {want} at offset {base}, "
                                  f"read_committed below the LSO {lso} shows {got}")
        for number, txn in self.txns.items():
            if tp not in txn.values:
                continue
            if number in seen:
                self._visible(txn, tp, True)
            elif tp in txn.offsets and txn.offsets[tp] + len(txn.values[tp]) <= lso and txn.state in (
                    "committed", "aborted", "in-doubt"):
                self._visible(txn, tp, False)

    def _visible(self, txn: _Txn, tp: TP, visible: bool) -> None:
        before = txn.visible.get(tp)
        if before is not None and before != visible:
            raise Anomaly(f"transaction {txn.number} was {'' if before else 'in'}visible in {_tp(tp)}, now "
                          f"{'' if visible else 'in'}visible")
        txn.visible[tp] = visible
        if visible in txn.visible.values() and (not visible) in txn.visible.values():
            raise Anomaly(f"transaction {txn.number} ({txn.state}) is visible in some of its partitions only: "
                          + ", ".join(f"{_tp(p)}={v}" for p, v in sorted(txn.visible.items())))

    def unseen_commits(self) -> list[tuple[int, TP]]:
        """Acknowledged committed transactions not yet seen in full, per partition."""
        return [(n, tp) for n, t in sorted(self.txns.items()) if t.state == "committed"
                for tp in t.values if tp in t.offsets and t.visible.get(tp) is not True]


def _txn_of(value: bytes) -> int | None:
    parts = value.split(b":")
    if len(parts) != 4 or parts[0] != TXN_ID.encode() or not parts[1].isdigit():
        return None
    return int(parts[1])


def _tp(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


async def read_committed(admin: Any, tp: TopicPartition) -> tuple[list[tuple[int, bytes]], int]:
    """Every record of ``tp`` a read_committed consumer gets from offset 0 to the LSO
    (Kafka's filtering of aborted transactions), and that LSO."""
    out: list[tuple[int, bytes]] = []
    offset, lso = 0, None
    while True:
        got = await admin.fetch(tp, offset, max_wait_ms=0, isolation_level="read_committed")
        if lso is None:
            lso = got.last_stable_offset
        data = bytes(got.records)
        flt = AbortedFilter(got.aborted)
        before = offset
        for h in iter_headers(data):
            if h.base_offset >= lso:
                break
            if not h.is_control and not flt.aborted(h):
                out.extend((r.offset, r.value or b"") for r in decode_records(data[h.position:h.position + h.size])
                           if offset <= r.offset < lso)
            elif h.is_control:
                flt.aborted(h)
            offset = max(offset, h.next_offset)
        if offset >= lso or offset == before:
            return out, lso


class TxnProducer(_Client):
    """See the module doc. ``ledger`` keeps what it did; ``source``: the input topic and
    its partition count; ``sink``: the output topic and its partition count."""

    def __init__(self, *args: Any, ledger: TxnLedger, source: tuple[str, int], sink: tuple[str, int],
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ledger, self.source, self.sink = ledger, source, sink
        self.pid: tuple[int, int] | None = None
        self.seqs: dict[int, int] = {}
        self.number = 0
        self.current: int | None = None

    async def run(self) -> None:
        while True:
            try:
                admin = await self._connected()
                if self.pid is None:
                    self.pid = await init_transactional_producer(admin, TXN_ID, TXN_TIMEOUT_MS)
                    self.seqs = {}
                    self.ledger.reinitialized()
                    self.current = None
                    self.trace(f"{self.name} producer id {self.pid[0]} epoch {self.pid[1]}")
                await self._one(admin)
                await asyncio.sleep(self.rng.uniform(0.0, 0.1))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._abandon(exc)

    async def _one(self, admin: Any) -> None:
        assert self.pid is not None
        pid, epoch = self.pid
        src = TopicPartition(self.source[0], self.rng.randrange(self.source[1]))
        key = (src.topic, src.partition)
        floor = self.ledger.commit_floor(TXN_GROUP, key)
        got = await admin.list_consumer_group_offsets(TXN_GROUP, [src], require_stable=True)
        start = got[src].offset
        self.ledger.fetched_offset(TXN_GROUP, key, start, floor=floor)
        start = max(start, 0)
        fetched = await admin.fetch(src, start, max_wait_ms=0, max_bytes=4096)
        inputs = [r.offset for h in iter_headers(bytes(fetched.records)) if not h.is_control
                  for r in decode_records(bytes(fetched.records)[h.position:h.position + h.size])
                  if start <= r.offset < fetched.high_watermark][:5]
        if not inputs:
            await asyncio.sleep(0.2)
            return
        self.number += 1
        number = self.number
        parts = self.rng.sample(range(self.sink[1]), self.rng.choice((1, 2)))
        values = {(self.sink[0], q): [f"{TXN_ID}:{number}:{q}:{i}".encode() for i in range(len(inputs))]
                  for q in sorted(parts)}
        position = inputs[-1] + 1
        self.ledger.begin(number, values, (TXN_GROUP, key, position))
        self.current = number
        outs = [TopicPartition(*tp) for tp in values]
        await add_partitions_to_txn(admin, TXN_ID, pid, epoch, outs)
        batches = {}
        for tp in outs:
            batches[tp] = build_batch([(None, v, [], 0) for v in values[(tp.topic, tp.partition)]], producer_id=pid,
                                      producer_epoch=epoch, base_sequence=self.seqs.get(tp.partition, 0),
                                      is_transactional=True)
        offsets = await admin.produce(batches, acks=-1, timeout_ms=int(CALL_TIMEOUT_S * 1000), transactional_id=TXN_ID)
        for tp in outs:
            self.seqs[tp.partition] = self.seqs.get(tp.partition, 0) + len(inputs)
        self.ledger.produced(number, {(tp.topic, tp.partition): o for tp, o in offsets.items()})
        await _coordinator_request(admin, TXN_ID, 25, 3, 0, {"transactional_id": TXN_ID, "producer_id": pid,
                                                             "producer_epoch": epoch, "group_id": TXN_GROUP},
                                   "AddOffsetsToTxn")
        await self._txn_offset_commit(admin, pid, epoch, src, position)
        commit = self.rng.random() < COMMIT_P
        self.ledger.ending(number, commit)
        await end_txn(admin, TXN_ID, pid, epoch, commit)
        self.ledger.ended(number, commit)
        self.current = None
        self.trace(f"{self.name} {'committed' if commit else 'aborted'} transaction {number}: "
                   + ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(self.ledger.txns[number].offsets.items()))
                   + f", {TXN_GROUP} {_tp(key)}={position}")
        if commit:
            self.progress_at = self.now()

    async def _txn_offset_commit(self, admin: Any, pid: int, epoch: int, tp: TopicPartition, offset: int) -> None:
        async def commit(conn: Any) -> None:
            v = conn.pick_version(28, 3, 0)
            resp = await conn.request(28, v, {
                "transactional_id": TXN_ID, "group_id": TXN_GROUP, "producer_id": pid, "producer_epoch": epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": tp.topic, "partitions": [{
                    "partition_index": tp.partition, "committed_offset": offset, "committed_leader_epoch": -1,
                    "committed_metadata": ""}]}]})
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code, f"TxnOffsetCommit {t.name}-{p.partition_index}")
        await admin._coordinator_call(TXN_GROUP, commit)

    async def _abandon(self, exc: BaseException) -> None:
        """An error inside a transaction: EndTxn(abort) once (if the transaction's commit
        was not sent), then a new InitProducerId (an epoch bump) next round."""
        self.trace(f"{self.name} transaction {self.current} failed: {exc}")
        number, pid = self.current, self.pid
        if number is not None and pid is not None and self.ledger.txns[number].state == "open":
            self.ledger.ending(number, False)
            try:
                admin = await self._connected()
                await end_txn(admin, TXN_ID, pid[0], pid[1], False)
                self.ledger.ended(number, False)
            except (KafkaError, OSError, TimeoutError):
                pass
        self.pid = None
        await self._failed(exc)

    async def final_check(self, reader: TxnReader, deadline: float) -> None:
        """After the faults: settle the last transaction (a new InitProducerId), then every
        acknowledged commit must be visible in full within ``deadline``."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                admin = await self._connected()
                await init_transactional_producer(admin, TXN_ID, TXN_TIMEOUT_MS)
                self.ledger.reinitialized()
                break
            except (KafkaError, OSError, TimeoutError) as exc:
                if loop.time() > deadline:
                    raise Anomaly(f"{self.name}: InitProducerId failed after the faults: {exc}") from exc
                await self._failed(exc)
        for part in range(self.sink[1]):
            await reader.read_until_seen(part, deadline)


class TxnReader(_Client):
    """Reads the transactional output with read_committed (see the module doc)."""

    def __init__(self, *args: Any, ledger: TxnLedger, sink: tuple[str, int], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ledger, self.sink = ledger, sink

    async def read(self, part: int) -> None:
        admin = await self._connected()
        snapshot = self.ledger.committed_snapshot()
        tp = TopicPartition(self.sink[0], part)
        records, lso = await read_committed(admin, tp)
        self.ledger.read_committed((tp.topic, part), records, lso, snapshot)

    async def run(self) -> None:
        while True:
            try:
                await self.read(self.rng.randrange(self.sink[1]))
                self.progress_at = self.now()
                await asyncio.sleep(self.rng.uniform(0.2, 0.6))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._failed(exc)

    async def read_until_seen(self, part: int, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.read(part)
                missing = [n for n, tp in self.ledger.unseen_commits() if tp[1] == part]
                if not missing:
                    return
                err = f"committed transactions {missing[:10]} not visible"
            except (KafkaError, OSError, TimeoutError) as exc:
                err = f"read failed: {exc}"
                await self._failed(exc)
            if loop.time() > deadline:
                raise Anomaly(f"{self.sink[0]}-{part}: {err} (read_committed, after the faults)")
            await asyncio.sleep(0.5)
