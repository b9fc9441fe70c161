"""Transaction tooling on :class:`hightide.client.AdminClient` (Kafka's KIP-664 admin calls,
what ``kafka-transactions.sh`` uses): ListTransactions (66) on every broker,
DescribeTransactions (65) at each id's transaction coordinator, DescribeProducers (61) at
each partition's leader, aborting an open transaction with WriteTxnMarkers (27) at the
partition's leader, and :func:`find_hanging` (Kafka's ``FindHangingTransactionsCommand``).

Works against hightide and any Kafka cluster (3.0+; the duration filter needs 3.8+, the
id pattern 4.1+). Every function raises :class:`~hightide.client.errors.KafkaError`.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ErrorCode, KafkaError, error_for
from .types import TopicPartition

if TYPE_CHECKING:
    from .admin import AdminClient

__all__ = ["HangingTransaction", "ProducerInfo", "TransactionDescription", "TransactionListing",
           "abort_transaction", "add_partitions_to_txn", "describe_producers", "describe_transactions", "end_txn",
           "find_hanging", "init_transactional_producer", "list_transactions"]

TRANSACTION_KEY = 1  # FindCoordinator key type of transactional ids


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction running
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One active producer of a partition (DescribeProducers). -1: none/unknown."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """An open transaction in a partition that its coordinator does not complete."""
    partition: TopicPartition
    producer: ProducerInfo


def _ms(v: Any) -> int:
    """A kio duration/timestamp field as milliseconds (-1 for None)."""
    if v is None:
        return -1
    if hasattr(v, "total_seconds"):
        return int(v.total_seconds() * 1000)
    if hasattr(v, "timestamp"):
        return round(v.timestamp() * 1000)
    return int(v)


# -- ListTransactions ---------------------------------------------------------------------------
async def list_transactions(admin: AdminClient, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                            min_duration_ms: int = -1, broker_ids: Iterable[int] | None = None
                            ) -> list[TransactionListing]:
    """Every transaction of the cluster: ListTransactions on each broker (each coordinates
    some ``__transaction_state`` partitions), filtered by Kafka's state names, producer
    ids and, if ``min_duration_ms >= 0``, running longer than that (ListTransactions v1)."""
    md = await admin.metadata(topics=[])
    ids = list(broker_ids) if broker_ids is not None else sorted(md.brokers)
    body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
            "duration_filter": min_duration_ms}
    parts = await asyncio.gather(*(_list_on(admin, b, body) for b in ids))
    return sorted((x for p in parts for x in p), key=lambda x: x.transactional_id)


async def _list_on(admin: AdminClient, broker_id: int, body: dict[str, Any]) -> list[TransactionListing]:
    async def attempt() -> list[TransactionListing]:
        conn = await admin._conn_for_node(broker_id)
        if body["duration_filter"] >= 0 and (not conn.supports(66) or conn.api_versions[66][1] < 1):
            raise KafkaError(ErrorCode.unsupported_version,
                             f"broker {broker_id} has no duration filter (ListTransactions v1, Kafka 3.8+)")
        resp = await conn.request(66, conn.pick_version(66, 1, 0), body)
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, f"ListTransactions on broker {broker_id}")
        return [TransactionListing(t.transactional_id, broker_id, int(t.producer_id), t.transaction_state)
                for t in resp.transaction_states]
    result: list[TransactionListing] = await admin._with_retries(attempt)
    return result


# -- DescribeTransactions -----------------------------------------------------------------------
async def describe_transactions(admin: AdminClient, transactional_ids: Iterable[str]
                                ) -> dict[str, TransactionDescription | KafkaError]:
    """Each id's state at its coordinator (TRANSACTIONAL_ID_NOT_FOUND as an error value)."""
    ids = list(dict.fromkeys(transactional_ids))
    coords = await admin.find_coordinators(ids, TRANSACTION_KEY)
    by_node: defaultdict[int, list[str]] = defaultdict(list)
    for tid in ids:
        by_node[coords[tid].node_id].append(tid)
    out: dict[str, TransactionDescription | KafkaError] = {}
    for node, tids in by_node.items():
        out.update(await _describe_on(admin, node, tids))
    return out


async def _describe_on(admin: AdminClient, node: int, tids: list[str]
                       ) -> dict[str, TransactionDescription | KafkaError]:
    async def attempt() -> Any:
        conn = await admin._conn_for_node(node)
        return await conn.request(65, conn.pick_version(65, 0, 0), {"transactional_ids": tids})
    resp = await admin._with_retries(attempt)
    out: dict[str, TransactionDescription | KafkaError] = {}
    for s in resp.transaction_states:
        if s.error_code != ErrorCode.none:
            out[s.transactional_id] = error_for(s.error_code, f"transactional id {s.transactional_id!r}")
            continue
        parts = tuple(TopicPartition(t.topic, int(p)) for t in s.topics for p in t.partitions)
        out[s.transactional_id] = TransactionDescription(
            s.transactional_id, node, int(s.producer_id), int(s.producer_epoch), s.transaction_state,
            _ms(s.transaction_timeout), _ms(s.transaction_start_time), parts)
    return out


