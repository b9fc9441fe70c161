"""One connection to one Kafka-protocol broker, with pipelined requests: a thin asyncio
shell around the sans-IO :class:`~hightide.protocol.client_connection.ClientConnection`.

Theory of operation: :meth:`BrokerConnection.connect` opens the connection through its
:class:`~hightide.aio.transport.Transport` (the event loop's sockets by default, an
in-memory network in tests and the simulator) and performs the ApiVersions handshake.
The protocol — framing, correlation ids, the pending table, decoding, the ApiVersions
version fallback — is the core's; this shell moves bytes (an ``asyncio.BufferedProtocol``
receiving straight into the core's buffer) and turns the core's events into the results
of its callers' futures. :meth:`BrokerConnection.request` has the core encode a request
under a fresh correlation id, writes the bytes (waiting, within the request's deadline,
while the transport's write buffer is above its high-water mark) and awaits the answer;
any number of requests may be in flight at once and answers may arrive in any order.
An answer to a request whose caller gave up (timed out, cancelled) is dropped. When the
connection breaks (closed, lost, an impossible frame size), every pending request fails
with :class:`KafkaConnectionError` and the connection stays closed; callers open a new
one.

Security (``security``, a :class:`~hightide.client.properties.ClientSecurity`): on SSL and
SASL_SSL the connection is wrapped in TLS by asyncio (the broker certificate verified, mTLS
when a keystore is set); on SASL_* the connection authenticates right after ApiVersions
(SaslHandshake v1, then SaslAuthenticate with PLAIN, SCRAM-SHA-256/512 — the server's
signature is verified — or an unsecured OAUTHBEARER token) before :meth:`connect`
returns. A refused authentication raises :class:`KafkaError` with
SASL_AUTHENTICATION_FAILED (or the broker's handshake error) and closes the connection.
KIP-368: when the broker reports a session lifetime, the connection re-authenticates
(SaslHandshake + SaslAuthenticate on the same connection) once 85% of it has passed,
before the next request; requests made meanwhile wait for it, requests already sent are
answered first (the broker keeps request order).
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self

from kio.schema.index import api_key_map

from ..aio.transport import LOOP_TRANSPORT, Transport
from ..version import __version__
from ..protocol.build import materialize
from ..protocol.client_connection import (
    Broken,
    ClientConnection,
    Event,
    Failed,
    HandshakeDone,
    HandshakeFailed,
    Response,
)
from ..protocol.client_connection import decode_response as _decode_response
from ..protocol.codec import request_schema
from ..protocol.errors import PeerProtocolError
from ..protocol.tolerant import Unknown
from .errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:
    from .properties import ClientSecurity

__all__ = ["BrokerConnection", "close_all", "decode_response"]

#: :meth:`BrokerConnection.close` waits at most this long for the connection to close
#: before it aborts it.
CLOSE_WAIT_S = 2.0


def decode_response(api_key: int, version: int, frame: bytes | memoryview,
                    unknown_tags: Unknown | None = None) -> tuple[int, Any]:
    """Decode a response frame (without its size prefix); return (correlation id, body):
    :func:`hightide.protocol.client_connection.decode_response`, raising
    :class:`KafkaError` (CORRUPT_MESSAGE) on a malformed frame."""
    try:
        return _decode_response(api_key, version, frame, unknown_tags)
    except PeerProtocolError as exc:
        raise KafkaError(exc.error_code, exc.reason) from exc


def api_name(api_key: int) -> str:
    """Kafka's name of an API ("AlterConfigs"), or "api N" for a key kio does not know."""
    name = api_key_map.get(api_key)
    return "".join(w.capitalize() for w in name.split("_")) if name else f"api {api_key}"


