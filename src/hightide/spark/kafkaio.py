"""A synchronous Kafka client for Spark's driver and executor processes.

Spark calls data sources from plain (non-async) Python code in worker processes, so this
wraps hightide's async :class:`~hightide.client.AdminClient` (kio, plain Kafka protocol:
works against hightide and any Kafka-compatible cluster) in a private event loop that
runs only while a call is in progress. On top of the admin client it adds the three
data-plane calls the Spark parts need: Fetch of a partition range, InitProducerId and
idempotent Produce.

Fetch is pipelined: :meth:`KafkaIO.fetch_range` sends the request for the next chunk
before it hands the current one to the caller, so the broker's answer arrives while the
caller decodes. Leadership changes (NOT_LEADER_OR_FOLLOWER and friends) and lost
connections refresh the metadata and retry within the request timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Self

from ..client import AdminClient, KafkaError, TopicPartition
from ..client.errors import ErrorCode, error_for
from ..protocol.records import iter_headers

__all__ = ["FetchChunk", "KafkaIO", "OffsetOutOfRange"]

_FETCH_MAX_VERSION = 12  # topic names (v13+ address topics by id)


class OffsetOutOfRange(KafkaError):
    """The fetch offset is below the log start offset (records deleted) or past the end."""


@dataclass(frozen=True, slots=True)
class FetchChunk:
    """One Fetch answer for one partition: raw record-batch bytes and the partition's
    offsets as the leader reported them."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    offset: int = -1
    """The fetch offset this chunk answers."""
    next_offset: int = -1
    """Where the next fetch continues: after the last complete batch in ``records``."""


def _next_offset(records: bytes, offset: int) -> int:
    nxt = offset
    for h in iter_headers(records):
        nxt = max(nxt, h.next_offset)
    return nxt


