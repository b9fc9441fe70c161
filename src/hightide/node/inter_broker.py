"""Connections from this broker to other brokers (inter-broker RPCs).

One :class:`~hightide.client.BrokerConnection` per broker id, to the broker's endpoint of
the inter-broker listener in the metadata image (``inter.broker.listener.name``, else the
first broker listener, with its TLS/SASL client settings: issue 17). A connection that
breaks is dropped and opened again on the next call; a broker whose address changed gets
a new one.

Built from two narrow parts, held by :class:`InterBroker` (one per process, made by the
broker's wiring and handed to every component that calls other brokers):
``image()``, the current metadata image (where each broker is, whether it is fenced), and
``listener()``, the inter-broker listener's name and client security (computed from the
configs on first use; it raises ValueError naming a bad setting). Each component gets its
own :class:`InterBrokerClients` (its own client id and timeout) from
:meth:`InterBroker.clients`. Every connection is opened through the node's
:class:`~hightide.aio.transport.Transport` (``transport``: TCP in production, the
in-memory network in tests and the simulator).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..aio.transport import LOOP_TRANSPORT, Transport
from ..client import BrokerConnection
from ..client.connection import close_all
from ..client.errors import KafkaError
from ..client.properties import ClientSecurity
from ..cluster.image import MetadataImage

REQUEST_TIMEOUT_S = 10.0


class InterBroker:
    """Where other brokers are and how to reach them (see the module doc): ``image()``
    and ``listener()``, the latter computed once, on first use; ``transport`` opens the
    connections."""

    def __init__(self, image: Callable[[], MetadataImage],
                 listener: Callable[[], tuple[str, ClientSecurity | None]],
                 transport: Transport = LOOP_TRANSPORT) -> None:
        self.image = image
        self.transport = transport
        self._listener = listener
        self._inter: tuple[str, ClientSecurity | None] | None = None

    def listener(self) -> tuple[str, ClientSecurity | None]:
        """(listener name, client security) used to reach other brokers."""
        if self._inter is None:
            self._inter = self._listener()
        return self._inter

    def clients(self, client_id: str, request_timeout_s: float = REQUEST_TIMEOUT_S) -> InterBrokerClients:
        """A new set of connections to other brokers, sending as ``client_id``."""
        return InterBrokerClients(self, client_id, request_timeout_s)


class InterBrokerClients:
    """Connections to other brokers, keyed by broker id (see the module doc)."""

    def __init__(self, network: InterBroker, client_id: str, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.network = network
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    @property
    def transport(self) -> Transport:
        """How connections to other brokers are opened."""
        return self.network.transport

    def inter_broker(self) -> tuple[str, ClientSecurity | None]:
        """(listener name, client security) used to reach other brokers."""
        return self.network.listener()

    def address(self, node_id: int) -> tuple[str, int] | None:
        """(host, port) of ``node_id`` on the inter-broker listener, or None when it is not
        registered, fenced, or lacks that listener."""
        reg = self.network.image().brokers.get(node_id)
        ep = None if reg is None or reg.fenced else reg.endpoint(self.inter_broker()[0])
        return None if ep is None else (ep[1], ep[2])

    async def request(self, node_id: int, host: str, port: int, api_key: int, version: int, body: Any, *,
                      decoder: Callable[[bytes], Any] | None = None) -> Any:
        """Send one request to broker ``node_id`` at ``host:port`` and return the decoded
        response (``decoder``: in place of kio, see :meth:`BrokerConnection.request`). Concurrent callers share one connection (opened once, under a lock per
        broker). Raises KafkaError or OSError (the connection is then dropped)."""
        async with self._connecting.setdefault(node_id, asyncio.Lock()):  # one connect at a time per broker
            conn = self._conns.get(node_id)
            if conn is None or not conn.connected or (conn.host, conn.port) != (host, port):
                if conn is not None:
                    await conn.close()
                conn = BrokerConnection(host, port, self.client_id, request_timeout_s=self.request_timeout_s,
                                        node_id=node_id, security=self.inter_broker()[1], transport=self.transport)
                self._conns[node_id] = conn
                try:
                    await conn.connect()
                except (KafkaError, OSError):
                    if self._conns.get(node_id) is conn:
                        del self._conns[node_id]
                    await conn.close()
                    raise
        try:
            return await conn.request(api_key, version, body, decoder=decoder)
        except (KafkaError, OSError):
            if self._conns.get(node_id) is conn:
                del self._conns[node_id]
            await conn.close()
            raise

    async def close(self) -> None:
        """Close every connection (at once, each bounded: :func:`~hightide.client.connection.close_all`)."""
        conns, self._conns = list(self._conns.values()), {}
        await close_all(conns)
