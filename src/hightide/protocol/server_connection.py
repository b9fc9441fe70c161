"""The server side of one Kafka connection, sans-IO (python-hyper/h11's shape).

Theory of operation
-------------------
Bytes in, request events out, response bytes back; no sockets, no clock, no asyncio.

* **Bytes in.** The IO shell receives straight into :meth:`ServerConnection.get_buffer`
  and reports the count with :meth:`~ServerConnection.buffer_updated` (the
  ``asyncio.BufferedProtocol`` pair), or hands over bytes it already has with
  :meth:`~ServerConnection.receive_data`. Framing is :class:`~.framing.FrameReader`'s:
  a frame's size is checked against ``max_frame_bytes`` before anything is allocated.
* **Events out.** :meth:`~ServerConnection.next_request` turns the next complete frame
  into an event: a :class:`Request` (header parsed, version checked against the route
  table, body decoded) for the shell to run; an :class:`Answered` when the connection
  answered the request itself (an ApiVersions request of a version we do not serve gets
  Kafka's v0 UNSUPPORTED_VERSION answer listing the supported ranges, so the client can
  retry with one); or :data:`NEED_DATA` when no complete frame is buffered.
* **Bytes back.** Every request owns a *slot*, numbered in arrival order.
  :meth:`~ServerConnection.send` takes the answer to one slot and returns the buffers the
  shell may write now. Answers leave strictly in request order: an answer to a later
  request is held until every earlier one is sent. :class:`RawResponse` buffers (the
  zero-copy Fetch path) are passed through uncopied; kio entities are encoded here.

Errors, as in h11:

* :class:`~.errors.PeerProtocolError` -- the peer broke the protocol -- comes out of
  :meth:`~ServerConnection.buffer_updated` / :meth:`~ServerConnection.receive_data`
  (bad frame size) and :meth:`~ServerConnection.next_request` (truncated header, unknown
  API key, unsupported version, malformed body). Its ``reason`` is what to log, its
  ``error_code`` the Kafka error that describes it, its ``close`` whether the connection
  must be closed. Kafka has no generic error frame, so every error raised here has
  ``close=True``; the one case Kafka answers instead of closing (ApiVersions) is the
  :class:`Answered` event. After a peer error the connection is broken for good: every
  later :meth:`~ServerConnection.next_request` raises the same error.
* :class:`~.errors.LocalProtocolError` -- we broke it -- comes out of
  :meth:`~ServerConnection.send` for a slot that is not waiting for an answer (unknown,
  or answered already).

Buffer lifetime: frames are views into the frame reader's buffers, which are reused by
the next receive. Frames not yet turned into events when :meth:`get_buffer` is called
(requests held back by the shell's back-pressure) are copied then, so only held requests
ever cost a copy. A :class:`Request` refers to the receive buffer only in a Produce
request's ``records`` (memoryview slices of the frame, writable unless the frame was a
held copy, see :mod:`.produce_request`): they are valid until the next
:meth:`get_buffer`, that is during the synchronous part of the request's handler, which
must not keep them (the Produce handler writes them to the log and releases them). Every
other request is decoded into objects of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from .build import materialize
from .codec import API_VERSIONS_KEY, RequestHeader, decode_request, encode_response, parse_header, response_schema
from .errors import ErrorCode, LocalProtocolError, PeerProtocolError
from .framing import FrameReader
from .regions import ResponseBuffer, close_regions

__all__ = ["NEED_DATA", "Answered", "RawResponse", "Refused", "Request", "ServerConnection", "VersionRange",
           "api_version_ranges"]

DEFAULT_RECEIVE_CHUNK = 32 * 1024


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()
"""Returned by :meth:`ServerConnection.next_request` when no complete frame is buffered."""


class VersionRange(Protocol):
    """What the connection needs of a route: the versions of its API it serves."""

    @property
    def min_version(self) -> int: ...

    @property
    def max_version(self) -> int: ...


R = TypeVar("R", bound=VersionRange)


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response already encoded as buffers (response header and body, without the
    size prefix); they are written as they are, never copied (the zero-copy Fetch).
    Buffers may be file regions (:mod:`.regions`): the connection passes them on to the
    shell, which sends and closes them, or closes them itself when it drops the answer."""
    buffers: list[ResponseBuffer]

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.buffers)


class Request(Generic[R]):
    """A decoded request: answer it with ``send(request.slot, response)``.

    ``route`` is the route table's entry for the API key; ``unknown_tags`` maps ``id()``
    of an entity in ``body`` to the raw bytes of tagged fields kio does not know.
    """

    __slots__ = ("slot", "header", "body", "unknown_tags", "route")

    def __init__(self, slot: int, header: RequestHeader, body: Any, unknown_tags: dict, route: R) -> None:
        self.slot = slot
        self.header = header
        self.body = body
        self.unknown_tags = unknown_tags
        self.route = route

    def __repr__(self) -> str:
        h = self.header
        return f"Request(slot={self.slot}, api_key={h.api_key}, v{h.api_version}, correlation_id={h.correlation_id})"