# -- DescribeProducers --------------------------------------------------------------------------
async def describe_producers(admin: AdminClient, partitions: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, list[ProducerInfo] | KafkaError]:
    """The active producers of each partition, asked of its leader."""
    tps = list(dict.fromkeys(partitions))
    md = await admin.metadata(topics=sorted({tp.topic for tp in tps}))
    out: dict[TopicPartition, list[ProducerInfo] | KafkaError] = {}
    by_leader: defaultdict[int, list[TopicPartition]] = defaultdict(list)
    for tp in tps:
        leader = md.leader_for(tp)
        if leader < 0:
            out[tp] = KafkaError(ErrorCode.unknown_topic_or_partition, f"{tp.topic}-{tp.partition}: no leader known")
        else:
            by_leader[leader].append(tp)
    for leader, group in by_leader.items():
        out.update(await _producers_on(admin, leader, group))
    return out


async def _producers_on(admin: AdminClient, node: int, tps: list[TopicPartition]
                        ) -> dict[TopicPartition, list[ProducerInfo] | KafkaError]:
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for tp in tps:
        by_topic[tp.topic].append(tp.partition)

    async def attempt() -> Any:
        conn = await admin._conn_for_node(node)
        return await conn.request(61, conn.pick_version(61, 0, 0), {"topics": [
            {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
    resp = await admin._with_retries(attempt)
    out: dict[TopicPartition, list[ProducerInfo] | KafkaError] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if p.error_code != ErrorCode.none:
                out[tp] = error_for(p.error_code, p.error_message or f"{tp.topic}-{tp.partition}")
                continue
            out[tp] = [ProducerInfo(int(x.producer_id), int(x.producer_epoch), int(x.last_sequence),
                                    int(x.last_timestamp), int(x.coordinator_epoch),
                                    int(x.current_txn_start_offset)) for x in p.active_producers]
    return out


# -- abort ----------------------------------------------------------------------------------------
async def abort_transaction(admin: AdminClient, tp: TopicPartition, producer_id: int, producer_epoch: int,
                            coordinator_epoch: int) -> None:
    """Write an ABORT marker of the producer to ``tp`` with WriteTxnMarkers at its leader,
    as Kafka's ``Admin.abortTransaction`` does. Raises the partition's error
    (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...)."""
    md = await admin.metadata(topics=[tp.topic])
    leader = md.leader_for(tp)
    if leader < 0:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{tp.topic}-{tp.partition}: no leader known")

    async def attempt() -> Any:
        conn = await admin._conn_for_node(leader)
        return await conn.request(27, conn.pick_version(27, 1, 1), {"markers": [
            {"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
             "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
             "coordinator_epoch": max(coordinator_epoch, 0)}]})
    resp = await admin._with_retries(attempt)
    for m in resp.markers:
        for t in m.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise error_for(p.error_code, f"aborting the transaction of producer {producer_id} "
                                                  f"in {tp.topic}-{tp.partition}")


async def abort_at_offset(admin: AdminClient, tp: TopicPartition, start_offset: int) -> ProducerInfo:
    """Abort the open transaction that starts at ``start_offset`` in ``tp`` (its producer
    found with DescribeProducers). Returns that producer. Raises KafkaError, ValueError if
    no open transaction starts there."""
    found = (await describe_producers(admin, [tp]))[tp]
    if isinstance(found, KafkaError):
        raise found
    match = [p for p in found if p.current_txn_start_offset == start_offset]
    if not match:
        raise ValueError(f"no open transaction starts at offset {start_offset} in {tp.topic}-{tp.partition}")
    p = match[0]
    await abort_transaction(admin, tp, p.producer_id, p.producer_epoch, p.coordinator_epoch)
    return p


# -- find hanging -----------------------------------------------------------------------------------
async def partitions_to_search(admin: AdminClient, *, broker_id: int | None = None, topic: str | None = None,
                               partition: int | None = None) -> list[TopicPartition]:
    """The partitions find-hanging looks at: one partition, a topic's, or every partition
    with a replica on ``broker_id``."""
    md = await admin.metadata(topics=[topic] if topic else None)
    out = []
    for t in md.topics.values():
        if t.error != ErrorCode.none:
            raise error_for(t.error, f"topic {t.name!r}")
        for p in t.partitions.values():
            if partition is not None and p.partition != partition:
                continue
            if broker_id is not None and broker_id not in (p.replicas or (p.leader,)):
                continue
            out.append(TopicPartition(t.name, p.partition))
    return sorted(out)


async def find_hanging(admin: AdminClient, partitions: list[TopicPartition], max_transaction_timeout_ms: int,
                       now_ms: int | None = None) -> list[HangingTransaction]:
    """Kafka's find-hanging: the open transactions of ``partitions`` whose producer wrote
    nothing for longer than ``max_transaction_timeout_ms`` (candidates), kept when the
    coordinator does not know the producer id, knows it under another epoch, is not
    running a transaction including the partition, or holds it in a final state (a
    transaction being prepared is not hanging: its markers are on the way)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    found = await describe_producers(admin, partitions)
    candidates = [HangingTransaction(tp, p) for tp, ps in found.items() if not isinstance(ps, KafkaError)
                  for p in ps if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_transaction_timeout_ms]
    if not candidates:
        return []
    pids = sorted({c.producer.producer_id for c in candidates})
    listed = await list_transactions(admin, producer_ids=pids)
    tid_of = {t.producer_id: t.transactional_id for t in listed}
    described = await describe_transactions(admin, tid_of.values()) if tid_of else {}
    return [c for c in candidates if _hanging(c, described.get(tid_of.get(c.producer.producer_id, "")))]


def _hanging(c: HangingTransaction, d: TransactionDescription | KafkaError | None) -> bool:
    if d is None or isinstance(d, KafkaError):
        return True  # no transactional id holds this producer id any more
    if d.state in ("PrepareCommit", "PrepareAbort", "PrepareEpochFence"):
        return False  # decided: the coordinator is writing its markers
    if d.producer_id != c.producer.producer_id or d.producer_epoch != c.producer.producer_epoch:
        return True
    return d.state != "Ongoing" or c.partition not in d.partitions


# -- a transactional producer's calls (the Spark sink's per-task transactions) ---------------------
async def _coordinator_request(admin: AdminClient, transactional_id: str, api_key: int, wanted_max: int,
                               our_min: int, body: dict[str, Any], what: str) -> Any:
    """Send ``body`` to the id's transaction coordinator; retry retriable errors (the
    top-level ``error_code``, if any) and coordinator moves. Returns the response."""
    async def attempt() -> Any:
        coord = await admin.find_coordinator(transactional_id, TRANSACTION_KEY)
        try:
            conn = await admin._conn_for_node(coord.node_id)
            resp = await conn.request(api_key, conn.pick_version(api_key, wanted_max, our_min), body)
        except KafkaError:
            admin._forget_coordinator(transactional_id, TRANSACTION_KEY)
            raise
        code = getattr(resp, "error_code", ErrorCode.none)
        if code != ErrorCode.none:
            if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                admin._forget_coordinator(transactional_id, TRANSACTION_KEY)
            raise error_for(code, f"{what} of {transactional_id!r}")
        return resp
    return await admin._with_retries(attempt)


async def init_transactional_producer(admin: AdminClient, transactional_id: str, timeout_ms: int = 60_000
                                      ) -> tuple[int, int]:
    """InitProducerId with a transactional id: ``(producer id, epoch)``. Bumps the epoch,
    so an earlier producer with the id is fenced and its open transaction aborted (the
    coordinator answers CONCURRENT_TRANSACTIONS until the abort is written: retried)."""
    resp = await _coordinator_request(admin, transactional_id, 22, 4, 0, {
        "transactional_id": transactional_id, "transaction_timeout": timeout_ms, "producer_id": -1,
        "producer_epoch": -1}, "InitProducerId")
    return int(resp.producer_id), int(resp.producer_epoch)


async def add_partitions_to_txn(admin: AdminClient, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: Iterable[TopicPartition]) -> None:
    """AddPartitionsToTxn (v0-v3, a client's form). Raises the first partition error."""
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    body = {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
            "v3_and_below_producer_epoch": producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def attempt() -> None:
        resp = await _coordinator_request(admin, transactional_id, 24, 3, 0, body, "AddPartitionsToTxn")
        for t in resp.results_by_topic_v3_and_below:
            for p in t.results_by_partition:
                if p.partition_error_code != ErrorCode.none:
                    raise error_for(p.partition_error_code, f"AddPartitionsToTxn {t.name}-{p.partition_index}")
    await admin._with_retries(attempt)


async def end_txn(admin: AdminClient, transactional_id: str, producer_id: int, producer_epoch: int,
                  commit: bool) -> None:
    """EndTxn: commit or abort the producer's transaction (any process may send it for
    the id, producer id and epoch: the Spark driver commits its tasks' transactions).
    A retry of a completed EndTxn with the same outcome succeeds."""
    await _coordinator_request(admin, transactional_id, 26, 4, 0, {
        "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
        "committed": commit}, "EndTxn")
