"""One TCP connection to one Kafka-protocol broker, with pipelined requests.

Theory of operation: :meth:`BrokerConnection.connect` opens the socket, starts a reader
task and performs the ApiVersions handshake. :meth:`BrokerConnection.request` encodes a
request with a fresh correlation id, registers a future under that id, writes the frame
and awaits the future; any number of requests may be in flight at once. The reader task
reads frames, matches each to its future by correlation id (so responses may arrive in
any order) and decodes the body there. A response whose correlation id is unknown (its
request timed out) is dropped. When the connection breaks, every pending request fails
with :class:`KafkaConnectionError` and the connection stays closed; callers open a new one.

Security (``security``, a :class:`~hightide.client.properties.ClientSecurity`): on SSL and
SASL_SSL the socket is wrapped in TLS by asyncio (the broker certificate verified, mTLS
when a keystore is set); on SASL_* the connection authenticates right after ApiVersions
(SaslHandshake v1, then SaslAuthenticate with PLAIN, SCRAM-SHA-256/512 — the server's
signature is verified — or an unsecured OAUTHBEARER token) before :meth:`connect`
returns. A refused authentication raises :class:`KafkaError` with
SASL_AUTHENTICATION_FAILED (or the broker's handshake error) and closes the connection.
KIP-368: when the broker reports a session lifetime, the connection re-authenticates
(SaslHandshake + SaslAuthenticate on the same socket) once 85% of it has passed, before
the next request; requests made meanwhile wait for it, requests already sent are answered
first (the broker keeps request order).
"""

from __future__ import annotations

import asyncio
import os
import collections
import itertools
import struct
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self

from kio.schema.index import api_key_map

from ..version import __version__
from ..protocol.build import materialize
from ..protocol.codec import (
    API_VERSIONS_KEY,
    encode_request,
    request_schema,
    response_schema,
)
from ..protocol.tolerant import Unknown, read_tolerant
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

_API_VERSIONS_MAX = 3
_SIZE = struct.Struct(">i")
_MAX_FRAME = 100 * 1024 * 1024
#: :meth:`BrokerConnection.close` waits at most this long for the reader task and the socket.
CLOSE_WAIT_S = 2.0


def decode_response(api_key: int, version: int, frame: bytes | memoryview,
                    unknown_tags: Unknown | None = None) -> tuple[int, Any]:
    """Decode a response frame (without its size prefix); return (correlation id, body).

    Decoded with the bounded reader (:mod:`hightide.protocol.tolerant`), never kio's
    native entity reader, so a hostile or broken broker declaring a huge array length
    gets a clean error instead of aborting the process. Tagged fields kio does not know
    are skipped, not fatal: they land in ``unknown_tags[id(entity)]`` as raw bytes.
    An ApiVersions response whose error code is UNSUPPORTED_VERSION is decoded as v0,
    because that is how brokers answer a version they do not know.
    Raises :class:`KafkaError` (CORRUPT_MESSAGE) on a malformed frame.
    """
    if len(frame) < 4:
        raise KafkaError(ErrorCode.corrupt_message, "response shorter than its header")
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
    except KafkaError:
        raise
    except Exception as exc:
        raise KafkaError(ErrorCode.corrupt_message,
                         f"malformed {cls.__name__} v{version}: {exc!r}") from exc


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


def api_name(api_key: int) -> str:
    """Kafka's name of an API ("AlterConfigs"), or "api N" for a key kio does not know."""
    name = api_key_map.get(api_key)
    return "".join(w.capitalize() for w in name.split("_")) if name else f"api {api_key}"


