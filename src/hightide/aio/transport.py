"""The shell's one network seam: :class:`Transport`, and :data:`LOOP_TRANSPORT`, its
production implementation over the event loop's own sockets.

Every connection the shell opens (inter-broker RPCs, the controller channel, Raft
between voters, the client's :class:`~hightide.client.connection.BrokerConnection`)
goes through :meth:`Transport.connect`, and every listener it serves through
:meth:`Transport.listen`; the ``Broker`` takes one (``transport=``) and hands it down,
like the :class:`~hightide.aio.clock.Clock`. The two calls are shaped like the loop's
``create_connection`` / ``create_server``: a protocol factory in, asyncio transports and
protocols out, so the protocol code is the same whatever carries the bytes. A test (or
the whole-node simulator) passes :class:`~hightide.aio.memory_transport.MemoryTransport`
instead: every node of a cluster in one process and one event loop, no socket.

What a protocol may rely on from the transports it is given: ``write``/``writelines``,
``close``/``abort`` (``connection_lost`` follows), ``pause_reading``/``resume_reading``,
write flow control (``pause_writing``/``resume_writing`` around the write buffer's
limits), ``get_extra_info("peername"/"sockname")``. ``get_extra_info("socket")`` may be
None (no socket: the server's zero-copy Fetch then copies), and so may
``"sslcontext"`` (a transport that offers no TLS refuses ``ssl=``).
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["LOOP_TRANSPORT", "Listening", "LoopTransport", "ProtocolFactory", "Transport"]

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class Listening(Protocol):
    """A listener opened by :meth:`Transport.listen` (in production an asyncio
    ``Server`` behind it)."""

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound: the port chosen when 0 was asked for."""
        ...

    def is_serving(self) -> bool:
        """True while new connections are accepted (an event loop may give a listening
        socket up, e.g. out of descriptors: the broker re-opens it)."""
        ...

    def close(self) -> None:
        """Stop accepting connections (open ones are left to their protocols)."""
        ...

    async def wait_closed(self) -> None:
        """Return once the listener is closed."""
        ...


class Transport(Protocol):
    """How the shell opens connections and listeners (see the module doc)."""

    async def connect(self, protocol_factory: ProtocolFactory, host: str, port: int, *,
                      ssl: _ssl.SSLContext | None = None,
                      server_hostname: str | None = None) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        """Open a connection to ``host:port``; ``protocol_factory()``'s protocol gets
        ``connection_made`` before this returns. Raises OSError (ConnectionRefusedError
        when nobody listens there)."""
        ...

    async def listen(self, protocol_factory: ProtocolFactory, host: str | None, port: int, *,
                     ssl: _ssl.SSLContext | None = None, ssl_handshake_timeout: float | None = None,
                     backlog: int = 100, reuse_address: bool | None = None) -> Listening:
        """Accept connections on ``host:port`` (port 0: any free one; host None or empty:
        every address), each served by a new ``protocol_factory()``. Raises OSError
        (address in use)."""
        ...


class _LoopListening:
    """:class:`Listening` over an asyncio ``Server``."""

    __slots__ = ("server",)

    def __init__(self, server: asyncio.AbstractServer) -> None:
        self.server = server

    @property
    def address(self) -> tuple[str, int]:
        sockets: Any = getattr(self.server, "sockets", ())
        name = sockets[0].getsockname()
        return name[0], name[1]

    def is_serving(self) -> bool:
        return self.server.is_serving()

    def close(self) -> None:
        self.server.close()

    async def wait_closed(self) -> None:
        await self.server.wait_closed()


class LoopTransport:
    """The production :class:`Transport`: the running event loop's ``create_connection``
    and ``create_server`` (TCP, TLS when ``ssl`` is given)."""

    async def connect(self, protocol_factory: ProtocolFactory, host: str, port: int, *,
                      ssl: _ssl.SSLContext | None = None,
                      server_hostname: str | None = None) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        loop = asyncio.get_running_loop()
        return await loop.create_connection(protocol_factory, host, port, ssl=ssl, server_hostname=server_hostname)

    async def listen(self, protocol_factory: ProtocolFactory, host: str | None, port: int, *,
                     ssl: _ssl.SSLContext | None = None, ssl_handshake_timeout: float | None = None,
                     backlog: int = 100, reuse_address: bool | None = None) -> Listening:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol_factory, host or None, port, ssl=ssl,
                                          ssl_handshake_timeout=ssl_handshake_timeout, backlog=backlog,
                                          reuse_address=reuse_address)
        return _LoopListening(server)


LOOP_TRANSPORT: Transport = LoopTransport()
"""The production transport (see :class:`LoopTransport`)."""
