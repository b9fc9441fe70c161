"""The simulated network: a :class:`~hightide.aio.transport.Transport` between the nodes
and clients of one :class:`~.loop.SimLoop`, with faults.

Each connection is two one-way pipes of TCP's kind: bytes arrive in the order they were
sent (per connection, per direction), each write after a delay the seed picks, never
before an earlier write of the same pipe. The ends belong to the node (or client) whose
code opened or accepted them — the :data:`~.loop.NODE` of the calling context — and
everything delivered to an end runs in that end's context, so a paused node reads
nothing (the bytes wait, as in its socket buffer) and a killed node's ends are gone.

Faults (:class:`SimNetwork` methods, called by the fault schedule):

- ``delay``: extra latency on every pipe for a while (``slow(extra_s)``);
- ``partition(a, b, both_ways)``: bytes from ``a``'s nodes to ``b``'s are held
  (TCP retransmits them once the path heals: ``heal()`` delivers them in order), and a
  new connection from ``a`` to ``b`` hangs (its SYN is lost) until the caller's deadline;
- ``sever(node)``: every connection of ``node`` is reset (both ends see the loss) — the
  "drop by closing the connection" fault;
- ``node_killed(node)``: the kernel closes a killed process's sockets: its peers see the
  connections close; its listeners go away (a connect is refused).

Addresses are ``(host, port)`` pairs the nodes listen on, e.g. ``("n1", 9092)``; a
connect to an address nobody listens on is refused at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .loop import NODE, NodeRun

__all__ = ["SimNetwork"]

Party = int  # a node id, or a client id (>= 1000)


def _party() -> tuple[Party, NodeRun | None]:
    run = NODE.get()
    return (run.node_id, run) if run is not None else (CLIENT.get(), None)


#: The client whose code is running (clients are not nodes: they are never paused).
CLIENT: contextvars.ContextVar[int] = contextvars.ContextVar("hightide_sim_client", default=1000)


@dataclass(eq=False)
class _End:
    """One end of a connection: its protocol, owner and the context its callbacks run in."""

    party: Party
    run: NodeRun | None
    context: contextvars.Context
    protocol: asyncio.BaseProtocol | None = None
    transport: SimTransport | None = None
    closed: bool = False  # connection_lost delivered (or its owner is dead)
    reading: bool = True
    backlog: list[tuple[str, bytes]] = field(default_factory=list)  # while reading is paused


@dataclass(eq=False)
class _Pipe:
    """One direction of a connection."""

    src: _End
    dst: _End
    last_at: float = 0.0  # when the previous item arrives (FIFO)
    held: list[tuple[str, bytes]] = field(default_factory=list)  # while partitioned


class SimTransport(asyncio.Transport):
    """The asyncio transport of one end."""

    def __init__(self, net: SimNetwork, conn: _Conn, end: _End, peer: tuple[str, int], sock: tuple[str, int]) -> None:
        super().__init__()
        self._net, self._conn, self._end = net, conn, end
        self._extra = {"peername": peer, "sockname": sock, "socket": None, "sslcontext": None}
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._net._send(self._conn, self._end, "data", bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._net._send(self._conn, self._end, "close", b"")
            self._net.loop.call_soon(self._net._lose, self._end, None, context=self._end.context)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self._end.reading = False

    def resume_reading(self) -> None:
        if not self._end.reading:
            self._end.reading = True
            backlog, self._end.backlog = self._end.backlog, []
            for kind, data in backlog:
                self._net._deliver(self._end, kind, data)

    def is_reading(self) -> bool:
        return self._end.reading

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._end.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._end.protocol is not None
        return self._end.protocol


@dataclass(eq=False)
class _Conn:
    a: _End  # the connecting end
    b: _End  # the accepting end
    ab: _Pipe = field(init=False)
    ba: _Pipe = field(init=False)

    def __post_init__(self) -> None:
        self.ab, self.ba = _Pipe(self.a, self.b), _Pipe(self.b, self.a)

    def pipe_from(self, end: _End) -> _Pipe:
        return self.ab if end is self.a else self.ba


class SimListener:
    """What :meth:`SimNetwork.listen` returns (the part of ``asyncio.Server`` the broker uses)."""

    def __init__(self, net: SimNetwork, address: tuple[str, int], run: NodeRun | None) -> None:
        self.net, self.address, self.run = net, address, run

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def sockets(self) -> list[_BoundName]:
        """As ``asyncio.Server.sockets``: one "socket" whose ``getsockname()`` is the address."""
        return [_BoundName(self.address)]

    def is_serving(self) -> bool:
        return self.net._listeners.get(self.address) is not None

    def close(self) -> None:
        self.net._listeners.pop(self.address, None)

    async def wait_closed(self) -> None:
        return None


@dataclass(frozen=True)
class _BoundName:
    address: tuple[str, int]

    def getsockname(self) -> tuple[str, int]:
        return self.address


@dataclass(eq=False)
class _Listening:
    factory: Callable[[], asyncio.BaseProtocol]
    run: NodeRun | None
    context: contextvars.Context
    party: Party


class SimNetwork:
    """See the module doc. ``rng`` is the run's seeded random source; ``latency_s`` the
    (min, max) delay of one write."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random,
                 latency_s: tuple[float, float] = (0.0001, 0.002)) -> None:
        self.loop = loop
        self.rng = rng
        self.latency_s = latency_s
        self.extra_s = 0.0
        self._listeners: dict[tuple[str, int], _Listening] = {}
        self._conns: list[_Conn] = []
        self._blocked: set[tuple[Party, Party]] = set()  # (from, to): bytes held
        self._healed: asyncio.Event | None = None
        self._next_port = 40000
        self.stats: dict[str, int] = {"connections": 0, "writes": 0, "bytes": 0, "resets": 0}
        #: A digest of every write (time, ends, bytes): two runs of one seed must agree on it.
        self.digest = hashlib.blake2b(digest_size=16)

    # --- the Transport seam ---------------------------------------------------------------

    async def listen(self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str | None, port: int, *,
                     ssl: Any = None, **_: Any) -> SimListener:
        if ssl is not None:
            raise ValueError("the simulated network carries no TLS")
        party, run = _party()
        address = (host or "0.0.0.0", port)
        if address in self._listeners:
            raise OSError(98, f"address {host}:{port} already in use")
        self._listeners[address] = _Listening(protocol_factory, run, contextvars.copy_context(), party)
        return SimListener(self, address, run)

    async def connect(self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str, port: int, *,
                      ssl: Any = None, server_hostname: str | None = None
                      ) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        if ssl is not None:
            raise ValueError("the simulated network carries no TLS")
        party, run = _party()
        listening = self._listeners.get((host, port))
        if listening is None or (listening.run is not None and listening.run.state == "dead"):
            raise ConnectionRefusedError(111, f"connect to {host}:{port} refused")
        while (party, listening.party) in self._blocked or (listening.party, party) in self._blocked:
            await self._wait_healed()  # the SYN (or its answer) is lost: the caller's deadline ends it
            listening = self._listeners.get((host, port))
            if listening is None:
                raise ConnectionRefusedError(111, f"connect to {host}:{port} refused")
        await asyncio.sleep(self._delay())  # the handshake's round trip
        a = _End(party, run, contextvars.copy_context())
        b = _End(listening.party, listening.run, listening.context)
        conn = _Conn(a, b)
        self._conns.append(conn)
        self.stats["connections"] += 1
        self._next_port += 1
        local = (f"c{party}", self._next_port)
        a.transport = a_transport = SimTransport(self, conn, a, (host, port), local)
        b.transport = b_transport = SimTransport(self, conn, b, local, (host, port))
        a.protocol = a_protocol = protocol_factory()
        a_protocol.connection_made(a_transport)

        def accept() -> None:
            if b.run is not None and b.run.state == "dead":
                return
            b.protocol = listening.factory()
            b.protocol.connection_made(b_transport)
            for kind, data in b.backlog:
                self._deliver(b, kind, data)
            b.backlog = []
        self.loop.call_soon(accept, context=b.context)
        return a_transport, a_protocol

    # --- delivery ---------------------------------------------------------------------------

    def _delay(self) -> float:
        lo, hi = self.latency_s
        return self.rng.uniform(lo, hi) + self.extra_s

    def _send(self, conn: _Conn, src: _End, kind: str, data: bytes) -> None:
        pipe = conn.pipe_from(src)
        self.stats["writes"] += 1
        self.stats["bytes"] += len(data)
        self.digest.update(b"%r %d>%d %s %d:" % (self.loop.time(), pipe.src.party, pipe.dst.party, kind.encode(),
                                                len(data)))
        self.digest.update(data)
        if (pipe.src.party, pipe.dst.party) in self._blocked:
            pipe.held.append((kind, data))
            return
        self._schedule(pipe, kind, data)

    def _schedule(self, pipe: _Pipe, kind: str, data: bytes) -> None:
        at = max(self.loop.time() + self._delay(), pipe.last_at + 1e-6)  # strictly later: FIFO
        pipe.last_at = at
        dst = pipe.dst
        self.loop.call_at(at, self._arrive, dst, kind, data, context=dst.context)

    def _arrive(self, dst: _End, kind: str, data: bytes) -> None:
        if dst.protocol is None or not dst.reading:
            dst.backlog.append((kind, data))
            return
        self._deliver(dst, kind, data)

    def _deliver(self, dst: _End, kind: str, data: bytes) -> None:
        if dst.closed or dst.protocol is None:
            return
        if kind == "data":
            proto = dst.protocol
            if isinstance(proto, asyncio.BufferedProtocol):
                view = memoryview(data)
                while view and not dst.closed:
                    buf = memoryview(proto.get_buffer(len(view)))
                    n = min(len(buf), len(view))
                    buf[:n] = view[:n]
                    proto.buffer_updated(n)
                    view = view[n:]
            elif isinstance(proto, asyncio.Protocol):
                proto.data_received(data)
        else:
            self._lose(dst, ConnectionResetError("connection reset by peer") if kind == "reset" else None)

    def _lose(self, end: _End, exc: Exception | None) -> None:
        if end.closed:
            return
        end.closed = True
        if end.transport is not None:
            end.transport._closing = True
        if end.protocol is not None:
            end.protocol.connection_lost(exc)

    # --- faults -------------------------------------------------------------------------------

    def partition(self, side_a: set[Party], side_b: set[Party], *, both_ways: bool = True) -> None:
        """Hold bytes from ``side_a`` to ``side_b`` (and back, with ``both_ways``)."""
        for x in side_a:
            for y in side_b:
                self._blocked.add((x, y))
                if both_ways:
                    self._blocked.add((y, x))

    def heal(self) -> None:
        """Every partition ends: held bytes are delivered in order; hung connects go on."""
        self._blocked.clear()
        for conn in self._conns:
            for pipe in (conn.ab, conn.ba):
                held, pipe.held = pipe.held, []
                for kind, data in held:
                    self._schedule(pipe, kind, data)
        if self._healed is not None:
            self._healed.set()
            self._healed = None

    async def _wait_healed(self) -> None:
        if self._healed is None:
            self._healed = asyncio.Event()
        await self._healed.wait()

    def slow(self, extra_s: float) -> None:
        """Add ``extra_s`` to every write's delay (0: back to normal)."""
        self.extra_s = extra_s

    def sever(self, party: Party) -> int:
        """Reset every connection of ``party`` (both ends see it lost). Returns how many."""
        n = 0
        for conn in list(self._conns):
            if party in (conn.a.party, conn.b.party) and not (conn.a.closed and conn.b.closed):
                n += 1
                for end in (conn.a, conn.b):
                    if end.run is None or end.run.state != "dead":
                        self.loop.call_soon(self._lose, end, ConnectionResetError("connection reset"),
                                            context=end.context)
        self.stats["resets"] += n
        self._gc()
        return n

    def node_killed(self, run: NodeRun) -> None:
        """``run`` was killed: its listeners go, its peers see its connections close."""
        for address, listening in list(self._listeners.items()):
            if listening.run is run:
                del self._listeners[address]
        for conn in self._conns:
            for mine in (conn.a, conn.b):
                if mine.run is run and not mine.closed:
                    mine.closed = True
                    self._send(conn, mine, "reset", b"")
        self._gc()

    def _gc(self) -> None:
        self._conns = [c for c in self._conns if not (c.a.closed and c.b.closed)]