class Answered:
    """The connection answered a request itself; ``buffers`` may be written now (empty
    while earlier requests are still unanswered: they then come out of a later send)."""

    __slots__ = ("header", "buffers")

    def __init__(self, header: RequestHeader, buffers: Sequence[ResponseBuffer]) -> None:
        self.header = header
        self.buffers = buffers

    def __repr__(self) -> str:
        return f"Answered(api_key={self.header.api_key}, correlation_id={self.header.correlation_id})"


class Refused:
    """The connection's gate refused a request before its body was decoded (see
    :attr:`ServerConnection.gate`). ``slot`` is open: answer it with :meth:`ServerConnection.send`
    (an error response, or ``None``) or close the connection."""

    __slots__ = ("header", "slot")

    def __init__(self, header: RequestHeader, slot: int) -> None:
        self.header = header
        self.slot = slot

    def __repr__(self) -> str:
        return f"Refused(api_key={self.header.api_key}, correlation_id={self.header.correlation_id})"


_PENDING: Final = object()
_NOTHING: tuple[ResponseBuffer, ...] = ()  # a request answered without a response (acks=0 Produce)


def api_version_ranges(routes: Mapping[int, VersionRange]) -> list[dict[str, int]]:
    """The ApiVersions ``api_keys`` list for a route table, by API key."""
    return [{"api_key": k, "min_version": r.min_version, "max_version": r.max_version}
            for k, r in sorted(routes.items())]


