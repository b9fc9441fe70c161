"""An in-memory network for one event loop: :class:`MemoryNetwork` and the
:class:`MemoryTransport` a node opens its connections and listeners through.

Theory of operation
-------------------
The network holds the listeners by address and the open connections. Each node gets
its own :class:`MemoryTransport` (:meth:`MemoryNetwork.transport`, naming the host its
connections come from); every transport of one network reaches every listener of it.

* :meth:`MemoryTransport.listen` registers ``(host, port)`` → protocol factory (port 0
  gets a free port; host None, ``""``, ``0.0.0.0`` or ``::`` listens on every host).
* :meth:`MemoryTransport.connect` builds a :class:`MemoryConnection`: two ends, each an
  ``asyncio.Transport``, the server end's protocol from the listener's factory. Both
  protocols get ``connection_made`` (server side first) before ``connect`` returns;
  nobody listening raises ConnectionRefusedError; ``ssl=`` raises ValueError (no TLS
  over this network).
* Bytes written on one end reach the other end's protocol (``data_received``, or a
  ``BufferedProtocol``'s ``get_buffer``/``buffer_updated``) through
  :meth:`MemoryNetwork.deliver`: one loop step later, never inside ``write``, in the
  order written. The receiving end keeps what arrives while its reading is paused and
  hands it over on ``resume_reading``. Bytes count in the writer's write buffer until the
  receiving protocol took them, so ``pause_writing``/``resume_writing`` follow the
  transport's limits as a socket's would when the peer does not read.
* ``close()`` sends the end of the stream behind the data already written: the peer
  gets ``eof_received`` then (and closes its end unless the protocol returns True, as
  asyncio does), the closing end ``connection_lost(None)`` one step later. ``abort()``
  (and :meth:`MemoryConnection.reset`) is a reset: data not yet taken is dropped and
  the peer gets ``connection_lost(ConnectionResetError)``.
* ``get_extra_info``: ``peername``/``sockname`` are (host, port) pairs, ``socket``,
  ``sslcontext`` and ``ssl_object`` are None (the server's zero-copy Fetch then copies).

Faults (for the simulator): everything a connection carries passes
:meth:`MemoryNetwork.deliver` (one segment of one direction: bytes, end of stream or
reset) — override it to delay (keeping each direction in order, as TCP does), or to
drop a connection (:meth:`MemoryConnection.reset`); :meth:`MemoryNetwork.accepts`
decides whether a connect reaches its listener (a partition refuses it).
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import ssl as _ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from .transport import Listening, ProtocolFactory

__all__ = ["MemoryConnection", "MemoryNetwork", "MemoryTransport"]

Address = tuple[str, int]
_ANY = "0.0.0.0"
_WILDCARDS = frozenset(("", _ANY, "::"))
_HIGH_WATER = 64 * 1024  # asyncio's default write buffer limits
_EOF = object()
_RESET = object()


def _host(host: str | None) -> str:
    if host is None or host in _WILDCARDS:
        return _ANY
    return "127.0.0.1" if host == "localhost" else host


class MemoryNetwork:
    """The listeners and connections of one in-memory network (see the module doc).
    ``first_port``: where port numbers handed out for port 0 (listeners and the client
    ends of connections) start."""

    def __init__(self, first_port: int = 20000) -> None:
        self.listeners: dict[Address, _MemoryListening] = {}
        self.connections: set[MemoryConnection] = set()
        self._ports = itertools.count(first_port)

    def transport(self, host: str = "127.0.0.1") -> MemoryTransport:
        """A transport on this network whose connections come from ``host``."""
        return MemoryTransport(self, host=host)

    def deliver(self, conn: MemoryConnection, to_server: bool, arrive: Callable[[], None]) -> None:
        """Carry one segment of ``conn`` (towards its server end when ``to_server``):
        ``arrive()`` hands it to the receiving end. Here: one loop step later, in order.
        A replacement must keep each direction's segments in order."""
        conn.loop.call_soon(arrive)

    def accepts(self, source: str, dest: Address) -> bool:
        """Whether a connect from host ``source`` reaches a listener at ``dest`` (always,
        here; a partition says no and the connect is refused)."""
        return True

    def free_port(self) -> int:
        """A port no listener of this network uses."""
        used = {port for _, port in self.listeners}
        while True:
            port = next(self._ports)
            if port not in used:
                return port

    def lookup(self, host: str, port: int) -> _MemoryListening | None:
        """The listener a connect to ``host:port`` reaches, or None."""
        return self.listeners.get((_host(host), port)) or self.listeners.get((_ANY, port))


