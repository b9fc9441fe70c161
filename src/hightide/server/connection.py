"""One client connection: a thin ``asyncio.BufferedProtocol`` around the sans-IO
:class:`~hightide.protocol.server_connection.ServerConnection`.

Theory of operation: bytes are received straight into the protocol core's buffer; each
request event it returns is run at once (pipelining) by its route's handler. A
synchronous handler's answer is passed to the core at once, an asynchronous one's
(long-poll Fetch, Produce waiting for fsync) when it completes; the core returns the
bytes to write, strictly in request order. All the protocol -- framing, headers,
version gating, the ApiVersions fallback, ordering -- is in the core; this shell only
moves bytes, runs handlers, and applies back-pressure:

* reading pauses while ``queued.max.requests`` requests are in flight (answered ones
  waiting behind a slow one count), and while the transport's write buffer is above its
  high-water mark (a client that sends but does not read its answers); requests already
  received stay in the core (copied only if more bytes must be received meanwhile) and
  run once it clears; reading resumes when in flight falls below half the limit;
* the connection is closed after ``connections.max.idle.ms`` without a request;
* a protocol violation, a handler's ``CloseConnection`` or a handler failure closes the
  connection with a logged reason; nothing else does. A half-closed client gets its
  in-flight answers, then the connection closes.

Each request is written to the request log (:mod:`.request_log`, logger
``hightide.request`` at DEBUG) when it is answered; when that logger is off, a request
costs one ``isEnabledFor`` check.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..protocol.errors import PeerProtocolError
from ..protocol.server_connection import NEED_DATA, Answered, Request, ServerConnection
from . import request_log
from .context import RequestContext, Services
from .registry import CloseConnection, Route

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.server")
_REQUEST_LOG = request_log.REQUEST_LOGGER
_DEBUG = logging.DEBUG

# The rolling receive buffer of each connection. Frames larger than it get a dedicated
# buffer anyway (see FrameReader), so it only needs to hold a run of small pipelined
# requests; 256 KiB per connection made 1,000 idle connections cost 250 MB of RSS.
RECEIVE_CHUNK = 32 * 1024
WRITE_HIGH_WATER = 1024 * 1024  # pause reading while more than this waits to be sent


class KafkaConnection(asyncio.BufferedProtocol):
    """``broker`` provides ``config``, ``routes``, ``services`` and the ``connections``
    set this connection adds itself to while open. ``services`` (with its own
    ``routes``) overrides the broker's for a listener with its own route table, such as
    a controller listener."""

    def __init__(self, broker: "Broker", services: "Services | None" = None) -> None:
        self.broker = broker
        cfg = broker.config
        self.services = services or broker.services
        routes = services.routes if services is not None else broker.routes  # the broker's: its default listener
        self.conn: ServerConnection[Route] = ServerConnection(routes, cfg["socket.request.max.bytes"], RECEIVE_CHUNK)
        self.max_queued = cfg["queued.max.requests"]
        self.idle_ms = cfg["connections.max.idle.ms"]
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.paused = False  # back-pressure applies: no request is run (either reason below)
        self.write_paused = False  # the transport's write buffer is above its high-water mark
        self._reading_paused = False  # the transport's reading is paused by us
        self._running = False  # inside _run_received (no re-entry)
        self.closing = False
        self.last_active = time.monotonic()
        self._idle_handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._started: dict[int, float] = {}  # slot -> receipt time, only while the request log is on

    # -- asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.broker.connections.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.broker.connections.discard(self)
        if self._idle_handle:
            self._idle_handle.cancel()
        for t in list(self._tasks):
            t.cancel()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._check_backpressure()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._check_backpressure()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            self.conn.buffer_updated(nbytes)
        except PeerProtocolError as exc:
            self._protocol_error(exc)
            return
        self._run_received()

    def eof_received(self) -> bool | None:
        # Client half-closed: finish in-flight work, then close.
        if not self.conn.in_flight:
            return False
        self.closing = True
        return True

    # -- requests -------------------------------------------------------------------
    def _run_received(self) -> None:
        """Run received requests until none is complete or back-pressure applies."""
        if self._running:
            return
        self._running = True
        try:
            conn = self.conn
            while not self.paused and self._open():
                try:
                    event = conn.next_request()
                except PeerProtocolError as exc:
                    self._protocol_error(exc)
                    return
                if event is NEED_DATA:
                    break
                if type(event) is Answered:
                    self._write(event.buffers)
                    if _REQUEST_LOG.isEnabledFor(_DEBUG):
                        request_log.log_answered(event.header, self.peer)
                    self._check_backpressure()
                else:
                    self._run(event)  # type: ignore[arg-type]
        finally:
            self._running = False
        self._check_backpressure()

    def _run(self, request: Request[Route]) -> None:
        route, header = request.route, request.header
        if _REQUEST_LOG.isEnabledFor(_DEBUG):  # the request log's one check per request when off
            self._started[request.slot] = time.perf_counter()
        ctx = RequestContext(self.services, header, self.peer, request.unknown_tags)
        try:
            result = route.fn(ctx, request.body)
        except CloseConnection as exc:
            self.close(exc.reason)
            return
        except PeerProtocolError as exc:
            self._protocol_error(exc)
            return
        except Exception:
            log.exception("handler %s v%d failed for %s; closing connection", route.name, header.api_version, self.peer)
            self.close("internal error")
            return
        if hasattr(result, "__await__"):  # a coroutine or future (inspect.isawaitable costs 10x)
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, request=request))
            self._check_backpressure()
        else:
            self._answer(request, result)

    def _finished(self, task: asyncio.Task, request: Request[Route]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("async handler for api %d failed for %s; closing connection", request.header.api_key,
                      self.peer, exc_info=exc)
            self.close("internal error")
            return
        self._answer(request, task.result())

    def _answer(self, request: Request[Route], result: Any) -> None:
        try:
            out = self.conn.send(request.slot, result)
        except Exception:
            log.exception("encoding the answer of %s v%d for %s failed; closing connection", request.route.name,
                          request.header.api_version, self.peer)
            self.close("internal error")
            return
        if out:
            self._write(out)
        if self._started:
            started = self._started.pop(request.slot, None)
            if started is not None:
                request_log.log_completed(request.header, self.peer, result, started)
        if self.paused or self.conn.pending_responses:  # else nothing can have changed
            self._check_backpressure()
        if self.closing and not self.conn.in_flight and self._open():
            self.transport.close()  # type: ignore[union-attr]

    def _write(self, buffers: Sequence[bytes | memoryview]) -> None:
        t = self.transport
        if not buffers or t is None or t.is_closing():
            return
        if len(buffers) == 1:
            t.write(buffers[0])
        else:
            t.writelines(buffers)

    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _check_backpressure(self) -> None:
        """Stop running requests (and pause reading) at ``queued.max.requests`` in flight
        or a full write buffer; once both are clear (in flight below half the limit:
        hysteresis) run the requests held meanwhile, then resume reading if still clear."""
        t = self.transport
        if t is None or t.is_closing():
            return
        pending = self.conn.pending_responses
        if not self.paused:
            if self.write_paused or pending >= self.max_queued:
                self.paused = True
                if not self._reading_paused:
                    self._reading_paused = True
                    t.pause_reading()
            elif self._reading_paused and not self._running:
                self._reading_paused = False
                t.resume_reading()
        elif not self.write_paused and pending < self.max_queued // 2 + 1:
            self.paused = False
            if not self._running:
                self._run_received()  # runs held requests; ends in _check_backpressure again

    def _protocol_error(self, exc: PeerProtocolError) -> None:
        self.close(f"protocol error: {exc.reason} ({exc.error_code.name})")

    # -- lifecycle ------------------------------------------------------------------
    def _arm_idle_timer(self) -> None:
        if self.idle_ms is None or self.idle_ms < 0:
            return
        loop = asyncio.get_running_loop()
        self._idle_handle = loop.call_later(min(self.idle_ms / 1000, 30.0), self._idle_check)

    def _idle_check(self) -> None:
        if self.closing:
            return
        idle = (time.monotonic() - self.last_active) * 1000
        if idle >= self.idle_ms and not self.conn.pending_responses:
            self.close(f"idle for {idle:.0f} ms (connections.max.idle.ms={self.idle_ms})", level=logging.INFO)
            return
        loop = asyncio.get_running_loop()
        remaining = max(0.05, (self.idle_ms - idle) / 1000)
        self._idle_handle = loop.call_later(min(remaining, 30.0), self._idle_check)

    def close(self, reason: str, level: int = logging.WARNING) -> None:
        if self.transport is not None and not self.transport.is_closing():
            log.log(level, "closing connection from %s: %s", self.peer, reason)
            self.transport.close()
        self.closing = True

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered on the wire (held ones included)."""
        return self.conn.in_flight
