"""Data-plane half of :class:`hightide.client.AdminClient` (a mixin): partition leaders,
Fetch of raw record batches, InitProducerId and idempotent Produce of raw record batches.

These are the primitives hightide's Spark source and sink are built on
(:mod:`hightide.spark.kafkaio` wraps them in a blocking API); they are not a consumer or
a producer. Record batches cross this API as ``bytes`` in the Kafka wire format (v2
batches, see :mod:`hightide.protocol.records`) and are never decoded or copied here:
:meth:`DataMixin.fetch` returns the ``records`` field of the Fetch response as the
response decoder produced it, :meth:`DataMixin.produce` sends the bytes it is given.

Retries, as everywhere in :class:`~hightide.client.AdminClient`: a retriable error
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, a lost
connection, a timeout, ...) refreshes the metadata of the topics concerned and retries
with exponential backoff (``retry_backoff_s``, doubling up to ``max_backoff_s``) until
``request_timeout_s`` has passed, then the last error is raised. Every attempt looks
the partition leaders up afresh (one Metadata request), so a leadership move is
followed. A non-retriable error is raised at once.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import (
    ErrorCode,
    KafkaError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_for,
)
from .types import FetchResult, ProducerId, TopicPartition

if TYPE_CHECKING:
    from .connection import BrokerConnection

__all__ = ["DataMixin", "PartitionLeaders"]

FETCH_MAX_VERSION = 12
"""Fetch v13+ addresses topics by id; up to v12 by name, which is all this needs."""
_FETCH_MIN_VERSION = 4  # high watermark, last stable offset, isolation level
_PRODUCE_MAX_VERSION, _PRODUCE_MIN_VERSION = 9, 3  # v3+: record batch v2 (idempotence)
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}


class PartitionLeaders(NamedTuple):
    """:meth:`DataMixin.partition_leaders`: partitions grouped by leader broker id, and
    the partitions that have no usable leader with the reason."""
    by_leader: dict[int, list[TopicPartition]]
    errors: dict[TopicPartition, KafkaError]


class DataMixin:
    """Data-plane APIs. Needs the connection and retry helpers of ``AdminClient``."""

    if TYPE_CHECKING:
        async def _any_conn(self) -> BrokerConnection: ...
        async def _conn_for_node(self, node_id: int) -> BrokerConnection: ...
        async def _with_retries(self, attempt: Any, retry_if: Any = None, on_retry: Any = None) -> Any: ...
        async def metadata(self, topics: list[str] | None = None) -> Any: ...

    async def partition_leaders(self, tps: Iterable[TopicPartition]) -> PartitionLeaders:
        """The current leader of each partition, from one Metadata request for their
        topics (not retried beyond what :meth:`metadata` retries).

        Returns ``(by_leader, errors)``: leader id → its partitions (in the given order),
        and partition → :class:`UnknownTopicOrPartitionError` (topic or partition does
        not exist) or a LEADER_NOT_AVAILABLE error (no leader right now; retriable).
        """
        tps = [TopicPartition(*tp) for tp in tps]
        md = await self.metadata(sorted({tp.topic for tp in tps}))
        by_leader: defaultdict[int, list[TopicPartition]] = defaultdict(list)
        errors: dict[TopicPartition, KafkaError] = {}
        for tp in tps:
            t = md.topics.get(tp.topic)
            if t is None or t.error == ErrorCode.unknown_topic_or_partition or tp.partition not in t.partitions:
                errors[tp] = UnknownTopicOrPartitionError(ErrorCode.unknown_topic_or_partition,
                                                          f"{tp.topic}-{tp.partition}")
            elif md.leader_for(tp) < 0:
                errors[tp] = error_for(ErrorCode.leader_not_available, f"{tp.topic}-{tp.partition}")
            else:
                by_leader[md.leader_for(tp)].append(tp)
        return PartitionLeaders(dict(by_leader), errors)

    async def _leader_conn(self, tp: TopicPartition) -> BrokerConnection:
        by_leader, errors = await self.partition_leaders([tp])
        if tp in errors:
            raise errors[tp]
        return await self._conn_for_node(next(iter(by_leader)))

    # -- fetch ---------------------------------------------------------------------------
    async def fetch(self, tp: TopicPartition, offset: int, *, max_bytes: int = 8 * 1024 * 1024,
                    isolation_level: str | int = "read_uncommitted", max_wait_ms: int = 500,
                    min_bytes: int = 1) -> FetchResult:
        """Fetch ``tp`` from ``offset`` on, from its leader: one Fetch request (v4–v12,
        no fetch session) for up to ``max_bytes`` (the broker returns at least one
        batch even if it is larger). The broker waits up to ``max_wait_ms`` for
        ``min_bytes`` to be available.

        Returns the raw record-batch bytes (possibly empty; the last batch may be
        partial when ``max_bytes`` cut it) and the partition's offsets. Raises
        :class:`OffsetOutOfRangeError` when ``offset`` is below the log start offset or
        past the end (not retried), other partition errors as :class:`KafkaError`;
        retriable ones are retried first (see the module docstring).
        """
        tp = TopicPartition(*tp)
        iso = _ISOLATION[isolation_level]

        async def attempt() -> FetchResult:
            conn = await self._leader_conn(tp)
            v = conn.pick_version(1, FETCH_MAX_VERSION, _FETCH_MIN_VERSION)
            resp = await conn.request(1, v, {
                "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
                "isolation_level": iso, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": tp.topic, "partitions": [{
                    "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                    "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            if getattr(resp, "error_code", 0):
                raise error_for(resp.error_code, "fetch")
            for t in resp.responses:
                for p in t.partitions:
                    if p.error_code == ErrorCode.offset_out_of_range:
                        raise OffsetOutOfRangeError(p.error_code, f"{tp.topic}-{tp.partition} offset {offset}")
                    if p.error_code:
                        raise error_for(p.error_code, f"{tp.topic}-{tp.partition}")
                    aborted = tuple((int(a.producer_id), int(a.first_offset))
                                    for a in getattr(p, "aborted_transactions", None) or ())
                    return FetchResult(p.records or b"", int(p.high_watermark), int(p.log_start_offset),
                                       int(p.last_stable_offset), aborted)
            raise KafkaError(ErrorCode.unknown_server_error, f"{tp} missing in the fetch response")

        async def refresh(_: KafkaError) -> None:
            await self.metadata([tp.topic])
        return await self._with_retries(attempt, on_retry=refresh)

    # -- produce -------------------------------------------------------------------------
    async def init_producer_id(self) -> ProducerId:
        """A fresh idempotent producer id and epoch: InitProducerId (v0–v4) with no
        transactional id, sent to any broker. Sequence numbers of an idempotent producer
        start at 0 per partition; see :meth:`produce`."""
        async def attempt() -> ProducerId:
            conn = await self._any_conn()
            v = conn.pick_version(22, 4, 0)
            resp = await conn.request(22, v, {"transactional_id": None, "transaction_timeout": -1,
                                              "producer_id": -1, "producer_epoch": -1})
            if resp.error_code:
                raise error_for(resp.error_code, "InitProducerId")
            return ProducerId(int(resp.producer_id), int(resp.producer_epoch))
        return await self._with_retries(attempt)

    async def produce(self, batches: Mapping[TopicPartition, bytes], *, acks: int = -1,
                      timeout_ms: int = 30000, transactional_id: str | None = None) -> dict[TopicPartition, int]:
        """Write one record batch (or several, concatenated) per partition, as given:
        one Produce request (v3–v9, no transactional id) per leader, all leaders at once.
        Returns each partition's base offset as the broker assigned it.

        ``acks``: -1 (all in-sync replicas, the default) or 1 (the leader); 0 is refused
        (the broker would not answer, so there would be no offsets). ``timeout_ms`` is
        the broker's wait for the acks.

        The batches should carry an idempotent producer id, epoch and sequence numbers
        (:meth:`init_producer_id`): a retry only resends the partitions not yet
        acknowledged, and a batch the broker already has (its answer was lost) is then
        recognised as a duplicate, so a retry never writes twice. Retriable errors are
        retried (see the module docstring); otherwise the first non-retriable
        partition error is raised, after every leader has answered. Transactional batches
        name their ``transactional_id`` (the partitions must be in the transaction:
        :func:`hightide.client.transactions.add_partitions_to_txn`).
        """
        if acks not in (-1, 1):
            raise ValueError(f"acks must be -1 or 1, got {acks!r}")
        out: dict[TopicPartition, int] = {}
        remaining = {TopicPartition(*tp): b for tp, b in batches.items()}

        async def one(node: int, tps: list[TopicPartition]) -> list[KafkaError]:
            conn = await self._conn_for_node(node)
            v = conn.pick_version(0, _PRODUCE_MAX_VERSION, _PRODUCE_MIN_VERSION)
            by_topic: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append({"index": tp.partition, "records": remaining[tp]})
            resp = await conn.request(0, v, {"transactional_id": transactional_id, "acks": acks,
                                             "timeout": timeout_ms,
                                             "topic_data": [{"name": t, "partition_data": ps}
                                                            for t, ps in by_topic.items()]})
            errors: list[KafkaError] = []
            answered = set()
            for t in resp.responses:
                for p in t.partition_responses:
                    tp = TopicPartition(t.name, int(p.index))
                    answered.add(tp)
                    if p.error_code:
                        msg = getattr(p, "error_message", None) or ""
                        errors.append(error_for(p.error_code, f"produce to {t.name}-{p.index}: {msg}"))
                    elif tp in remaining:
                        out[tp] = int(p.base_offset)
                        del remaining[tp]
            missing = [tp for tp in tps if tp not in answered]
            if missing:
                errors.append(KafkaError(ErrorCode.unknown_server_error,
                                         f"{missing} missing in the produce response"))
            return errors

        async def attempt() -> None:
            by_leader, lead_errors = await self.partition_leaders(list(remaining))
            errors: list[BaseException] = list(lead_errors.values())
            groups = list(by_leader.items())
            got = await asyncio.gather(*(one(n, tps) for n, tps in groups), return_exceptions=True)
            for g in got:
                errors.extend(g if isinstance(g, list) else [g])
            for e in errors:
                if not isinstance(e, KafkaError):
                    raise e
            if errors:
                # a non-retriable error ends the call; else retry what is left
                raise next((e for e in errors if isinstance(e, KafkaError) and not e.retriable), errors[0])

        async def refresh(_: KafkaError) -> None:
            await self.metadata(sorted({tp.topic for tp in remaining}))
        if remaining:
            await self._with_retries(attempt, on_retry=refresh)
        return out