class BrokerConnection:
    """A connection to ``host:port``. Use :meth:`connect` (or ``async with``) first.

    ``request_timeout_s`` bounds each request (connect and handshake included);
    ``api_versions`` maps api key → (min, max) as the broker advertised them.
    Not thread-safe; safe for any number of concurrent requests from one event loop.
    """

    def __init__(self, host: str, port: int, client_id: str | None = "hightide-admin", *,
                 request_timeout_s: float = 30.0, node_id: int | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security
        self._reauth_at: float | None = None  # monotonic time to re-authenticate (KIP-368)
        self._reauthenticating: asyncio.Task[None] | None = None
        self.node_id = node_id
        self.request_timeout_s = request_timeout_s
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.api_versions_version: int | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int, Unknown | None,
                                       Callable[[bytes], Any] | None]] = {}
        self._corr = itertools.count(1)
        self._closed_error: KafkaError | None = None
        self.requests_sent: collections.Counter[int] = collections.Counter()
        """Requests sent on this connection per API key (ApiVersions included)."""

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node={self.node_id})"

    @property
    def connected(self) -> bool:
        """True between a successful :meth:`connect` and the connection breaking or closing."""
        return self._writer is not None and self._closed_error is None

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the socket and negotiate API versions.

        Raises :class:`KafkaConnectionError` if the socket cannot be opened,
        :class:`KafkaTimeoutError` on timeout, :class:`KafkaError` if the broker answers
        ApiVersions with an error other than UNSUPPORTED_VERSION.
        """
        sec = self.security
        tls = sec.ssl_context() if sec is not None else None
        try:
            async with asyncio.timeout(self.request_timeout_s):  # never wait_for: it can swallow a cancel
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=tls, server_hostname=self.host if tls is not None else None)
        except TimeoutError:
            raise KafkaTimeoutError(f"connect to {self.host}:{self.port} timed out") from None
        except OSError as exc:  # "connection refused", not "[Errno 111] Connect call failed ('h', p)"
            reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
            reason = reason[:1].lower() + reason[1:]
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {reason}") from exc
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._handshake()
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

    async def _handshake(self) -> None:
        version = _API_VERSIONS_MAX
        for _ in range(3):
            resp = await self.request(API_VERSIONS_KEY, version, {
                "client_software_name": "hightide", "client_software_version": __version__})
            if resp.error_code == ErrorCode.unsupported_version:
                ours = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
                # Fall back to what the broker advertises for ApiVersions, else to v0.
                broker_max = ours.get(API_VERSIONS_KEY, (0, -1))[1]
                version = broker_max if 0 <= broker_max < version else 0
                continue
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, f"ApiVersions v{version} failed")
            self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                                 for k in resp.api_keys}
            self.api_versions_version = version
            return
        raise UnsupportedVersionError(ErrorCode.unsupported_version,
                                      "broker refused every ApiVersions version")

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
        become CORRUPT_MESSAGE errors.
        Error codes inside the response are *not* raised here. Raises
        :class:`KafkaTimeoutError` after ``timeout_s`` (default ``request_timeout_s``)
        and :class:`KafkaConnectionError` when the connection is or becomes closed.
        """
        if self._closed_error is not None:
            raise KafkaConnectionError(f"{self!r} is closed: {self._closed_error.message}")
        if self._writer is None:
            raise KafkaConnectionError(f"{self!r} is not connected")
        if api_key not in (17, 36) and (self._reauthenticating is not None or (
                self._reauth_at is not None and time.monotonic() >= self._reauth_at)):
            await self._reauthenticate()
        if isinstance(body, dict):
            cls = request_schema(api_key, version)
            if cls is None:
                raise UnsupportedVersionError(ErrorCode.unsupported_version,
                                              f"no schema for api {api_key} v{version}")
            body = materialize(cls, body)
        corr = next(self._corr) & 0x7FFFFFFF
        frame = encode_request(api_key, version, corr, self.client_id, body, request_tags)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = (fut, api_key, version, unknown_tags, decoder)
        self.requests_sent[api_key] += 1
        try:
            # asyncio.timeout, not wait_for: a cancellation arriving in the loop step of
            # the answer must win (wait_for returned the answer and swallowed it).
            async with asyncio.timeout(timeout_s or self.request_timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
                return await fut
        except TimeoutError:
            raise KafkaTimeoutError(
                f"api {api_key} v{version} to {self.host}:{self.port} timed out") from None
        except (ConnectionError, OSError) as exc:
            self._fail_all(KafkaConnectionError(f"write to {self.host}:{self.port} failed: {exc}"))
            raise KafkaConnectionError(str(exc)) from exc
        finally:
            self._pending.pop(corr, None)

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

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reason = "connection closed by broker"
        try:
            while True:
                head = await self._reader.readexactly(4)
                size = _SIZE.unpack(head)[0]
                if size < 4 or size > _MAX_FRAME:
                    reason = f"bad response frame size {size}"
                    break
                self._dispatch(await self._reader.readexactly(size))
        except asyncio.IncompleteReadError:
            pass
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc}"
        except asyncio.CancelledError:
            reason = "connection closed"
            raise
        finally:
            self._fail_all(KafkaConnectionError(f"{self.host}:{self.port}: {reason}"))

    def _dispatch(self, frame: bytes) -> None:
        corr = _SIZE.unpack_from(frame, 0)[0]
        entry = self._pending.pop(corr, None)
        if entry is None:
            return  # its request timed out or was cancelled
        fut, api_key, version, unknown, decoder = entry
        if fut.done():
            return
        try:
            if decoder is None:
                fut.set_result(decode_response(api_key, version, frame, unknown)[1])
            else:
                fut.set_result(decoder(frame))
        except KafkaError as exc:
            fut.set_exception(exc)
        except Exception as exc:  # noqa: BLE001 - a custom decoder refused the frame
            fut.set_exception(KafkaError(ErrorCode.corrupt_message,
                                         f"malformed response to api {api_key} v{version}: {exc!r}"))

    def _fail_all(self, error: KafkaError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        pending, self._pending = self._pending, {}
        for fut, *_ in pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def close(self) -> None:
        """Close the socket; pending requests fail with :class:`KafkaConnectionError`.
        Idempotent. Bounded: the reader task and the socket's close are each waited for
        at most :data:`CLOSE_WAIT_S` (a peer that reads nothing — paused — would keep
        unsent bytes, and the close, pending forever; the socket is then aborted). A
        cancellation of the caller propagates."""
        self._fail_all(KafkaConnectionError(f"{self.host}:{self.port}: connection closed"))
        task, self._read_task = self._read_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait((task,), timeout=CLOSE_WAIT_S)
        writer = self._writer
        if writer is not None:
            writer.close()
            try:
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await writer.wait_closed()
            except TimeoutError:
                writer.transport.abort()
            except (ConnectionError, OSError):
                pass


async def close_all(conns: Iterable[BrokerConnection]) -> None:
    """Close every connection of ``conns`` at once: bounded as one
    :meth:`BrokerConnection.close` is, and one that fails does not keep the others open
    (its error is dropped: the connection is gone either way). A cancellation of the
    caller propagates."""
    await asyncio.gather(*(conn.close() for conn in conns), return_exceptions=True)
