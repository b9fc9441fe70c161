"""The client side of one Kafka connection, sans-IO (the counterpart of
:mod:`.server_connection`; hyper-h2's ``data_to_send`` shape).

Theory of operation
-------------------
Requests in, bytes out; bytes in, events out; no sockets, no clock, no asyncio. The IO
shell (:class:`hightide.client.connection.BrokerConnection`) moves the bytes and turns
the events into its callers' results.

* **Requests out.** :meth:`ClientConnection.send_request` encodes a request under a
  fresh correlation id, records it in the pending table (api key, version, where to put
  unknown tagged fields, an optional custom decoder) and queues its frame;
  :meth:`~ClientConnection.data_to_send` hands the queued bytes to the shell. Any number
  of requests may be pending at once (pipelining). :meth:`~ClientConnection.forget`
  drops a pending request (its caller gave up): its answer, if it comes, is ignored.
* **Handshake.** :meth:`~ClientConnection.start_handshake` queues ApiVersions v3; an
  answer with UNSUPPORTED_VERSION makes the connection retry by itself with the version
  the broker advertises for ApiVersions (else v0), up to three attempts, as librdkafka
  does. It ends in a :class:`HandshakeDone` (the broker's version ranges, also kept in
  :attr:`~ClientConnection.api_versions`) or a :class:`HandshakeFailed` event.
* **Bytes in.** The shell receives into :meth:`~ClientConnection.get_buffer` and reports
  the count with :meth:`~ClientConnection.buffer_updated` (asyncio's
  ``BufferedProtocol`` pair), or hands bytes over with
  :meth:`~ClientConnection.receive_data`. Framing is :class:`~.framing.FrameReader`'s
  (partial frames are kept; a size is checked against ``max_frame_bytes`` before
  anything is allocated). Each complete frame is matched to its pending request by
  correlation id — answers may come in any order — and decoded at once, into a
  :class:`Response` or, when it does not decode, a :class:`Failed` event. A frame
  whose correlation id is not pending (its request was forgotten) is dropped. Decoders
  may keep slices of the frame: one that fit the receive buffer is copied out of it
  (bytes); a larger one (a follower's Fetch answer) has a buffer of its own, handed over
  as a read-only view and written again only once no view of it is left, so it is not
  copied (:class:`~.framing.FrameReader`'s ``hand_over_large``).
* **Broken.** A frame size that cannot be right (negative, below the 4 bytes of the
  correlation id, above ``max_frame_bytes``) breaks the connection: a :class:`Broken`
  event, and from then on nothing is decoded or sent (:meth:`~ClientConnection.send_request`
  raises :class:`~.errors.LocalProtocolError`). The shell reports a lost connection with
  :meth:`~ClientConnection.connection_lost`. Either way the shell fails every request it
  still waits for: the pending table is emptied.

Responses are decoded with the bounded reader (:mod:`.tolerant`), never kio's native
entity reader, so a hostile or broken broker declaring a huge array length gets a clean
error instead of aborting the process.
"""

from __future__ import annotations

import collections
import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .build import materialize
from .codec import API_VERSIONS_KEY, encode_request, request_schema, response_schema
from .errors import ErrorCode, KafkaError, LocalProtocolError, PeerProtocolError
from .framing import FrameReader
from .tolerant import Unknown, read_tolerant

__all__ = ["API_VERSIONS_MAX", "MAX_FRAME_BYTES", "Broken", "ClientConnection", "Event", "Failed",
           "HandshakeDone", "HandshakeFailed", "Response", "decode_response"]

API_VERSIONS_MAX = 3
#: The largest response frame accepted (a larger size field breaks the connection).
MAX_FRAME_BYTES = 100 * 1024 * 1024
HANDSHAKE_ATTEMPTS = 3
RECEIVE_CHUNK = 64 * 1024
_SIZE = struct.Struct(">i")
_HANDSHAKE = -1  # the api key recorded for the connection's own ApiVersions requests

Decoder = Callable[[bytes | memoryview], Any]


@dataclass(frozen=True, slots=True)
class Response:
    """The decoded answer to request ``correlation_id`` (the custom decoder's result
    when the request had one)."""
    correlation_id: int
    body: Any