class KafkaIO:
    """Blocking Kafka calls. Use as a context manager; not thread-safe (one per thread)."""

    def __init__(self, bootstrap_servers: str, client_id: str = "hightide-spark",
                 request_timeout_s: float = 30.0) -> None:
        self._loop = asyncio.new_event_loop()
        self.admin = AdminClient(bootstrap_servers, client_id, request_timeout_s)
        self.request_timeout_s = request_timeout_s
        try:
            self.run(self.admin.start())
        except BaseException:
            self.close()
            raise

    def run(self, coro: Any) -> Any:
        """Run one admin-client coroutine to completion and return its result."""
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self.admin.close())
        finally:
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata and offsets ----------------------------------------------------------
    def partitions(self, topics: list[str] | None = None) -> dict[str, list[int]]:
        """Partitions of ``topics`` (None: every non-internal topic), topics that do not
        exist left out."""
        md = self.run(self.admin.metadata(topics))
        return {name: sorted(t.partitions) for name, t in sorted(md.topics.items())
                if t.error == ErrorCode.none and (topics is not None or not t.is_internal)}

    def offsets(self, specs: dict[TopicPartition, Any]) -> dict[TopicPartition, int]:
        """ListOffsets per partition (``"earliest"``, ``"latest"`` or a timestamp);
        -1 where a timestamp matches no record. Raises the first partition error."""
        if not specs:
            return {}
        got = self.run(self.admin.list_offsets(specs))
        return {tp: int(r.offset) for tp, r in got.items()}

    # -- fetch -------------------------------------------------------------------------
    def fetch_range(self, tp: TopicPartition, start: int, end: int, *,
                    max_bytes: int = 8 * 1024 * 1024, isolation_level: int = 0
                    ) -> Iterator[FetchChunk]:
        """Yield the Fetch answers for ``tp`` from ``start`` on, each continuing after the
        last complete batch of the one before, until a chunk reaches ``end`` or the
        partition has nothing more (its high watermark, or a log truncated below
        ``end``, or an answer without a complete batch: the caller sees the shortfall
        in the last chunk's ``next_offset``).
        Raises :class:`OffsetOutOfRange` when an offset is no longer in the log."""
        offset = start
        pending = self._loop.create_task(self._fetch(tp, offset, max_bytes, isolation_level))
        try:
            while True:
                chunk = self.run(pending)
                pending = None
                nxt = _next_offset(chunk.records, offset)
                if offset < nxt < end:
                    # ask for the next chunk before handing this one over
                    pending = self._loop.create_task(self._fetch(tp, nxt, max_bytes, isolation_level))
                    self._loop.run_until_complete(asyncio.sleep(0))
                yield FetchChunk(chunk.records, chunk.high_watermark, chunk.log_start_offset, offset, nxt)
                if pending is None:
                    return
                offset = nxt
        finally:
            if pending is not None and not self._loop.is_closed():
                pending.cancel()
                try:
                    self._loop.run_until_complete(pending)
                except (asyncio.CancelledError, KafkaError):
                    pass

    async def _fetch(self, tp: TopicPartition, offset: int, max_bytes: int, iso: int) -> FetchChunk:
        admin = self.admin

        async def attempt() -> FetchChunk:
            by_leader, errors = await admin._leaders([tp])
            if tp in errors:
                raise errors[tp]
            node = next(iter(by_leader))
            conn = await admin._conn_for_node(node)
            v = conn.pick_version(1, _FETCH_MAX_VERSION, 4)
            resp = await conn.request(1, v, {
                "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": max_bytes,
                "isolation_level": iso, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": tp.topic, "partitions": [{
                    "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                    "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            if resp.error_code:
                raise error_for(resp.error_code, "fetch")
            for t in resp.responses:
                for p in t.partitions:
                    if p.error_code == ErrorCode.offset_out_of_range:
                        raise OffsetOutOfRange(p.error_code, f"{tp.topic}-{tp.partition} offset {offset}")
                    if p.error_code:
                        raise error_for(p.error_code, f"{tp.topic}-{tp.partition}")
                    return FetchChunk(p.records or b"", int(p.high_watermark), int(p.log_start_offset))
            raise KafkaError(ErrorCode.unknown_server_error, f"{tp} missing in the fetch response")

        async def refresh(_: KafkaError) -> None:
            await admin.metadata([tp.topic])
        return await admin._with_retries(attempt, on_retry=refresh)

    # -- produce -----------------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch (InitProducerId, no transactional id)."""
        async def attempt() -> tuple[int, int]:
            conn = await self.admin._any_conn()
            v = conn.pick_version(22, 4, 0)
            resp = await conn.request(22, v, {"transactional_id": None, "transaction_timeout": -1,
                                              "producer_id": -1, "producer_epoch": -1})
            if resp.error_code:
                raise error_for(resp.error_code, "InitProducerId")
            return int(resp.producer_id), int(resp.producer_epoch)
        return self.run(self.admin._with_retries(attempt))

    def produce(self, batches: dict[TopicPartition, bytes], *, acks: int = -1,
                timeout_ms: int = 30000) -> dict[TopicPartition, int]:
        """Send one record batch per partition (grouped per leader, one request each) and
        return each batch's base offset. Retries retriable errors; a batch the broker
        already has (a retry after a lost answer) is accepted as a duplicate by the
        broker's idempotence check, so a retry never writes twice."""
        return self.run(self._produce(batches, acks, timeout_ms))

    async def _produce(self, batches: dict[TopicPartition, bytes], acks: int, timeout_ms: int
                       ) -> dict[TopicPartition, int]:
        admin = self.admin
        out: dict[TopicPartition, int] = {}
        remaining = dict(batches)

        async def one(node: int, tps: list[TopicPartition]) -> None:
            conn = await admin._conn_for_node(node)
            v = conn.pick_version(0, 9, 3)
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append({"index": tp.partition, "records": remaining[tp]})
            resp = await conn.request(0, v, {"transactional_id": None, "acks": acks, "timeout": timeout_ms,
                                             "topic_data": [{"name": t, "partition_data": ps}
                                                            for t, ps in by_topic.items()]})
            for t in resp.responses:
                for p in t.partition_responses:
                    tp = TopicPartition(t.name, int(p.index))
                    if p.error_code:
                        raise error_for(p.error_code, f"produce to {t.name}-{p.index}: {p.error_message or ''}")
                    out[tp] = int(p.base_offset)
                    remaining.pop(tp, None)

        async def attempt() -> None:
            by_leader, errors = await admin._leaders(list(remaining))
            if errors:
                raise next(iter(errors.values()))
            await asyncio.gather(*(one(n, tps) for n, tps in by_leader.items()))

        async def refresh(_: KafkaError) -> None:
            await admin.metadata(sorted({tp.topic for tp in remaining}))
        await admin._with_retries(attempt, on_retry=refresh)
        return out

    # -- group offsets -----------------------------------------------------------------
    def commit(self, group_id: str, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        """Commit ``(offset, metadata)`` per partition to ``group_id`` with OffsetCommit
        (the "simple" form: no member id, accepted while the group has no members)."""
        if offsets:
            self.run(self.admin.alter_consumer_group_offsets(group_id, offsets))

    def committed(self, group_id: str) -> dict[TopicPartition, tuple[int, str]]:
        """``(offset, metadata)`` of every partition ``group_id`` has a commit for."""
        got = self.run(self.admin.list_consumer_group_offsets(group_id))
        return {tp: (om.offset, om.metadata or "") for tp, om in got.items() if om.offset >= 0}
