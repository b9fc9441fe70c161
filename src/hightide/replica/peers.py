"""What the replica components need from the connections to other brokers (today
:class:`hightide.node.inter_broker.InterBrokerClients` satisfies both Protocols; the
broker's wiring builds one per component and passes it in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..aio.transport import Transport
from ..client.properties import ClientSecurity


class PeerDirectory(Protocol):
    """Where other brokers are and how to reach them."""

    def address(self, node_id: int) -> tuple[str, int] | None:
        """(host, port) of ``node_id`` on the inter-broker listener, or None when it is not
        registered, fenced, or lacks that listener."""
        ...

    def inter_broker(self) -> tuple[str, ClientSecurity | None]:
        """(listener name, client TLS/SASL settings) used to reach other brokers."""
        ...

    @property
    def transport(self) -> Transport:
        """How connections to other brokers are opened (:mod:`hightide.aio.transport`)."""
        ...


class PeerClients(PeerDirectory, Protocol):
    """Requests to other brokers over connections kept per broker id."""

    async def request(self, node_id: int, host: str, port: int, api_key: int, version: int, body: Any, *,
                      decoder: Callable[[bytes], Any] | None = None) -> Any:
        """Send one request to broker ``node_id`` at ``host:port``; the decoded response
        (``decoder``: in place of kio, as :meth:`BrokerConnection.request`). Raises
        KafkaError or OSError."""
        ...

    async def close(self) -> None:
        """Close every connection (bounded)."""
        ...