class MemoryTransport:
    """A :class:`~hightide.aio.transport.Transport` on a :class:`MemoryNetwork` (a new
    one of its own when ``network`` is None); connections come from ``host``."""

    def __init__(self, network: MemoryNetwork | None = None, *, host: str = "127.0.0.1") -> None:
        self.network = network if network is not None else MemoryNetwork()
        self.host = host

    async def connect(self, protocol_factory: ProtocolFactory, host: str, port: int, *,
                      ssl: _ssl.SSLContext | None = None,
                      server_hostname: str | None = None) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        if ssl is not None:
            raise ValueError("TLS is not supported over the in-memory network")
        await asyncio.sleep(0)  # a connect is never immediate
        net = self.network
        listening = net.lookup(host, port)
        if listening is None or not net.accepts(self.host, (_host(host), port)):
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"Connect call failed ({host!r}, {port})")
        conn = MemoryConnection(net, asyncio.get_running_loop(), (self.host, net.free_port()),
                                (_host(host) if listening.host == _ANY else listening.host, port))
        server = listening.protocol_factory()
        client = protocol_factory()
        conn.server.set_protocol(server)
        conn.client.set_protocol(client)
        net.connections.add(conn)
        server.connection_made(conn.server)
        client.connection_made(conn.client)
        return conn.client, client

    async def listen(self, protocol_factory: ProtocolFactory, host: str | None, port: int, *,
                     ssl: _ssl.SSLContext | None = None, ssl_handshake_timeout: float | None = None,
                     backlog: int = 100, reuse_address: bool | None = None) -> Listening:
        if ssl is not None:
            raise ValueError("TLS is not supported over the in-memory network")
        net = self.network
        bound = _host(host)
        port = port or net.free_port()
        if (bound, port) in net.listeners or (_ANY, port) in net.listeners or (
                bound == _ANY and any(p == port for _, p in net.listeners)):
            raise OSError(errno.EADDRINUSE, f"address {bound}:{port} already in use")
        listening = _MemoryListening(net, bound, port, protocol_factory)
        net.listeners[(bound, port)] = listening
        return listening


class _MemoryListening:
    """A listener of a :class:`MemoryNetwork` (a :class:`~hightide.aio.transport.Listening`)."""

    def __init__(self, network: MemoryNetwork, host: str, port: int, protocol_factory: ProtocolFactory) -> None:
        self.network = network
        self.host, self.port = host, port
        self.protocol_factory = protocol_factory
        self._serving = True

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def is_serving(self) -> bool:
        return self._serving

    def close(self) -> None:
        if self._serving:
            self._serving = False
            if self.network.listeners.get((self.host, self.port)) is self:
                del self.network.listeners[(self.host, self.port)]

    async def wait_closed(self) -> None:
        return


class MemoryConnection:
    """One connection of a :class:`MemoryNetwork`: its ``client`` and ``server`` ends."""

    def __init__(self, network: MemoryNetwork, loop: asyncio.AbstractEventLoop, client: Address,
                 server: Address) -> None:
        self.network = network
        self.loop = loop
        self.client = _End(self, True, sockname=client, peername=server)
        self.server = _End(self, False, sockname=server, peername=client)
        self.client.peer, self.server.peer = self.server, self.client

    def __repr__(self) -> str:
        return f"MemoryConnection({self.client.sockname} -> {self.server.sockname})"

    def reset(self) -> None:
        """Break the connection now, both ways (a reset: data not yet taken is dropped;
        each side gets ``connection_lost(ConnectionResetError)``)."""
        for end in (self.client, self.server):
            end._closing = True
            self.loop.call_soon(end._lose, ConnectionResetError(errno.ECONNRESET, "connection reset"))

    def _ended(self) -> None:
        if self.client._lost and self.server._lost:
            self.network.connections.discard(self)


