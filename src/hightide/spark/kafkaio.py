"""A synchronous Kafka client for Spark's driver and executor processes.

Spark calls data sources from plain (non-async) Python code in worker processes, so this
wraps hightide's async :class:`~hightide.client.AdminClient` (kio, plain Kafka protocol:
works against hightide and any Kafka-compatible cluster) in a private event loop that
runs only while a call is in progress. It uses only the admin client's public API,
including its data-plane calls (:mod:`hightide.client.data`: Fetch, InitProducerId and
idempotent Produce of raw record batches), and adds the Fetch of a partition range.

Fetch is pipelined: :meth:`KafkaIO.fetch_range` sends the request for the next chunk
before it hands the current one to the caller, so the broker's answer arrives while the
caller decodes. Leadership changes (NOT_LEADER_OR_FOLLOWER and friends) and lost
connections refresh the metadata and retry within the request timeout (the admin
client's retries). Record bytes are handed over as the Fetch response decoder made
them, without a copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Self

from ..client import (
    AdminClient,
    ErrorCode,
    FetchResult,
    KafkaError,
    OffsetOutOfRangeError,
    ProducerId,
    TopicPartition,
)
from ..client.properties import ClientSecurity
from ..protocol.records import iter_headers

__all__ = ["FetchChunk", "KafkaIO", "OffsetOutOfRange"]

OffsetOutOfRange = OffsetOutOfRangeError
"""The fetch offset is below the log start offset (records deleted) or past the end
(:class:`hightide.client.OffsetOutOfRangeError`, under its old name)."""


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
    aborted: tuple[tuple[int, int], ...] = ()
    """read_committed: the aborted transactions the Fetch answer listed (see
    :class:`hightide.protocol.aborted.AbortedFilter`)."""


def _next_offset(records: bytes, offset: int) -> int:
    nxt = offset
    for h in iter_headers(records):
        nxt = max(nxt, h.next_offset)
    return nxt


_SECURITY: dict[str, ClientSecurity] = {}


def remember_security(bootstrap_servers: str, security: ClientSecurity) -> None:
    """Use ``security`` for every KafkaIO to ``bootstrap_servers`` in this process that is
    not given one (the driver's progress and sink-marker commits, whose targets come from
    offsets JSON that must not carry secrets)."""
    _SECURITY[bootstrap_servers] = security


class KafkaIO:
    """Blocking Kafka calls. Use as a context manager; not thread-safe (one per thread)."""

    def __init__(self, bootstrap_servers: str, client_id: str = "hightide-spark",
                 request_timeout_s: float = 30.0, security: ClientSecurity | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self.admin = AdminClient(bootstrap_servers, client_id, request_timeout_s,
                                 security=security or _SECURITY.get(bootstrap_servers))
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
    def partitions(self, topics: list[str] | None = None, *, auto_create: bool = False) -> dict[str, list[int]]:
        """Partitions of ``topics`` (None: every non-internal topic), topics that do not
        exist left out. ``auto_create`` (with named ``topics``): ask for them as a Kafka
        producer does (Metadata ``allow_auto_topic_creation``: the broker creates unknown
        topics when its ``auto.create.topics.enable`` is true) and wait, within the
        request timeout, while a new topic is answered LEADER_NOT_AVAILABLE."""
        if auto_create and topics:
            md = self.run(self._auto_created(topics))
        else:
            md = self.run(self.admin.metadata(topics))
        return {name: sorted(t.partitions) for name, t in sorted(md.topics.items())
                if t.error == ErrorCode.none and (topics is not None or not t.is_internal)}

    async def _auto_created(self, topics: list[str]) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        delay = 0.05
        while True:
            md = await self.admin.metadata(topics, allow_auto_topic_creation=True)
            if loop.time() >= deadline or not any(
                    t.error == ErrorCode.leader_not_available for t in md.topics.values()):
                return md
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

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
        pending: asyncio.Task[FetchResult] | None = self._fetch(tp, offset, max_bytes, isolation_level)
        try:
            while True:
                chunk = self.run(pending)
                pending = None
                nxt = _next_offset(chunk.records, offset)
                if offset < nxt < end:
                    # ask for the next chunk before handing this one over
                    pending = self._fetch(tp, nxt, max_bytes, isolation_level)
                    self._loop.run_until_complete(asyncio.sleep(0))
                yield FetchChunk(chunk.records, chunk.high_watermark, chunk.log_start_offset, offset, nxt,
                                 chunk.aborted)
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

    def _fetch(self, tp: TopicPartition, offset: int, max_bytes: int, iso: int
               ) -> asyncio.Task[FetchResult]:
        return self._loop.create_task(self.admin.fetch(tp, offset, max_bytes=max_bytes,
                                                       isolation_level=iso))

    # -- produce -----------------------------------------------------------------------
    def init_producer_id(self) -> ProducerId:
        """A fresh idempotent producer id and epoch (InitProducerId, no transactional id)."""
        return self.run(self.admin.init_producer_id())

    def produce(self, batches: dict[TopicPartition, bytes], *, acks: int = -1,
                timeout_ms: int = 30000, transactional_id: str | None = None) -> dict[TopicPartition, int]:
        """Send one record batch per partition (grouped per leader, one request each) and
        return each batch's base offset. Retries retriable errors; a batch the broker
        already has (a retry after a lost answer) is accepted as a duplicate by the
        broker's idempotence check, so a retry never writes twice."""
        return self.run(self.admin.produce(batches, acks=acks, timeout_ms=timeout_ms,
                                           transactional_id=transactional_id))

    # -- transactions ------------------------------------------------------------------
    def init_transactional(self, transactional_id: str, timeout_ms: int) -> ProducerId:
        """InitProducerId with ``transactional_id``: an earlier producer with the id is
        fenced and its open transaction aborted (see
        :func:`hightide.client.transactions.init_transactional_producer`)."""
        from ..client.transactions import init_transactional_producer
        pid, epoch = self.run(init_transactional_producer(self.admin, transactional_id, timeout_ms))
        return ProducerId(pid, epoch)

    def add_partitions_to_txn(self, transactional_id: str, producer: ProducerId,
                              partitions: list[TopicPartition]) -> None:
        from ..client.transactions import add_partitions_to_txn
        self.run(add_partitions_to_txn(self.admin, transactional_id, producer[0], producer[1], partitions))

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Commit or abort the transaction of ``transactional_id`` (EndTxn)."""
        from ..client.transactions import end_txn
        self.run(end_txn(self.admin, transactional_id, producer_id, producer_epoch, commit))

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
