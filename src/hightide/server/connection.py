"""One client connection: a thin ``asyncio.BufferedProtocol`` around the sans-IO
:class:`~hightide.protocol.framing.FrameReader`.

Theory of operation: bytes are received straight into the frame reader's buffer;
each complete frame is parsed and dispatched at once (pipelining), and gets a slot in
an ordered queue. Synchronous handlers fill their slot immediately; asynchronous ones
(long-poll Fetch, Produce waiting for fsync) fill it later. Responses leave strictly
in request order: the queue is flushed from the head while slots are filled. Reading
pauses while ``queued.max.requests`` requests are in flight, and while the transport's
write buffer is above its high-water mark (a client that sends but does not read its
answers): back-pressure instead of unbounded buffers. Requests already received in
one read are still dispatched, so the overshoot is bounded by one receive buffer. The
connection is closed after ``connections.max.idle.ms`` without a request.
Protocol violations close the connection with a logged reason; nothing else does.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ..protocol.codec import API_VERSIONS_KEY, RequestHeader, decode_request, encode_response, parse_header
from ..protocol.errors import ErrorCode, PeerProtocolError
from ..protocol.framing import FrameReader
from .registry import ROUTES, CloseConnection, RawResponse

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.server")

_PENDING = object()

# The rolling receive buffer of each connection. Frames larger than it get a dedicated
# buffer anyway (see FrameReader), so it only needs to hold a run of small pipelined
# requests; 256 KiB per connection made 1,000 idle connections cost 250 MB of RSS.
RECEIVE_CHUNK = 32 * 1024
WRITE_HIGH_WATER = 1024 * 1024  # pause reading while more than this waits to be sent


class RequestContext:
    """What a handler gets besides the request: the broker, the header, the peer."""

    __slots__ = ("broker", "header", "peer", "unknown_tags", "now_ms")

    def __init__(self, broker: "Broker", header: RequestHeader, peer: str, unknown_tags: dict) -> None:
        self.broker = broker
        self.header = header
        self.peer = peer
        self.unknown_tags = unknown_tags
        self.now_ms = int(time.time() * 1000)

    @property
    def version(self) -> int:
        return self.header.api_version


class _Slot:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: Any = _PENDING


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        cfg = broker.config
        self.reader = FrameReader(cfg["socket.request.max.bytes"], RECEIVE_CHUNK)
        self.max_queued = cfg["queued.max.requests"]
        self.idle_ms = cfg["connections.max.idle.ms"]
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.slots: deque[_Slot] = deque()
        self.paused = False  # reading paused (either reason below)
        self.write_paused = False  # the transport's write buffer is above its high-water mark
        self.closing = False
        self.last_active = time.monotonic()
        self._idle_handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._backlog: deque[bytes] = deque()  # received requests held back by back-pressure
        self._draining = False

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
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.reader.buffer_updated(nbytes)
        except PeerProtocolError as exc:
            self.close(f"protocol error: {exc.reason}")
            return
        for i, frame in enumerate(frames):
            if self.closing:
                return
            if self.paused:
                # Back-pressure hit while this read still holds requests: keep them for
                # when it clears (copied: the receive buffer is reused on the next read).
                self._backlog.extend(bytes(f) for f in frames[i:])
                return
            self._dispatch(frame)

    def _dispatch(self, frame: memoryview | bytes) -> None:
        try:
            self._handle_frame(memoryview(frame))
        except PeerProtocolError as exc:
            self.close(f"protocol error: {exc.reason}")

    def _drain_backlog(self) -> None:
        """Dispatch requests held back by back-pressure until it applies again."""
        self._draining = True
        try:
            while self._backlog and not self.paused and self.transport is not None and not self.transport.is_closing():
                self._dispatch(self._backlog.popleft())
        finally:
            self._draining = False

    def eof_received(self) -> bool | None:
        # Client half-closed: finish in-flight work, then close.
        if not self.slots and not self._backlog:
            return False
        self.closing = True
        return True

    # -- dispatch -------------------------------------------------------------------
    def _handle_frame(self, frame: memoryview) -> None:
        frame = frame.toreadonly()  # kio's native reader requires a read-only buffer
        header, body_offset = parse_header(frame)
        route = ROUTES.get(header.api_key)
        if route is None:
            raise PeerProtocolError(f"unknown api key {header.api_key} (correlation id {header.correlation_id})")
        if not route.min_version <= header.api_version <= route.max_version:
            if header.api_key == API_VERSIONS_KEY:
                self._push(self.broker.api_versions_fallback(header))
                return
            raise PeerProtocolError(
                f"unsupported version {header.api_version} of api key {header.api_key} ({route.name}); "
                f"supported {route.min_version}-{route.max_version}", ErrorCode.unsupported_version)
        unknown: dict = {}
        request = decode_request(header, frame, body_offset, unknown)
        ctx = RequestContext(self.broker, header, self.peer, unknown)
        try:
            result = route.fn(ctx, request)
        except CloseConnection as exc:
            self.close(exc.reason)
            return
        except Exception:
            log.exception("handler %s v%d failed for %s; closing connection", route.name, header.api_version, self.peer)
            self.close("internal error")
            return
        if inspect.isawaitable(result):
            slot = _Slot()
            self.slots.append(slot)
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(lambda t, s=slot, h=header: self._finished(t, s, h))
            self._check_backpressure()
        else:
            self._push(self._frame_for(header, result))

    def _frame_for(self, header: RequestHeader, result: Any) -> Any:
        if result is None:
            return None
        if isinstance(result, RawResponse):
            size = result.size
            return [size.to_bytes(4, "big"), *result.buffers]
        return encode_response(header.api_key, header.api_version, header.correlation_id, result)

    def _finished(self, task: asyncio.Task, slot: _Slot, header: RequestHeader) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("async handler for api %d failed for %s; closing connection", header.api_key, self.peer,
                      exc_info=exc)
            self.close("internal error")
            return
        slot.data = self._frame_for(header, task.result())
        self._flush()

    def _push(self, data: Any) -> None:
        if not self.slots:
            self._write(data)
            return
        slot = _Slot()
        slot.data = data
        self.slots.append(slot)
        self._check_backpressure()  # answered but waiting behind a slow one: still in flight

    def _flush(self) -> None:
        slots = self.slots
        while slots and slots[0].data is not _PENDING:
            self._write(slots.popleft().data)
        self._check_backpressure()
        if self.closing and not slots and not self._backlog and self.transport and not self.transport.is_closing():
            self.transport.close()

    def _write(self, data: Any) -> None:
        if data is None or self.transport is None or self.transport.is_closing():
            return
        if isinstance(data, list):
            self.transport.writelines(data)
        else:
            self.transport.write(data)

    def _check_backpressure(self) -> None:
        """Pause reading at ``queued.max.requests`` in flight or a full write buffer;
        resume once both are clear (in flight below half the limit: hysteresis)."""
        t = self.transport
        if t is None or t.is_closing():
            return
        if not self.paused:
            if self.write_paused or len(self.slots) >= self.max_queued:
                self.paused = True
                t.pause_reading()
        elif not self.write_paused and len(self.slots) < self.max_queued // 2 + 1:
            self.paused = False
            if self._backlog and not self._draining:
                self._drain_backlog()  # may pause again
            if not self.paused and not self._draining and not t.is_closing():
                t.resume_reading()

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
        if idle >= self.idle_ms and not self.slots:
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
        return len(self.slots) + len(self._backlog)
