"""A fault-injecting TCP proxy on loopback, for network faults between a broker and the
controller (``DevCluster.route_via(broker_id, *proxy.address)``).

Theory of operation: an asyncio server runs in a daemon thread of its own (so synchronous
tests can drive it). Each accepted connection opens one upstream connection and runs two
pumps, client→upstream ("up") and upstream→client ("down"). A pump reads chunks and
queues each with the time it may be written (now + that direction's latency); a writer
sends queued chunks in order once they are due and the proxy is not paused. Faults,
settable at any time from any thread:

- ``set_latency(up_ms, down_ms)``: added delay per direction (order kept);
- ``pause()`` / ``resume()``: hold every byte (connections stay open) until resumed;
- ``blackhole(True)``: read and discard every byte both ways (a silent partition);
- ``refuse(True)``: close new connections at once (a crashed or unreachable peer);
- ``close_connections()``: abort every open connection (a reset).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from typing import Any

__all__ = ["FaultProxy"]


class _Direction:
    """Settings and counters of one direction."""

    def __init__(self) -> None:
        self.latency_s = 0.0
        self.bytes = 0


class FaultProxy:
    """Listens on ``host:port`` (0: a free port) and forwards to ``upstream``.
    ``start()`` before use, ``stop()`` after (or ``with FaultProxy(...) as p``)."""

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._bind = (host, port)
        self.up, self.down = _Direction(), _Direction()
        self._blackhole = False
        self._refuse = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._gate: asyncio.Event | None = None
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.accepted = 0
        self.address: tuple[str, int] = (host, port)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FaultProxy:
        """Bind and serve in a background thread; returns once listening."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._open())
            ready.set()
            self._loop.run_forever()
        self._thread = threading.Thread(target=run, name=f"proxy->{self.upstream[1]}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    async def _open(self) -> None:
        self._gate = asyncio.Event()
        self._gate.set()
        self._server = await asyncio.start_server(self._accept, *self._bind)
        self.address = self._server.sockets[0].getsockname()[:2]

    def stop(self) -> None:
        """Close the listener and every connection, end the thread. Idempotent."""
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            self._abort_all()
            assert self._gate is not None
            self._gate.set()
        asyncio.run_coroutine_threadsafe(shut(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()

    def _call(self, fn: Any, *args: Any) -> None:
        if self._loop is None:
            raise RuntimeError("the proxy is not running")
        done = threading.Event()

        def go() -> None:
            try:
                fn(*args)
            finally:
                done.set()
        self._loop.call_soon_threadsafe(go)
        done.wait(10)

    # -- faults --------------------------------------------------------------------------
    def set_latency(self, up_ms: float = 0.0, down_ms: float = 0.0) -> None:
        """Delay bytes client→upstream by ``up_ms`` and upstream→client by ``down_ms``."""
        self.up.latency_s, self.down.latency_s = up_ms / 1000, down_ms / 1000

    def pause(self) -> None:
        """Hold every byte in both directions until :meth:`resume`."""
        assert self._gate is not None
        self._call(self._gate.clear)

    def resume(self) -> None:
        assert self._gate is not None
        self._call(self._gate.set)

    def blackhole(self, on: bool = True) -> None:
        """Discard every byte read from now on (connections stay open, nothing answers)."""
        self._blackhole = on

    def refuse(self, on: bool = True) -> None:
        """Close new connections as soon as they are accepted."""
        self._refuse = on

    def close_connections(self) -> None:
        """Abort every open connection (both sides see a reset)."""
        self._call(self._abort_all)

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def _abort_all(self) -> None:
        for client, upstream in list(self._conns):
            client.transport.abort()
            upstream.transport.abort()
        self._conns.clear()

    # -- forwarding ----------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._refuse:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._conns.add(pair)
        try:
            await asyncio.gather(self._pump(reader, up_writer, self.up),
                                 self._pump(up_reader, writer, self.down))
        finally:
            self._conns.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, d: _Direction) -> None:
        """Copy ``reader`` to ``writer`` under the faults; returns when either side ends
        (and then closes the writer so the other pump ends too)."""
        queue: deque[tuple[float, bytes]] = deque()
        more = asyncio.Event()
        eof = False

        async def write_due() -> None:
            assert self._gate is not None
            while queue or not eof:
                if not queue:
                    more.clear()
                    await more.wait()
                    continue
                due, chunk = queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._gate.wait()
                queue.popleft()
                writer.write(chunk)
                d.bytes += len(chunk)
                await writer.drain()
        writer_task = asyncio.ensure_future(write_due())
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if self._blackhole:
                    continue
                queue.append((time.monotonic() + d.latency_s, chunk))
                more.set()
        except (ConnectionError, OSError):
            pass
        finally:
            eof = True
            more.set()
        with contextlib.suppress(ConnectionError, OSError):
            await writer_task
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()
