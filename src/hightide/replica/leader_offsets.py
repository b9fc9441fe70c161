"""The partition leaders' offsets for the OffsetFetch extension (seed 000) in cluster mode.

A group coordinator answers OffsetFetch with each partition's high watermark, log start
offset and last stable offset (tags 10000-10002, docs/protocol-extensions.md). Those are
the leader's: a follower's high watermark trails its leader's by up to one fetch (and a
new leader's may be below the old one until its followers fetch), and a broker that
hosts no replica has no log at all. The OffsetFetch handler reads the partitions led
here from their logs and asks :class:`LeaderOffsets` for the others: one round of
ListOffsets per leader broker, three requests sent together on one connection (Kafka
refuses a partition twice in one request): LATEST read_uncommitted (the HW), LATEST
read_committed (the LSO) and EARLIEST (the log start offset), each partition with the
image's leader epoch as CurrentLeaderEpoch, so a deposed leader answers
FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER rather than its stale offsets.

A partition gets ``(high watermark, log start offset, last stable offset)`` when its
leader answered all three without error, and nothing otherwise (the handler then sends
no tags for it and clients fall back to ListOffsets, docs/lag.md): no leader, a leader
that is not registered or fenced, a new leader whose high watermark is not known yet
(OFFSET_NOT_AVAILABLE: Kafka's answer while a new leader's HW is below the start of its
epoch), or a leader that does not answer within ``timeout_s`` (1 s). A leader that failed
is not asked again for ``retry_after_s`` (1 s), so a paused leader delays at most one
OffsetFetch per second.

Built from ``peers`` (a :class:`~.peers.PeerDirectory`: the leaders' addresses on the
inter-broker listener and its TLS/SASL client settings) and this broker's ``node_id``
(in its connections' client id), and ``clock`` (:mod:`hightide.aio.clock`: the
retry-after times). Connections: one per leader broker, opened under a per-broker lock so
that concurrent OffsetFetch requests share it, dropped when a request on it fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..client import BrokerConnection
from ..client.connection import close_all
from ..client.errors import KafkaError
from .peers import PeerDirectory

log = logging.getLogger("hightide.leader_offsets")

TopicPartition = tuple[str, int]
Bounds = tuple[int, int, int]
"""(high watermark, log start offset, last stable offset) of one partition."""

LIST_OFFSETS = 2
LATEST, EARLIEST = -1, -2
TIMEOUT_S = 1.0
RETRY_AFTER_S = 1.0


class LeaderOffsets:
    """Asks partition leaders for their offsets (see the module doc)."""

    def __init__(self, peers: PeerDirectory, node_id: int, *, timeout_s: float = TIMEOUT_S,
                 retry_after_s: float = RETRY_AFTER_S, clock: Clock = SYSTEM_CLOCK) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self.retry_after_s = retry_after_s
        self._client_id = f"hightide-offsets-{node_id}"
        self._peers = peers  # addresses, security
        self._conns: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._skip_until: dict[int, float] = {}  # leader id -> monotonic time it may be asked again

    async def bounds(self, wanted: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, Bounds]:
        """The offsets of ``wanted`` partitions (each mapped to its leader's id and leader
        epoch in this broker's image) as their leaders answer them now; partitions whose
        leader gave no usable answer are absent. Takes at most about ``timeout_s``; never
        raises (except CancelledError)."""
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, (leader, epoch) in wanted.items():
            by_leader.setdefault(leader, {})[tp] = epoch
        now = self.clock.monotonic()
        asked = [(leader, parts) for leader, parts in by_leader.items() if self._skip_until.get(leader, 0.0) <= now]
        if not asked:
            return {}
        answers = await asyncio.gather(*(self._ask(leader, parts) for leader, parts in asked))
        out: dict[TopicPartition, Bounds] = {}
        for got in answers:
            out.update(got)
        return out

    async def _ask(self, leader: int, parts: dict[TopicPartition, int]) -> dict[TopicPartition, Bounds]:
        addr = self._peers.address(leader)
        if addr is None:  # not registered, fenced, or without the inter-broker listener
            return {}
        try:
            async with asyncio.timeout(self.timeout_s):
                conn = await self._connection(leader, *addr)
                v = conn.pick_version(LIST_OFFSETS, 9, 4)  # v4+: CurrentLeaderEpoch
                hw, lso, start = await asyncio.gather(
                    _list(conn, v, parts, LATEST, 0), _list(conn, v, parts, LATEST, 1),
                    _list(conn, v, parts, EARLIEST, 0))
        except (KafkaError, OSError, TimeoutError) as exc:
            self._skip_until[leader] = self.clock.monotonic() + self.retry_after_s
            log.debug("offsets of %d partitions from broker %d: %s", len(parts), leader, exc)
            await self._drop(leader)
            return {}
        return {tp: (hw[tp], start[tp], lso[tp]) for tp in parts if tp in hw and tp in lso and tp in start}

    async def _connection(self, node_id: int, host: str, port: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected and (conn.host, conn.port) == (host, port):
            return conn
        lock = self._locks.get(node_id)
        if lock is None:
            lock = self._locks[node_id] = asyncio.Lock()
        async with lock:
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected and (conn.host, conn.port) == (host, port):
                return conn
            await self._drop(node_id)
            conn = BrokerConnection(host, port, self._client_id, request_timeout_s=self.timeout_s,
                                    node_id=node_id, security=self._peers.inter_broker()[1],
                                    transport=self._peers.transport)
            await conn.connect()
            self._conns[node_id] = conn
            return conn

    async def _drop(self, node_id: int) -> None:
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Close every connection (at once, each bounded)."""
        conns, self._conns = list(self._conns.values()), {}
        await close_all(conns)


async def _list(conn: BrokerConnection, version: int, parts: dict[TopicPartition, int], timestamp: int,
                isolation_level: int) -> dict[TopicPartition, int]:
    """One ListOffsets of ``parts`` (partition -> leader epoch) at ``timestamp``: the offset
    of each partition answered without error."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), epoch in parts.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "current_leader_epoch": epoch,
                                               "timestamp": timestamp})
    resp = await conn.request(LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": isolation_level, "timeout": 0,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, int(p.partition_index)): int(p.offset) for t in resp.topics for p in t.partitions
            if p.error_code == 0 and p.offset >= 0 and (t.name, int(p.partition_index)) in parts}