class _End(asyncio.Transport):
    """One end of a :class:`MemoryConnection` (see the module doc)."""

    def __init__(self, conn: MemoryConnection, is_client: bool, *, sockname: Address, peername: Address) -> None:
        super().__init__()
        self.conn = conn
        self.is_client = is_client
        self.sockname, self.peername = sockname, peername
        self.peer: _End = self
        self._protocol: asyncio.BaseProtocol | None = None
        self._closing = False  # close()/abort() called, or the connection ended
        self._lost = False  # connection_lost delivered
        self._reading_paused = False
        self._eof = False  # the peer's end of stream was handed to the protocol
        self._inbox: deque[Any] = deque()  # segments arrived and not yet taken by the protocol
        self._draining = False
        self._buffered = 0  # bytes written here and not yet taken by the peer's protocol
        self._high, self._low = _HIGH_WATER, _HIGH_WATER // 4
        self._writing_paused = False

    def __repr__(self) -> str:
        return f"<memory transport {self.sockname} -> {self.peername}{' closing' if self._closing else ''}>"

    # -- BaseTransport ------------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peername, "sockname": self.sockname}.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._send(_EOF)
        self.conn.loop.call_soon(self._lose, None)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    # -- ReadTransport ------------------------------------------------------------------
    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            if self._inbox and not self._lost:
                self.conn.loop.call_soon(self._drain)

    # -- WriteTransport -----------------------------------------------------------------
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._flow()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def get_write_buffer_size(self) -> int:
        return self._buffered

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data or self._closing:
            return
        data = bytes(data)  # the caller may reuse its buffer
        self._buffered += len(data)
        self._send(data)
        self._flow()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        raise NotImplementedError("half-close is not supported over the in-memory network")

    def can_write_eof(self) -> bool:
        return False

    def abort(self) -> None:
        if self._lost:
            return
        self._closing = True
        self._inbox.clear()
        self._send(_RESET)
        self.conn.loop.call_soon(self._lose, None)

    # -- the connection's side ----------------------------------------------------------
    def _send(self, segment: Any) -> None:
        peer = self.peer
        self.conn.network.deliver(self.conn, self.is_client, lambda: peer._arrive(segment))

    def _arrive(self, segment: Any) -> None:
        if self._lost:
            if isinstance(segment, bytes):
                self.peer._taken(len(segment))
            return
        if segment is _RESET:
            self._inbox.clear()
            self._closing = True
            self._lose(ConnectionResetError(errno.ECONNRESET, "connection reset by peer"))
            return
        self._inbox.append(segment)
        if not self._reading_paused and not self._draining:
            self._drain()

    def _drain(self) -> None:
        """Hand what arrived to the protocol, in order, while reading is not paused."""
        self._draining = True
        try:
            while self._inbox and not self._reading_paused and not self._lost:
                segment = self._inbox.popleft()
                if segment is _EOF:
                    self._end_of_stream()
                    continue
                if self._closing:  # closed here: nothing more reaches the protocol
                    self.peer._taken(len(segment))
                    continue
                taken = self._feed(segment)
                self.peer._taken(taken)
                if taken < len(segment):
                    self._inbox.appendleft(segment[taken:])
        except Exception as exc:  # noqa: BLE001 - a protocol callback failed: asyncio's _fatal_error
            self.conn.loop.call_exception_handler({
                "message": "Fatal error: protocol callback failed on a memory transport",
                "exception": exc, "transport": self, "protocol": self._protocol})
            self.abort()
        finally:
            self._draining = False

    def _feed(self, data: bytes) -> int:
        """Give ``data`` to the protocol; the byte count it took (less when it paused
        reading meanwhile: the rest stays in the inbox)."""
        protocol = self._protocol
        if not isinstance(protocol, asyncio.BufferedProtocol):
            protocol.data_received(data)  # type: ignore[union-attr]
            return len(data)
        view, done = memoryview(data), 0
        while done < len(data) and not self._reading_paused and not self._closing:
            buf = memoryview(protocol.get_buffer(len(data) - done))
            n = min(len(buf), len(data) - done)
            if n <= 0:
                raise RuntimeError("get_buffer() returned an empty buffer")
            buf[:n] = view[done:done + n]
            done += n
            protocol.buffer_updated(n)
        return done

    def _end_of_stream(self) -> None:
        if self._eof or self._closing:
            return
        self._eof = True
        eof_received = getattr(self._protocol, "eof_received", None)
        keep_open = eof_received() if eof_received is not None else None
        if not keep_open:
            self.close()

    def _taken(self, nbytes: int) -> None:
        """The peer's protocol took ``nbytes`` written here: out of the write buffer."""
        self._buffered -= nbytes
        self._flow()

    def _flow(self) -> None:
        if self._lost or self._protocol is None:
            return
        if not self._writing_paused and self._buffered > self._high:
            self._writing_paused = True
            self._protocol.pause_writing()
        elif self._writing_paused and self._buffered <= self._low:
            self._writing_paused = False
            self._protocol.resume_writing()

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = self._closing = True
        self._inbox.clear()
        protocol = self._protocol
        self.conn._ended()
        if protocol is not None:
            protocol.connection_lost(exc)
