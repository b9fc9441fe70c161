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
* a client over its quota (the handler set ``ctx.throttle_ms``, see :mod:`.quotas`) has
  its channel **muted** once the throttled answer is handed to the transport (KIP-219):
  no request is run and nothing is read for the throttle time (one timer; a later
  throttle extends it), then reading resumes; a connection closed meanwhile just drops
  the timer;
* a protocol violation, a handler's ``CloseConnection`` or a handler failure closes the
  connection with a logged reason; nothing else does. A half-closed client gets its
  in-flight answers, then the connection closes.

Authentication (issue 17): each connection holds a session chosen by its listener's
:class:`~.listener_security.ListenerSecurity` when it is made (after the TLS handshake on
a TLS listener). On a SASL listener the protocol core's ``gate`` asks the session
(:meth:`~hightide.security.session.SaslSession.admit`) before a request's body is
decoded: SaslHandshake/SaslAuthenticate are answered by the session itself, a refused
request gets its error (or none) and the connection closes after
``connection.failed.authentication.delay.ms`` (timer, never a blocking sleep; nothing
more is read meanwhile); a connection that has not authenticated within
``connections.authentication.timeout.ms`` of connecting is closed (slow clients that
never finish). While the connection is not authenticated (and during a
re-authentication) every frame is bounded by ``sasl.server.max.receive.size`` at its size
field: a larger one fails the authentication and closes the connection at once, nothing
of its size allocated (Kafka's ``SaslServerAuthenticator``). Handlers see the
authenticated principal as ``ctx.principal``. Neither authentication bytes nor passwords
are ever logged. A closed connection leaves no reference cycle behind (the gate, a bound
method, is dropped; a stored protocol error loses its traceback), so reference counting
frees it and its buffers at once: the tuned collector (``gc.freeze``, a large young
threshold) would take long to find a cycle.

Fetch answers may hold file regions (record bytes left in the segment files, see
:mod:`.zero_copy`): on a plaintext listener, when nothing is queued in the transport,
they are written straight to the socket (headers with ``writev``, records with
``sendfile``) and only what the kernel does not take goes through the transport; on a
TLS listener, or behind queued bytes, they are read into bytes and written through the
transport. Every region is closed once written or when its answer is dropped (the
connection closed first); a region whose file was cut short under it closes the
connection (the client retries).

Each request is written to the request log (:mod:`.request_log`, logger
``hightide.request`` at DEBUG) when it is answered; when that logger is off, a request
costs one ``isEnabledFor`` check.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import MutableSet, Sequence
from typing import Any, Protocol

from ..aio.clock import SYSTEM_CLOCK, Cancellable, Clock
from ..protocol.build import materialize
from ..protocol.codec import RequestHeader, response_schema
from ..protocol.errors import ErrorCode, PeerProtocolError
from ..protocol.framing import FrameTooLarge
from ..protocol.regions import ResponseBuffer, close_regions, has_region
from ..protocol.server_connection import NEED_DATA, Answered, Refused, Request, ServerConnection
from ..security.session import REJECT, SASL, SERVE, Admission, AuthenticatedSession, SaslSession
from . import request_log
from .context import ANONYMOUS, RequestContext, Services, _host_of
from .listener_security import PLAINTEXT, ListenerSecurity, Session
from ..config import BrokerConfig
from .registry import CloseConnection, RawResponse, Route, Routes
from .tls import PrincipalFailure
from .zero_copy import RegionTruncated, remainder, send_now

class ConnectionOwner(Protocol):
    """What a connection uses of the node that accepted it (its
    :class:`~.listeners.Listeners` satisfy it): its config, its default route table and
    services, and the set of open connections."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def routes(self) -> Routes: ...

    @property
    def services(self) -> Services: ...

    @property
    def connections(self) -> MutableSet[KafkaConnection]: ...

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
    a controller listener. ``clock`` (the node's, :mod:`hightide.aio.clock`) times the
    idle and authentication timers, the SASL sessions and the requests' arrival."""

    def __init__(self, broker: ConnectionOwner, services: Services | None = None,
                 security: ListenerSecurity | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker = broker
        self.security = security or PLAINTEXT
        self.session: Session = AuthenticatedSession()
        self.principal = ANONYMOUS
        self.client_host = "?"
        self._admission: Admission | None = None  # the gate's verdict on the request just returned
        self._failed = False  # authentication failed: nothing more is run, the close is pending
        self._auth_handle: Cancellable | None = None
        cfg = broker.config
        self.services = services or broker.services
        self.clock = clock
        routes = services.routes if services is not None else broker.routes  # the broker's: its default listener
        self.max_frame_bytes = cfg["socket.request.max.bytes"]
        self.conn: ServerConnection[Route] = ServerConnection(routes, self.max_frame_bytes, RECEIVE_CHUNK)
        self._sasl_limited = False  # frames are bounded by sasl.server.max.receive.size (not authenticated)
        self.max_queued = cfg["queued.max.requests"]
        self.idle_ms = cfg["connections.max.idle.ms"]
        self.transport: asyncio.Transport | None = None
        self._sock_fd = -1  # the plaintext socket's fd for sendfile (-1: TLS or no socket)
        self._unsent: list[ResponseBuffer] = []  # written directly, not yet taken by the kernel
        self._unsent_start = 0  # bytes of _unsent[0] already sent
        self._unsent_bytes = 0
        self._unsent_paused = False  # reading paused by _throttle_unsent
        self._writable_fd = -1  # a dup of the socket watched for writability while _unsent
        self.peer = "?"
        self.paused = False  # back-pressure applies: no request is run (either reason below)
        self.write_paused = False  # the transport's write buffer is above its high-water mark
        self._reading_paused = False  # the transport's reading is paused by us
        self._running = False  # inside _run_received (no re-entry)
        self.closing = False
        self.last_active = self.clock.monotonic()
        self._idle_handle: Cancellable | None = None
        self._tasks: set[asyncio.Task] = set()
        self._started: dict[int, float] = {}  # slot -> receipt time, only while the request log is on
        self._muted = False  # throttled by a client quota (KIP-219): nothing is read or run
        self._mute_until = 0.0
        self._mute_handle: Cancellable | None = None

    # -- asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = _host_of(self.peer)
        self.broker.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and self.security.ssl_context is None:
            self._sock_fd = sock.fileno()
        self._arm_idle_timer()
        if not self.security.plaintext:
            self._start_session(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._sock_fd = -1
        self._drop_unsent()
        self.conn.close()  # held answers are dropped, their regions closed
        self.broker.connections.discard(self)
        if self._idle_handle:
            self._idle_handle.cancel()
        if self._auth_handle:
            self._auth_handle.cancel()
        if self._mute_handle:
            self._mute_handle.cancel()
            self._mute_handle = None
        for t in list(self._tasks):
            t.cancel()
        self.conn.gate = None  # the gate is a bound method of this connection: no cycle is left behind

    def pause_writing(self) -> None:
        self.write_paused = True
        self._check_backpressure()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._check_backpressure()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self.clock.monotonic()
        try:
            self.conn.buffer_updated(nbytes)
        except FrameTooLarge as exc:
            if self._sasl_limited:
                self._receive_size_failed(exc)
            else:
                self._protocol_error(exc)
            return
        except PeerProtocolError as exc:
            self._protocol_error(exc)
            return
        self._run_received()

    def eof_received(self) -> bool | None:
        # Client half-closed: finish in-flight work (and direct sends), then close.
        if not self.in_flight:
            return False
        self.closing = True
        # TLS cannot stay half-open (asyncio closes it and warns on True): in-flight answers are lost
        return None if self.security.ssl_context is not None else True

    # -- requests -------------------------------------------------------------------
    def _run_received(self) -> None:
        """Run received requests until none is complete or back-pressure applies."""
        if self._running:
            return
        self._running = True
        try:
            conn = self.conn
            while not self.paused and not self._failed and self._open():
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
                elif type(event) is Refused:
                    self._refuse(event)
                else:
                    self._run(event)  # type: ignore[arg-type]
        finally:
            self._running = False
        self._check_backpressure()

    def _run(self, request: Request[Route]) -> None:
        route, header = request.route, request.header
        if _REQUEST_LOG.isEnabledFor(_DEBUG):  # the request log's one check per request when off
            self._started[request.slot] = self.clock.monotonic()
        if self._admission is not None and self._admission.action == SASL:
            self._admission = None
            self._sasl(request)
            return
        ctx = RequestContext(self.services, header, self.peer, request.unknown_tags, self.clock.now_ms(),
                             self.principal, self.client_host)
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
            task.add_done_callback(functools.partial(self._finished, request=request, ctx=ctx))
            self._check_backpressure()
        else:
            self._answer(request, result)
            if ctx.throttle_ms:
                self._mute(ctx.throttle_ms)

    def _finished(self, task: asyncio.Task, request: Request[Route], ctx: RequestContext) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, CloseConnection):  # e.g. an acks=0 Produce held for its verification
            self.close(exc.reason)
            return
        if exc is not None:
            log.error("async handler for api %d failed for %s; closing connection", request.header.api_key,
                      self.peer, exc_info=exc)
            self.close("internal error")
            return
        self._answer(request, task.result())
        if ctx.throttle_ms:
            self._mute(ctx.throttle_ms)

    def _mute(self, throttle_ms: int) -> None:
        """Mute the channel for ``throttle_ms`` (a client quota's throttle, KIP-219)."""
        if self.closing or not self._open():
            return
        until = self.clock.monotonic() + throttle_ms / 1000
        if self._muted and until <= self._mute_until:
            return
        if self._mute_handle is not None:
            self._mute_handle.cancel()
        self._muted, self._mute_until = True, until
        self._mute_handle = self.clock.call_later(throttle_ms / 1000, self._unmute)
        self._check_backpressure()

    def _unmute(self) -> None:
        self._muted, self._mute_handle = False, None
        self._check_backpressure()

    def _answer(self, request: Request[Route], result: Any) -> None:
        try:
            out = self.conn.send(request.slot, result)
        except Exception:
            log.exception("encoding the answer of %s v%d for %s failed; closing connection", request.route.name,
                          request.header.api_version, self.peer)
            if isinstance(result, RawResponse):
                close_regions(result.buffers)
            self.close("internal error")
            return
        if out:
            self._write(out)
        if self._started:
            started = self._started.pop(request.slot, None)
            if started is not None:
                latency_ms = (self.clock.monotonic() - started) * 1000
                request_log.log_completed(request.header, self.peer, result, latency_ms)
        if self.paused or self.conn.pending_responses:  # else nothing can have changed
            self._check_backpressure()
        if self.closing and not self.conn.in_flight and not self._unsent and self._open():
            self.transport.close()  # type: ignore[union-attr]

    def _write(self, buffers: Sequence[ResponseBuffer]) -> None:
        """Write an answer's buffers in order; regions among them are sent (see the
        module docstring) and closed, also when the connection is already closing."""
        t = self.transport
        if not buffers:
            return
        if t is None or t.is_closing():
            close_regions(buffers)
            return
        if self._unsent:  # a direct send is under way: everything queues behind it
            self._unsent.extend(buffers)
            self._unsent_bytes += sum(map(len, buffers))
            self._throttle_unsent()
        elif has_region(buffers):
            self._write_regions(t, buffers)
        elif len(buffers) == 1:
            t.write(buffers[0])  # type: ignore[arg-type]  # bytes (no region)
        else:
            t.writelines(buffers)  # type: ignore[arg-type]

    def _write_regions(self, t: asyncio.Transport, buffers: Sequence[ResponseBuffer]) -> None:
        """Straight to the socket while the transport has nothing queued (uvloop's
        ``get_write_buffer_size`` counts its own buffer and libuv's write queue, so a
        direct write never overtakes queued bytes); what the kernel does not take now
        waits for the socket to be writable (:meth:`_send_unsent`). On TLS, or behind
        queued bytes, the regions are read and go through the transport."""
        if self._sock_fd < 0 or t.get_write_buffer_size():
            try:
                t.writelines(remainder(buffers, 0, 0))
            except OSError as exc:
                self._write_failed(exc)
            finally:
                close_regions(buffers)
            return
        self._unsent = list(buffers)
        self._unsent_start = 0
        self._unsent_bytes = sum(map(len, buffers))
        self._send_unsent()

    def _send_unsent(self) -> None:
        """Send what the socket takes of :attr:`_unsent`; wait for it to be writable
        (a watcher on a dup of the socket's fd, so the transport's own registration is
        untouched) while something is left; close the regions sent."""
        unsent = self._unsent
        if not self._open():  # closed meanwhile: the socket's fd may already be gone
            self._drop_unsent()
            return
        try:
            i, done = send_now(self._sock_fd, unsent, self._unsent_start)
        except OSError as exc:
            self._write_failed(exc)
            return
        if i:
            close_regions(unsent[:i])
            self._unsent_bytes -= sum(map(len, unsent[:i])) - self._unsent_start
            del unsent[:i]
            self._unsent_start = 0
        self._unsent_bytes -= done - self._unsent_start
        self._unsent_start = done
        loop = asyncio.get_running_loop()
        if unsent:
            if self._writable_fd < 0:
                try:
                    self._writable_fd = os.dup(self._sock_fd)
                except OSError as exc:  # out of descriptors
                    self._write_failed(exc)
                    return
                loop.add_writer(self._writable_fd, self._send_unsent)
            self._throttle_unsent()
            return
        if self._writable_fd >= 0:
            loop.remove_writer(self._writable_fd)
            os.close(self._writable_fd)
            self._writable_fd = -1
        self._unsent_bytes = 0
        self._throttle_unsent()
        if self.closing and not self.conn.in_flight and self._open():
            self.transport.close()  # type: ignore[union-attr]  # a half-closed client got its answers

    def _throttle_unsent(self) -> None:
        """Back-pressure for direct sends, as the transport's own: reading pauses above
        the write high-water mark and resumes once the unsent bytes are below a quarter
        of it (while direct sends are pending the transport holds nothing, so it never
        pauses or resumes writing meanwhile)."""
        if self._unsent_bytes > WRITE_HIGH_WATER:
            if not self._unsent_paused:
                self._unsent_paused = self.write_paused = True
                self._check_backpressure()
        elif self._unsent_paused and self._unsent_bytes <= WRITE_HIGH_WATER // 4:
            self._unsent_paused = self.write_paused = False
            self._check_backpressure()

    def _write_failed(self, exc: OSError) -> None:
        if isinstance(exc, RegionTruncated):
            self.close(f"fetch answer cut short, closing so the client retries: {exc}")
        else:
            self.close(f"write failed: {exc}", level=logging.INFO)
        self._drop_unsent()

    def _drop_unsent(self) -> None:
        """Close the regions of answers not sent and stop watching the socket."""
        if self._unsent:
            close_regions(self._unsent)
            self._unsent = []
            self._unsent_bytes = 0
        if self._writable_fd >= 0:
            try:
                asyncio.get_running_loop().remove_writer(self._writable_fd)
            finally:
                os.close(self._writable_fd)
                self._writable_fd = -1

    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _check_backpressure(self) -> None:
        """Stop running requests (and pause reading) at ``queued.max.requests`` in flight,
        a full write buffer or while muted by a quota; once all are clear (in flight below half the limit:
        hysteresis) run the requests held meanwhile, then resume reading if still clear."""
        t = self.transport
        if t is None or t.is_closing() or self._failed:
            return
        pending = self.conn.pending_responses
        if not self.paused:
            if self.write_paused or pending >= self.max_queued or self._muted:
                self.paused = True
                if not self._reading_paused:
                    self._reading_paused = True
                    t.pause_reading()
            elif self._reading_paused and not self._running:
                self._reading_paused = False
                t.resume_reading()
        elif not self.write_paused and not self._muted and pending < self.max_queued // 2 + 1:
            self.paused = False
            if not self._running:
                self._run_received()  # runs held requests; ends in _check_backpressure again

    def _protocol_error(self, exc: PeerProtocolError) -> None:
        self.close(f"protocol error: {exc.reason} ({exc.error_code.name})")

    # -- authentication ---------------------------------------------------------------
    def _start_session(self, transport: asyncio.BaseTransport) -> None:
        """The listener's session for this connection; on SASL, the gate and the deadline.
        A client certificate that gives no principal (no ``ssl.principal.mapping.rules``
        rule applies to its DN) fails the authentication: the connection is closed before
        any request is read (Kafka fails the connection's first request)."""
        try:
            session = self.security.new_session(transport)
        except PrincipalFailure as exc:
            self._failed = True
            self.close(f"authentication failed: {exc}")
            return
        self.session, self.principal = session, session.principal
        if isinstance(session, SaslSession):
            self.conn.gate = self._gate
            self._limit_frames()
            self._auth_handle = self.clock.call_later(self.security.auth_timeout_ms / 1000, self._auth_deadline)

    def _limit_frames(self) -> None:
        """Kafka's ``SaslServerAuthenticator``: while a SASL connection is not
        authenticated (before its first authentication, and during a re-authentication),
        every frame is bounded by ``sasl.server.max.receive.size`` at its size field;
        once authenticated, by ``socket.request.max.bytes``."""
        session = self.session
        limited = isinstance(session, SaslSession) and not session.authenticated
        if limited == self._sasl_limited:
            return
        self._sasl_limited = limited
        if limited:
            assert isinstance(session, SaslSession)
            self.conn.set_frame_limit(min(session.config.max_receive_size, self.max_frame_bytes),
                                      "sasl.server.max.receive.size")
        else:
            self.conn.set_frame_limit(self.max_frame_bytes, "socket.request.max.bytes")

    def _receive_size_failed(self, exc: FrameTooLarge) -> None:
        """A frame above ``sasl.server.max.receive.size`` before authentication: the
        authentication fails and the connection closes at once (Kafka closes it without
        the failed-authentication delay, having answered nothing)."""
        self._failed = True
        self.close(f"Failed authentication (Failing SASL authentication due to invalid receive size: {exc.reason})",
                   level=logging.INFO)

    def _gate(self, header: RequestHeader, frame_size: int) -> bool:
        admission = self.session.admit(header.api_key, frame_size, self.clock.now_ms())
        self._admission = admission
        if admission.action == SERVE:
            self._admission = None
            return True
        return admission.action == SASL

    def _sasl(self, request: Request[Route]) -> None:
        """Answer a SaslHandshake/SaslAuthenticate through the session."""
        session = self.session
        assert isinstance(session, SaslSession)
        header, body, now = request.header, request.body, self.clock.now_ms()
        if header.api_key == 17:
            reply = session.handshake(header.api_version, str(body.mechanism), now)
        else:
            reply = session.authenticate(header.api_version, bytes(body.auth_bytes), now)
        self._limit_frames()
        response = materialize(response_schema(header.api_key, header.api_version), reply.body)
        if reply.close:
            reason = reply.body.get("error_message") or ErrorCode(int(reply.body["error_code"])).name.upper()
            self._fail_later(request.slot, response, reply.delay_ms, f"authentication failed: {reason}")
            return
        if session.authenticated:
            if self.principal != session.principal or self._auth_handle is not None:
                log.debug("connection from %s authenticated as %s (%s)", self.peer, session.principal,
                         session.mechanism)
            self.principal = session.principal
            if self._auth_handle is not None:
                self._auth_handle.cancel()
                self._auth_handle = None
        self._answer(request, response)

    def _refuse(self, event: Refused) -> None:
        """A request the session refused: its error response (REJECT) or none, then close."""
        admission = self._admission or Admission("close", "refused")
        self._admission = None
        response = None
        if admission.action == REJECT:
            try:
                response = materialize(response_schema(event.header.api_key, event.header.api_version),
                                       {"throttle_time": 0, "error_code": admission.error_code,
                                        "error_message": admission.reason})
            except (KeyError, TypeError, ValueError):
                response = None  # an API whose response has no top-level error: closed without one
        self._fail_later(event.slot, response, admission.delay_ms, admission.reason)

    def _fail_later(self, slot: int, response: Any, delay_ms: int, reason: str) -> None:
        """Stop serving; after ``delay_ms`` send ``response`` (if any) in ``slot`` and close."""
        self._failed = True
        t = self.transport
        if t is not None and not t.is_closing() and not self._reading_paused:
            self._reading_paused = True
            t.pause_reading()
        self.clock.call_later(max(0, delay_ms) / 1000, self._send_and_close, slot, response, reason)

    def _send_and_close(self, slot: int, response: Any, reason: str) -> None:
        if self._open():
            try:
                self._write(self.conn.send(slot, response))
            except Exception:  # an earlier slot's state or the encoder: the close still happens
                log.debug("could not send the authentication failure to %s", self.peer, exc_info=True)
        self.close(reason, level=logging.INFO)

    def _auth_deadline(self) -> None:
        self._auth_handle = None
        if not self.session.authenticated and not self.closing:
            self.close(f"not authenticated within {self.security.auth_timeout_ms} ms "
                       "(connections.authentication.timeout.ms)", level=logging.INFO)

    # -- lifecycle ------------------------------------------------------------------
    def _arm_idle_timer(self) -> None:
        if self.idle_ms is None or self.idle_ms < 0:
            return
        self._idle_handle = self.clock.call_later(min(self.idle_ms / 1000, 30.0), self._idle_check)

    def _idle_check(self) -> None:
        if self.closing:
            return
        idle = (self.clock.monotonic() - self.last_active) * 1000
        if idle >= self.idle_ms and not self.conn.pending_responses:
            self.close(f"idle for {idle:.0f} ms (connections.max.idle.ms={self.idle_ms})", level=logging.INFO)
            return
        remaining = max(0.05, (self.idle_ms - idle) / 1000)
        self._idle_handle = self.clock.call_later(min(remaining, 30.0), self._idle_check)

    def close(self, reason: str, level: int = logging.WARNING) -> None:
        if self.transport is not None and not self.transport.is_closing():
            log.log(level, "closing connection from %s: %s", self.peer, reason)
            self.transport.close()
        self.closing = True

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered on the wire (held ones included; an
        answer still being sent directly counts as one)."""
        return self.conn.in_flight + (1 if self._unsent else 0)