class ServerConnection(Generic[R]):
    """One client connection's protocol state. See the module docstring.

    ``routes`` maps API key to a route (any object with ``min_version``/``max_version``;
    it is handed back as :attr:`Request.route`). ``max_frame_bytes`` bounds one request
    (Kafka's ``socket.request.max.bytes``); ``receive_chunk`` is the size of the rolling
    receive buffer (larger frames get a dedicated buffer).
    """

    def __init__(self, routes: Mapping[int, R], max_frame_bytes: int,
                 receive_chunk: int = DEFAULT_RECEIVE_CHUNK) -> None:
        self._routes = routes
        self._reader = FrameReader(max_frame_bytes, receive_chunk)
        self._frames: deque[memoryview | bytes] = deque()  # complete frames not yet turned into events
        self._slots: deque[list[Any]] = deque()  # [header, frame buffers or _PENDING], oldest first
        self._first_slot = 0  # slot number of self._slots[0]
        self._error: PeerProtocolError | None = None
        #: Asked with each request's header and frame size before the body is decoded
        #: (authentication: a connection that has not authenticated gets only some APIs);
        #: False makes the event a :class:`Refused`. None (the default) admits everything.
        self.gate: Callable[[RequestHeader, int], bool] | None = None
        self._closed = False  # close() was called: answers are dropped (their regions closed)

    # -- bytes in -------------------------------------------------------------------
    def set_frame_limit(self, max_frame_bytes: int, name: str) -> None:
        """Bound the frames whose size field is read from now on (``name``: the config
        the bound comes from, named in the :class:`~.framing.FrameTooLarge` raised for a
        larger one). Nothing of a refused frame is allocated."""
        self._reader.set_limit(max_frame_bytes, name)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """The writable memoryview the next received bytes must go into. Frames still
        held (not yet returned by :meth:`next_request`) are copied first, since the
        buffer they live in may be reused."""
        if self._frames:
            self._frames = deque(bytes(f) if isinstance(f, memoryview) else f for f in self._frames)
        return self._reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        """Account for ``nbytes`` written into the last :meth:`get_buffer` view.
        Raises :class:`PeerProtocolError` on a frame size above ``max_frame_bytes`` or
        below zero (nothing is allocated for it)."""
        if self._error is not None:
            raise self._error
        try:
            frames = self._reader.buffer_updated(nbytes)
        except PeerProtocolError as exc:
            self._error = exc
            raise
        if frames:
            self._frames.extend(frames)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed received bytes (copied into the receive buffer). Raises as
        :meth:`buffer_updated`."""
        view = memoryview(data).cast("B")
        pos, end = 0, len(view)
        while pos < end:
            buf = self.get_buffer()
            n = min(len(buf), end - pos)
            buf[:n] = view[pos:pos + n]
            pos += n
            self.buffer_updated(n)

    # -- events out -----------------------------------------------------------------
    def next_request(self) -> Request[R] | Answered | Refused | _NeedData:
        """The next event: a :class:`Request`, an :class:`Answered`, or :data:`NEED_DATA`.

        Raises :class:`PeerProtocolError` (see the module docstring); the connection is
        then broken and raises it again on every later call.
        """
        if self._error is not None:
            raise self._error
        if not self._frames:
            return NEED_DATA
        frame = self._frames.popleft()
        try:
            return self._event(memoryview(frame))  # writable: Produce batches are patched in place
        except PeerProtocolError as exc:
            self._error = exc
            self._frames.clear()
            raise

    def _event(self, frame: memoryview) -> Request[R] | Answered | Refused:
        header, body_offset = parse_header(frame)
        if self.gate is not None and not self.gate(header, len(frame)):
            return Refused(header, self._open_slot(header))
        route = self._routes.get(header.api_key)
        if route is None:
            raise PeerProtocolError(f"unknown api key {header.api_key} (correlation id {header.correlation_id})",
                                    ErrorCode.invalid_request)
        if not route.min_version <= header.api_version <= route.max_version:
            if header.api_key == API_VERSIONS_KEY:
                return Answered(header, self.send(self._open_slot(header), self._unsupported_api_versions(header)))
            raise PeerProtocolError(
                f"unsupported version {header.api_version} of api key {header.api_key} "
                f"({getattr(route, 'name', '?')}); supported {route.min_version}-{route.max_version}",
                ErrorCode.unsupported_version)
        unknown: dict = {}
        body = decode_request(header, frame, body_offset, unknown)
        self._slots.append([header, _PENDING])
        return Request(self._first_slot + len(self._slots) - 1, header, body, unknown, route)

    def _open_slot(self, header: RequestHeader) -> int:
        self._slots.append([header, _PENDING])
        return self._first_slot + len(self._slots) - 1

    def _unsupported_api_versions(self, header: RequestHeader) -> bytes:
        """Kafka answers an ApiVersions request of a version it does not know with a v0
        response carrying UNSUPPORTED_VERSION and the supported ranges."""
        body = materialize(response_schema(API_VERSIONS_KEY, 0),
                           {"error_code": ErrorCode.unsupported_version,
                            "api_keys": api_version_ranges(self._routes)})
        return encode_response(API_VERSIONS_KEY, 0, header.correlation_id, body)

    # -- bytes back -----------------------------------------------------------------
    def send(self, slot: int, response: Any) -> Sequence[ResponseBuffer]:
        """Answer the request in ``slot``; return the buffers that may be written now,
        in order (empty while an earlier request is unanswered).

        ``response`` is a kio response entity (encoded here with the request's
        correlation id and the response header of its version), a :class:`RawResponse`
        (size-prefixed, buffers passed through), ``bytes`` (a complete frame, size
        included) or ``None`` (no response is sent; the order is still kept).
        Raises :class:`LocalProtocolError` if ``slot`` is not waiting for an answer, and
        whatever kio's encoder raises for a malformed entity (the slot stays pending).
        After :meth:`close`, the answer is dropped (its regions closed) and nothing is
        returned. The caller owns the regions among the returned buffers.
        """
        if self._closed:
            if isinstance(response, RawResponse):
                close_regions(response.buffers)
            return _NOTHING
        index = slot - self._first_slot
        if not 0 <= index < len(self._slots) or self._slots[index][1] is not _PENDING:
            raise LocalProtocolError(f"slot {slot} is not waiting for an answer")
        entry = self._slots[index]
        entry[1] = self._frame(entry[0], response)
        if index:
            return _NOTHING
        return self._flush()

    @staticmethod
    def _frame(header: RequestHeader, response: Any) -> Sequence[ResponseBuffer]:
        if isinstance(response, RawResponse):
            buffers = response.buffers
            return [sum(map(len, buffers)).to_bytes(4, "big"), *buffers]
        if response is None:
            return _NOTHING
        if isinstance(response, bytes):
            return [response]
        return [encode_response(header.api_key, header.api_version, header.correlation_id, response)]

    def _flush(self) -> Sequence[ResponseBuffer]:
        slots = self._slots
        first = slots.popleft()[1]
        self._first_slot += 1
        if not slots or slots[0][1] is _PENDING:
            return first  # the common case: nothing was held behind it
        out = list(first)
        while slots and slots[0][1] is not _PENDING:
            out.extend(slots.popleft()[1])
            self._first_slot += 1
        return out

    def close(self) -> None:
        """The connection is gone: drop every answer still held behind an unanswered
        one, closing the regions in them; later :meth:`send` calls drop theirs too.
        Idempotent. The error that broke the connection loses its traceback (whose frames
        refer back to the connection: a cycle only the collector would free)."""
        self._closed = True
        if self._error is not None:
            self._error.__traceback__ = None
        for entry in self._slots:
            if entry[1] is not _PENDING:
                close_regions(entry[1])
        self._slots.clear()
        self._frames.clear()

    # -- state ----------------------------------------------------------------------
    @property
    def pending_responses(self) -> int:
        """Requests handed out (or answered by the connection) whose answer has not
        been returned by :meth:`send` yet."""
        return len(self._slots)

    @property
    def buffered_requests(self) -> int:
        """Complete frames received but not yet returned by :meth:`next_request`."""
        return len(self._frames)

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered on the wire."""
        return len(self._slots) + len(self._frames)

    @property
    def broken(self) -> PeerProtocolError | None:
        """The peer error that broke the connection, if any."""
        return self._error
