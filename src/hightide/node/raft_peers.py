"""Connections between the voters of the controller quorum (Kafka's KafkaNetworkChannel).

:class:`RaftPeers` is the Raft shell's transport: :meth:`RaftPeers.request` converts a
core message to its kio request (:mod:`hightide.cluster.raft.wire`: Vote v2,
BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v17, FetchSnapshot v1), sends it to the
voter's controller listener (the address in ``controller.quorum.voters``) and converts
the answer back. Each peer gets two connections: one for Fetch and FetchSnapshot, one
for everything else — a peer answers a connection's requests in order and a Vote or
BeginQuorumEpoch must not queue behind a Fetch the leader parks for up to 500 ms.

A connection that fails (refused, closed, timed out) is dropped and opened again on the
next request, with no backoff of its own: the core retries on its timers
(``retry_backoff_ms`` after a ``SendFailed``).

A dynamic quorum's addresses change (KIP-853): :attr:`RaftPeers.addresses` is updated
from the voter set (the runtime's ``on_voters``), bootstrap servers stand under node ids
-2, -3, ..., and a Fetch answer's NodeEndpoints name the leader's address (an observer
that knows no voter yet finds the leader so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from ..aio.transport import LOOP_TRANSPORT, Transport
from ..client import BrokerConnection
from ..client.connection import close_all
from ..client.errors import KafkaError
from ..client.properties import ClientSecurity
from ..cluster.raft import messages as m

log = logging.getLogger("hightide.raft")

__all__ = ["RaftPeers", "API_OF"]

#: (api key, version) of each request the core sends.
API_OF: dict[type, tuple[int, int]] = {
    m.VoteRequest: (52, 2),
    m.BeginQuorumEpochRequest: (53, 1),
    m.EndQuorumEpochRequest: (54, 1),
    m.FetchRequest: (1, 17),
    m.FetchSnapshotRequest: (59, 1),
}


class RaftPeers:
    """Requests to the other voters at ``addresses`` (node id → (host, port)), over
    connections opened through ``transport``."""

    def __init__(self, node_id: int, addresses: Mapping[int, tuple[str, int]], *, cluster_id: str | None,
                 request_timeout_s: float, security: ClientSecurity | None = None,
                 transport: Transport = LOOP_TRANSPORT) -> None:
        self.node_id = node_id
        self.transport = transport
        self.addresses = dict(addresses)
        self.cluster_id = cluster_id
        self.request_timeout_s = request_timeout_s
        self.security = security
        self._conns: dict[tuple[int, bool], BrokerConnection] = {}
        self._locks: dict[tuple[int, bool], asyncio.Lock] = {}
        self._closed = False

    async def request(self, dest: int, message: m.Message) -> m.Message:
        """Send ``message`` to voter ``dest`` and return its answer. Raises KafkaError or
        OSError when the connection fails or no answer comes in time (the connection is
        then dropped), KeyError for an unknown voter."""
        from ..cluster.raft.wire import from_kio, to_kio  # when used: Raft's kio messages cost a single node ~20 ms of start-up
        api_key, version = API_OF[type(message)]
        host, port = self.addresses[dest]
        fetch = api_key in (1, 59)
        conn = await self._connection(dest, fetch, host, port)
        body = to_kio(message, cluster_id=self.cluster_id, dest=dest)
        try:
            answer = await conn.request(api_key, version, body, timeout_s=self.request_timeout_s)
        except (KafkaError, OSError):
            await self._drop(dest, fetch, conn)
            raise
        for node in getattr(answer, "node_endpoints", None) or ():   # Fetch v17: the leader's address
            if int(node.node_id) not in self.addresses and int(node.node_id) != self.node_id and node.port > 0:
                self.addresses[int(node.node_id)] = (node.host, int(node.port))
        return from_kio(answer)

    async def _connection(self, dest: int, fetch: bool, host: str, port: int) -> BrokerConnection:
        key = (dest, fetch)
        conn = self._conns.get(key)
        if conn is not None and conn.connected:
            return conn
        async with self._locks.setdefault(key, asyncio.Lock()):  # one connect at a time per peer
            if self._closed:
                raise ConnectionError("the raft transport is closed")
            conn = self._conns.get(key)
            if conn is not None and conn.connected:
                return conn
            if conn is not None:
                await self._drop(dest, fetch, conn)
            conn = BrokerConnection(host, port, f"raft-{self.node_id}", request_timeout_s=self.request_timeout_s,
                                    node_id=dest, security=self.security, transport=self.transport)
            try:
                await conn.connect()
            except (KafkaError, OSError):
                await conn.close()
                raise
            self._conns[key] = conn
            return conn

    async def _drop(self, dest: int, fetch: bool, conn: BrokerConnection) -> None:
        if self._conns.get((dest, fetch)) is conn:
            del self._conns[(dest, fetch)]
        await conn.close()

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        await close_all(conns)  # at once, each bounded
