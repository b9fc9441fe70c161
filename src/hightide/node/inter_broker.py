"""Connections from this broker to other brokers (inter-broker RPCs).

One :class:`~hightide.client.BrokerConnection` per broker id, to the broker's endpoint of
the inter-broker listener in the metadata image (``inter.broker.listener.name``, else the
first broker listener, with its TLS/SASL client settings: issue 17). A connection that
breaks is dropped and opened again on the next call; a broker whose address changed gets
a new one.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..client import BrokerConnection
from ..client.connection import close_all
from ..client.errors import KafkaError
from ..client.properties import ClientSecurity
from ..server.leadership import alive_endpoint
from ..server.listener_security import inter_broker_client

if TYPE_CHECKING:
    from ..server.broker import Broker

REQUEST_TIMEOUT_S = 10.0


class InterBrokerClients:
    """Connections to other brokers, keyed by broker id (see the module doc)."""

    def __init__(self, broker: Broker, client_id: str, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.broker = broker
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._conns: dict[int, BrokerConnection] = {}
        self._inter: tuple[str, ClientSecurity | None] | None = None
        self._connecting: dict[int, asyncio.Lock] = {}

    def inter_broker(self) -> tuple[str, ClientSecurity | None]:
        """(listener name, client security) used to reach other brokers."""
        if self._inter is None:
            b = self.broker
            self._inter = inter_broker_client(b.config.security_values,
                                              tuple(x.name for x in b.cluster.broker_listeners),
                                              b.cluster.controller_listener_names)
        return self._inter

    def address(self, node_id: int) -> tuple[str, int] | None:
        """(host, port) of ``node_id`` on the inter-broker listener, or None when it is not
        registered, fenced, or lacks that listener."""
        ep = alive_endpoint(self.broker.image, node_id, self.inter_broker()[0])
        return None if ep is None else (ep[1], ep[2])

    async def request(self, node_id: int, host: str, port: int, api_key: int, version: int, body: Any) -> Any:
        """Send one request to broker ``node_id`` at ``host:port`` and return the decoded
        response. Concurrent callers share one connection (opened once, under a lock per
        broker). Raises KafkaError or OSError (the connection is then dropped)."""
        async with self._connecting.setdefault(node_id, asyncio.Lock()):  # one connect at a time per broker
            conn = self._conns.get(node_id)
            if conn is None or not conn.connected or (conn.host, conn.port) != (host, port):
                if conn is not None:
                    await conn.close()
                conn = BrokerConnection(host, port, self.client_id, request_timeout_s=self.request_timeout_s,
                                        node_id=node_id, security=self.inter_broker()[1])
                self._conns[node_id] = conn
                try:
                    await conn.connect()
                except (KafkaError, OSError):
                    if self._conns.get(node_id) is conn:
                        del self._conns[node_id]
                    await conn.close()
                    raise
        try:
            return await conn.request(api_key, version, body)
        except (KafkaError, OSError):
            if self._conns.get(node_id) is conn:
                del self._conns[node_id]
            await conn.close()
            raise

    async def close(self) -> None:
        """Close every connection (at once, each bounded: :func:`~hightide.client.connection.close_all`)."""
        conns, self._conns = list(self._conns.values()), {}
        await close_all(conns)