@dataclass(frozen=True, slots=True)
class Failed:
    """The answer to request ``correlation_id`` did not decode. ``error`` is the
    :class:`~.errors.KafkaError` a custom decoder raised (to be passed on as it is), else
    None and ``error_code``/``message`` describe the failure (CORRUPT_MESSAGE)."""
    correlation_id: int
    error_code: ErrorCode
    message: str
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class HandshakeDone:
    """ApiVersions answered: ``version`` used, ``api_versions`` api key → (min, max)."""
    version: int
    api_versions: dict[int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class HandshakeFailed:
    """ApiVersions failed: the broker's error code (UNSUPPORTED_VERSION when it refused
    every version tried), or CORRUPT_MESSAGE for an answer that does not decode."""
    error_code: int
    message: str


@dataclass(frozen=True, slots=True)
class Broken:
    """The connection cannot be used any more (``reason`` says why)."""
    reason: str


Event = Response | Failed | HandshakeDone | HandshakeFailed | Broken


def decode_response(api_key: int, version: int, frame: bytes | memoryview,
                    unknown_tags: Unknown | None = None) -> tuple[int, Any]:
    """Decode a response frame (without its size prefix); return (correlation id, body).

    Tagged fields kio does not know are skipped, not fatal: they land in
    ``unknown_tags[id(entity)]`` as raw bytes. An ApiVersions response whose error code
    is UNSUPPORTED_VERSION is decoded as v0, because that is how brokers answer a version
    they do not know. Raises :class:`~.errors.PeerProtocolError` (CORRUPT_MESSAGE) on a
    malformed frame.
    """
    if len(frame) < 4:
        raise PeerProtocolError("response shorter than its header")
    corr = _SIZE.unpack_from(frame, 0)[0]
    if api_key == API_VERSIONS_KEY:
        if len(frame) >= 6 and struct.unpack_from(">h", frame, 4)[0] == ErrorCode.unsupported_version:
            return corr, _unsupported_api_versions(frame)
        cls, offset = response_schema(api_key, version), 4
    else:
        cls = response_schema(api_key, version)
        offset = 5 if cls.__flexible__ else 4
    try:
        return corr, read_tolerant(cls, frame, offset, {} if unknown_tags is None else unknown_tags)[0]
    except Exception as exc:
        raise PeerProtocolError(f"malformed {cls.__name__} v{version}: {exc!r}") from exc


def _unsupported_api_versions(frame: bytes | memoryview) -> Any:
    """An ApiVersions answer with UNSUPPORTED_VERSION. Kafka sends a v0 body listing its
    ApiVersions range; a body that does not decode as v0 (librdkafka's mock cluster sends
    one) becomes a v0 answer listing nothing, so the handshake retries with v0 as
    librdkafka does."""
    cls = response_schema(API_VERSIONS_KEY, 0)
    try:
        return read_tolerant(cls, frame, 4, {})[0]
    except Exception:  # noqa: BLE001 - any undecodable body means "retry with v0"
        return materialize(cls, {"error_code": ErrorCode.unsupported_version, "api_keys": []})


def _ranges(resp: Any) -> dict[int, tuple[int, int]]:
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


class ClientConnection:
    """One client connection's protocol state (see the module doc). ``client_id`` goes
    into every request header; ``software`` (name, version) into ApiVersions v3+."""

    def __init__(self, client_id: str | None, *, software: tuple[str, str] = ("hightide", ""),
                 max_frame_bytes: int = MAX_FRAME_BYTES, receive_chunk: int = RECEIVE_CHUNK) -> None:
        self.client_id = client_id
        self.software = software
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.api_versions_version: int | None = None
        #: Requests sent on this connection per API key (ApiVersions included).
        self.requests_sent: collections.Counter[int] = collections.Counter()
        #: Why the connection is broken (None while it is usable).
        self.broken: str | None = None
        self._frames = FrameReader(max_frame_bytes, receive_chunk, hand_over_large=True)
        self._pending: dict[int, tuple[int, int, Unknown | None, Decoder | None]] = {}
        self._corr = itertools.count(1)
        self._out: list[bytes] = []
        self._handshake_attempts = 0

    # -- requests out ---------------------------------------------------------------------
    def send_request(self, api_key: int, version: int, body: Any, *, unknown_tags: Unknown | None = None,
                     decoder: Decoder | None = None, request_tags: dict[int, bytes] | None = None) -> int:
        """Queue request ``body`` (a kio entity of ``api_key`` at ``version``); return its
        correlation id. ``unknown_tags`` collects the answer's tagged fields kio does not
        know; ``decoder`` replaces kio for the answer (it gets the frame, correlation id
        first, no size prefix); ``request_tags`` are sent as the request's top-level tag
        section (:func:`~.codec.encode_request`). Raises LocalProtocolError when broken."""
        if self.broken is not None:
            raise LocalProtocolError(f"the connection is broken: {self.broken}")
        corr = self._next_corr()
        self._out.append(encode_request(api_key, version, corr, self.client_id, body, request_tags))
        self._pending[corr] = (api_key, version, unknown_tags, decoder)
        self.requests_sent[api_key] += 1
        return corr

    def start_handshake(self) -> None:
        """Queue the ApiVersions request the handshake starts with (see the module doc)."""
        self._handshake_attempts = 0
        self._send_api_versions(API_VERSIONS_MAX)

    def forget(self, correlation_id: int) -> None:
        """Stop waiting for the answer to ``correlation_id`` (it is dropped if it comes)."""
        self._pending.pop(correlation_id, None)

    def data_to_send(self) -> bytes:
        """The bytes queued since the last call (to be written in order)."""
        out, self._out = self._out, []
        return out[0] if len(out) == 1 else b"".join(out)

    @property
    def pending(self) -> int:
        """Requests sent and not answered (forgotten ones excluded)."""
        return len(self._pending)

    # -- bytes in -------------------------------------------------------------------------
    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next received bytes go (report them with :meth:`buffer_updated`)."""
        return self._frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> list[Event]:
        """Account for ``nbytes`` received into the last buffer; the events they complete."""
        if self.broken is not None:
            return []
        try:
            frames = self._frames.buffer_updated(nbytes)
        except PeerProtocolError as exc:
            return [self._break(f"bad response frame size: {exc.reason}")]
        events: list[Event] = []
        for frame in frames:
            if len(frame) < 4:
                events.append(self._break(f"bad response frame size {len(frame)}"))
                break
            # decoders may keep slices: a frame in the reader's rolling buffer is copied (that
            # buffer is reused); a large one has a buffer of its own, reused only once unviewed
            event = self._answer(bytes(frame) if self._frames.is_transient(frame) else frame.toreadonly())
            if event is not None:
                events.append(event)
        return events

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Feed received bytes (of any split); the events they complete."""
        events: list[Event] = []
        view, done = memoryview(data), 0
        while done < len(view) and self.broken is None:
            buf = self.get_buffer(len(view) - done)
            n = min(len(buf), len(view) - done)
            buf[:n] = view[done:done + n]
            done += n
            events += self.buffer_updated(n)
        return events

    def connection_lost(self, reason: str) -> Broken:
        """The shell lost the connection: broken, nothing pending any more."""
        return self._break(reason) if self.broken is None else Broken(self.broken)

    # -- internals ------------------------------------------------------------------------
    def _next_corr(self) -> int:
        while True:
            corr = next(self._corr) & 0x7FFFFFFF
            if corr not in self._pending:
                return corr

    def _send_api_versions(self, version: int) -> None:
        self._handshake_attempts += 1
        body = materialize(request_schema(API_VERSIONS_KEY, version), {
            "client_software_name": self.software[0], "client_software_version": self.software[1]})
        corr = self._next_corr()
        self._out.append(encode_request(API_VERSIONS_KEY, version, corr, self.client_id, body))
        self._pending[corr] = (_HANDSHAKE, version, None, None)
        self.requests_sent[API_VERSIONS_KEY] += 1

    def _break(self, reason: str) -> Broken:
        self.broken = reason
        self._pending.clear()
        self._out.clear()
        return Broken(reason)

    def _answer(self, frame: bytes | memoryview) -> Event | None:
        corr = _SIZE.unpack_from(frame, 0)[0]
        entry = self._pending.pop(corr, None)
        if entry is None:
            return None  # its request was forgotten (timed out or cancelled)
        api_key, version, unknown, decoder = entry
        if api_key == _HANDSHAKE:
            return self._handshake_answer(version, frame)
        try:
            if decoder is None:
                return Response(corr, decode_response(api_key, version, frame, unknown)[1])
            return Response(corr, decoder(frame))
        except PeerProtocolError as exc:
            return Failed(corr, exc.error_code, exc.reason)
        except KafkaError as exc:  # a custom decoder's own error: passed on as it is
            return Failed(corr, exc.error_code, exc.message or exc.error_code.name, exc)
        except Exception as exc:  # noqa: BLE001 - a custom decoder refused the frame
            return Failed(corr, ErrorCode.corrupt_message, f"malformed response to api {api_key} v{version}: {exc!r}")

    def _handshake_answer(self, version: int, frame: bytes | memoryview) -> Event | None:
        try:
            resp = decode_response(API_VERSIONS_KEY, version, frame)[1]
        except PeerProtocolError as exc:
            return HandshakeFailed(int(exc.error_code), exc.reason)
        if resp.error_code == ErrorCode.unsupported_version:
            if self._handshake_attempts >= HANDSHAKE_ATTEMPTS:
                return HandshakeFailed(int(ErrorCode.unsupported_version), "broker refused every ApiVersions version")
            # Fall back to what the broker advertises for ApiVersions, else to v0.
            broker_max = _ranges(resp).get(API_VERSIONS_KEY, (0, -1))[1]
            self._send_api_versions(broker_max if 0 <= broker_max < version else 0)
            return None
        if resp.error_code != ErrorCode.none:
            return HandshakeFailed(int(resp.error_code), f"ApiVersions v{version} failed")
        self.api_versions = _ranges(resp)
        self.api_versions_version = version
        return HandshakeDone(version, dict(self.api_versions))