class _Wire(asyncio.BufferedProtocol):
    """The asyncio protocol of one :class:`BrokerConnection`: bytes into its core, the
    core's events and the transport's flow control back to the connection."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn._core.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.conn._on_events(self.conn._core.buffer_updated(nbytes))

    def eof_received(self) -> bool | None:
        return None  # the broker closed its side: close ours (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._on_lost(exc)

    def pause_writing(self) -> None:
        self.conn._write_paused = True

    def resume_writing(self) -> None:
        self.conn._writable()


class BrokerConnection:
    """A connection to ``host:port``. Use :meth:`connect` (or ``async with``) first.

    ``request_timeout_s`` bounds each request (connect and handshake included);
    ``api_versions`` maps api key → (min, max) as the broker advertised them.
    ``transport`` opens the connection (:data:`~hightide.aio.transport.LOOP_TRANSPORT`:
    TCP through the running event loop).
    Not thread-safe; safe for any number of concurrent requests from one event loop.
    """

    def __init__(self, host: str, port: int, client_id: str | None = "hightide-admin", *,
                 request_timeout_s: float = 30.0, node_id: int | None = None,
                 security: ClientSecurity | None = None, transport: Transport = LOOP_TRANSPORT) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security
        self.transport = transport
        self._reauth_at: float | None = None  # monotonic time to re-authenticate (KIP-368)
        self._reauthenticating: asyncio.Task[None] | None = None
        self.node_id = node_id
        self.request_timeout_s = request_timeout_s
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.api_versions_version: int | None = None
        self._core = ClientConnection(client_id, software=("hightide", __version__))
        self._wire: asyncio.Transport | None = None  # the connection's asyncio transport
        self._pending: dict[int, asyncio.Future[Any]] = {}  # correlation id -> its caller's future
        self._handshake: asyncio.Future[Event] | None = None
        self._lost: asyncio.Future[None] | None = None  # done once the transport reported connection_lost
        self._write_paused = False
        self._write_ready: asyncio.Future[None] | None = None  # resolved when writing may go on
        self._closed_error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node={self.node_id})"

    @property
    def requests_sent(self) -> collections.Counter[int]:
        """Requests sent on this connection per API key (ApiVersions included)."""
        return self._core.requests_sent

    @property
    def connected(self) -> bool:
        """True between a successful :meth:`connect` and the connection breaking or closing."""
        return self._wire is not None and self._closed_error is None

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the connection and negotiate API versions.

        Raises :class:`KafkaConnectionError` if the connection cannot be opened,
        :class:`KafkaTimeoutError` on timeout, :class:`KafkaError` if the broker answers
        ApiVersions with an error other than UNSUPPORTED_VERSION.
        """
        sec = self.security
        tls = sec.ssl_context() if sec is not None else None
        self._lost = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self.request_timeout_s):  # never wait_for: it can swallow a cancel
                wire, _ = await self.transport.connect(
                    lambda: _Wire(self), self.host, self.port, ssl=tls,
                    server_hostname=self.host if tls is not None else None)
        except TimeoutError:
            raise KafkaTimeoutError(f"connect to {self.host}:{self.port} timed out") from None
        except ssl.SSLError as exc:  # the handshake failed: its reason (CERTIFICATE_VERIFY_FAILED ...) as it is
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        except OSError as exc:  # "connection refused", not "[Errno 111] Connect call failed ('h', p)"
            reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
            reason = reason[:1].lower() + reason[1:]
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {reason}") from exc
        self._wire = wire  # type: ignore[assignment]
        try:
            await self._handshake_versions()
            if sec is not None and sec.sasl:
                await self._authenticate(sec)
        except BaseException:
            await self.close()
            raise

    async def _authenticate(self, sec: ClientSecurity) -> None:
        """SaslHandshake + SaslAuthenticate exchanges for ``sec.mechanism``. Raises
        KafkaError (the broker's error code and message) when refused."""
        resp = await self.request(17, 1, {"mechanism": sec.mechanism})
        if resp.error_code != ErrorCode.none:
            offered = ", ".join(resp.mechanisms or ()) or "none"
            raise KafkaError(resp.error_code, f"{self.host}:{self.port} refused SASL mechanism {sec.mechanism} "
                                              f"(it offers {offered})")
        version = self.pick_version(36, 1)
        from ..security.errors import SaslFailure
        from .sasl_client import sasl_exchange
        exchange = sasl_exchange(sec)
        token = next(exchange)
        while True:
            resp = await self.request(36, version, {"auth_bytes": token})
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, resp.error_message or "SASL authentication failed")
            try:
                token = exchange.send(bytes(resp.auth_bytes))
            except StopIteration:
                lifetime = getattr(resp, "session_lifetime", 0)
                ms = lifetime.total_seconds() * 1000 if hasattr(lifetime, "total_seconds") else float(lifetime or 0)
                self._reauth_at = time.monotonic() + ms * 0.85 / 1000 if ms > 0 else None
                return
            except (ValueError, SaslFailure) as exc:  # the server's answer does not verify
                raise KafkaError(ErrorCode.sasl_authentication_failed, f"SASL {sec.mechanism}: {exc}") from None

    async def _handshake_versions(self) -> None:
        """ApiVersions (the core falls back to an older version by itself); the whole
        exchange is bounded by ``request_timeout_s``."""
        self._check_open()
        handshake = self._handshake = asyncio.get_running_loop().create_future()
        self._core.start_handshake()
        self._flush()
        try:
            async with asyncio.timeout(self.request_timeout_s):
                event = await handshake
        except TimeoutError:
            raise KafkaTimeoutError(f"ApiVersions to {self.host}:{self.port} timed out") from None
        finally:
            self._handshake = None
        if isinstance(event, HandshakeFailed):
            if event.error_code == ErrorCode.unsupported_version:
                raise UnsupportedVersionError(ErrorCode.unsupported_version, event.message)
            raise KafkaError(event.error_code, event.message)
        assert isinstance(event, HandshakeDone)
        self.api_versions = event.api_versions
        self.api_versions_version = event.version

    def supports(self, api_key: int, version: int | None = None) -> bool:
        """True if the broker advertises ``api_key`` (at ``version``, if given)."""
        rng = self.api_versions.get(api_key)
        return rng is not None and (version is None or rng[0] <= version <= rng[1])

    def pick_version(self, api_key: int, wanted_max: int, our_min: int = 0) -> int:
        """The highest version ``v`` with ``our_min <= v <= wanted_max``, within the
        broker's advertised range and known to kio.

        Raises :class:`UnsupportedVersionError` when there is none (or the broker does not
        advertise ``api_key`` at all).
        """
        rng = self.api_versions.get(api_key)
        if rng is not None:
            for v in range(min(wanted_max, rng[1]), max(our_min, rng[0]) - 1, -1):
                if request_schema(api_key, v) is not None:
                    return v
        what = f"{api_name(api_key)} (api key {api_key})"
        if rng is None:
            raise UnsupportedVersionError(
                ErrorCode.unsupported_version,
                f"broker {self.host}:{self.port} does not support {what}")
        raise UnsupportedVersionError(
            ErrorCode.unsupported_version,
            f"broker {self.host}:{self.port} supports {what} versions {rng[0]}..{rng[1]}, "
            f"this client needs {our_min}..{wanted_max}")

    async def request(self, api_key: int, version: int, body: Any, *,
                      timeout_s: float | None = None, unknown_tags: Unknown | None = None,
                      decoder: Callable[[bytes], Any] | None = None,
                      request_tags: dict[int, bytes] | None = None) -> Any:
        """Send one request and return the decoded response entity.

        ``body`` is a kio request entity or a plain dict (built with
        :func:`hightide.protocol.build.materialize` for this version). Pass a dict as
        ``unknown_tags`` to collect tagged fields kio does not know (extensions), and
        ``request_tags`` to send some (the request's top-level tag section, see
        :func:`hightide.protocol.codec.encode_request`).
        ``decoder``, if given, replaces kio: it gets the response frame (correlation id
        first, no size prefix), its return value is the result, and its exceptions
        become CORRUPT_MESSAGE errors (a :class:`KafkaError` it raises is passed on).
        Error codes inside the response are *not* raised here. Raises
        :class:`KafkaTimeoutError` after ``timeout_s`` (default ``request_timeout_s``;
        waiting for room in the write buffer included) and :class:`KafkaConnectionError`
        when the connection is or becomes closed.
        """
        self._check_open()
        if api_key not in (17, 36) and (self._reauthenticating is not None or (
                self._reauth_at is not None and time.monotonic() >= self._reauth_at)):
            await self._reauthenticate()
            self._check_open()
        if isinstance(body, dict):
            cls = request_schema(api_key, version)
            if cls is None:
                raise UnsupportedVersionError(ErrorCode.unsupported_version,
                                              f"no schema for api {api_key} v{version}")
            body = materialize(cls, body)
        corr = self._core.send_request(api_key, version, body, unknown_tags=unknown_tags, decoder=decoder,
                                       request_tags=request_tags)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        try:
            # asyncio.timeout, not wait_for: a cancellation arriving in the loop step of
            # the answer must win (wait_for returned the answer and swallowed it).
            async with asyncio.timeout(timeout_s or self.request_timeout_s):
                self._flush()
                while self._write_paused and not fut.done():  # the write buffer is full: wait for room
                    await self._write_room()
                return await fut
        except TimeoutError:
            raise KafkaTimeoutError(
                f"api {api_key} v{version} to {self.host}:{self.port} timed out") from None
        finally:
            if self._pending.pop(corr, None) is not None:  # unanswered: its answer is dropped if it comes
                self._core.forget(corr)

    async def _reauthenticate(self) -> None:
        """KIP-368: authenticate again on this connection (one exchange, shared by every
        request that arrives meanwhile). Raises as :meth:`_authenticate`."""
        task = self._reauthenticating
        if task is None:
            assert self.security is not None
            self._reauth_at = None
            task = self._reauthenticating = asyncio.ensure_future(self._authenticate(self.security))
            task.add_done_callback(lambda _: setattr(self, "_reauthenticating", None))
        await asyncio.shield(task)

    # -- the shell ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed_error is not None:
            raise KafkaConnectionError(f"{self!r} is closed: {self._closed_error.message}")
        if self._wire is None:
            raise KafkaConnectionError(f"{self!r} is not connected")

    def _flush(self) -> None:
        """Write what the core queued."""
        data = self._core.data_to_send()
        if data and self._wire is not None and not self._wire.is_closing():
            self._wire.write(data)

    async def _write_room(self) -> None:
        """Wait until the transport's write buffer drained below its low-water mark (or
        the connection ended)."""
        ready = self._write_ready
        if ready is None or ready.done():
            ready = self._write_ready = asyncio.get_running_loop().create_future()
        await asyncio.shield(ready)  # shared by every writer waiting: one's cancel must not end the others' wait

    def _writable(self) -> None:
        self._write_paused = False
        ready, self._write_ready = self._write_ready, None
        if ready is not None and not ready.done():
            ready.set_result(None)

    def _on_events(self, events: list[Event]) -> None:
        """Resolve the futures the core's events answer."""
        for event in events:
            if type(event) is Response:
                fut = self._pending.pop(event.correlation_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(event.body)
            elif type(event) is Failed:
                fut = self._pending.pop(event.correlation_id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(event.error if isinstance(event.error, KafkaError)
                                      else KafkaError(event.error_code, event.message))
            elif type(event) is Broken:
                self._fail_all(KafkaConnectionError(f"{self.host}:{self.port}: {event.reason}"))
                if self._wire is not None:
                    self._wire.abort()
            elif self._handshake is not None and not self._handshake.done():  # HandshakeDone / HandshakeFailed
                self._handshake.set_result(event)
        self._flush()  # the handshake may have queued a retry

    def _on_lost(self, exc: Exception | None) -> None:
        reason = "connection closed by broker" if exc is None else f"connection lost: {exc}"
        self._core.connection_lost(reason)
        self._fail_all(KafkaConnectionError(f"{self.host}:{self.port}: {reason}"))
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def _fail_all(self, error: KafkaError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(error)
        self._writable()  # writers waiting for room: their answers' futures have failed

    async def close(self) -> None:
        """Close the connection; pending requests fail with :class:`KafkaConnectionError`.
        Idempotent. Bounded: the close is waited for at most :data:`CLOSE_WAIT_S` (a peer
        that reads nothing — paused — would keep unsent bytes, and the close, pending
        forever; the connection is then aborted). A cancellation of the caller
        propagates."""
        self._fail_all(KafkaConnectionError(f"{self.host}:{self.port}: connection closed"))
        wire, lost = self._wire, self._lost
        if wire is None:
            return
        if not wire.is_closing():
            wire.close()
        if lost is not None and not lost.done():
            done, _ = await asyncio.wait((lost,), timeout=CLOSE_WAIT_S)
            if not done:
                wire.abort()


async def close_all(conns: Iterable[BrokerConnection]) -> None:
    """Close every connection of ``conns`` at once: bounded as one
    :meth:`BrokerConnection.close` is, and one that fails does not keep the others open
    (its error is dropped: the connection is gone either way). A cancellation of the
    caller propagates."""
    await asyncio.gather(*(conn.close() for conn in conns), return_exceptions=True)
