"""A broker's connection to the active controller (Kafka's NodeToControllerChannelManager,
much reduced: one voter, so the active controller is the one that answers).

Theory of operation: :class:`ControllerChannel` owns at most one
:class:`~hightide.client.connection.BrokerConnection` (pipelined requests matched by
correlation id, the ApiVersions handshake on connect). :meth:`ControllerChannel.request`
connects on demand, trying the controller addresses (``controller.quorum.voters``, else
``controller.quorum.bootstrap.servers``) in turn; after a failed attempt it waits an
exponential backoff (100 ms doubling to ``max_backoff_s``) before the next one. A broken
connection fails the requests in flight with :class:`ControllerUnavailable` and is
replaced on the next request. Retrying is the caller's decision (heartbeats, the
metadata fetch and forwarded writes retry differently).

A broker uses two channels: one for lifecycle requests and forwarded writes, one for the
metadata long-poll Fetch, because the controller answers a connection's requests in
order and a heartbeat must not queue behind a Fetch parked for up to 500 ms (Kafka also
keeps the Raft fetch and the lifecycle requests on separate channels).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..client.connection import BrokerConnection
from ..client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from ..client.properties import ClientSecurity

log = logging.getLogger("hightide.controller_channel")

INITIAL_BACKOFF_S = 0.1


class ControllerUnavailable(Exception):
    """No controller could be reached, or the connection broke while a request was in
    flight (the request may or may not have been processed)."""


class ControllerChannel:
    """Requests to the active controller. ``addresses`` are tried in turn; ``name`` and
    ``client_id`` identify the channel in logs and in the controller's request log."""

    def __init__(self, addresses: Sequence[tuple[str, int]], *, client_id: str, name: str = "controller",
                 request_timeout_s: float = 10.0, max_backoff_s: float = 2.0,
                 security: ClientSecurity | None = None) -> None:
        if not addresses:
            raise ValueError("a controller channel needs at least one controller address")
        self.addresses = list(addresses)
        self.client_id = client_id
        self.name = name
        self.request_timeout_s = request_timeout_s
        self.max_backoff_s = max_backoff_s
        #: TLS/SASL towards the controller listener (None: PLAINTEXT); see
        #: :func:`~.listener_security.controller_client_security`.
        self.security = security
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()
        self._next = 0  # index of the address to try next
        self._backoff_s = 0.0
        self._retry_at = 0.0  # monotonic time before which no connect is attempted
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()  # connections being closed after a drop
        self._last_error: str | None = None
        #: Called with the new connection's ApiVersions map after each successful connect.
        self.on_connect: Callable[[dict[int, tuple[int, int]]], None] | None = None

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The controller's ApiVersions (api key → (min, max)) from the last connect;
        empty before the first one."""
        return self._conn.api_versions if self._conn is not None else {}

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.connected

    @property
    def address(self) -> tuple[str, int] | None:
        """The address of the current connection, if any."""
        return (self._conn.host, self._conn.port) if self._conn is not None else None

    async def connection(self) -> BrokerConnection:
        """The open connection, connecting first if needed (waiting out the backoff of an
        earlier failed attempt). Raises :class:`ControllerUnavailable` if the attempt fails."""
        if self._conn is not None and self._conn.connected:
            return self._conn
        async with self._lock:
            if self._conn is not None and self._conn.connected:
                return self._conn
            if self._closed:
                raise ControllerUnavailable(f"{self.name} channel closed")
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            old, self._conn = self._conn, None
            if old is not None:
                await old.close()
            host, port = self.addresses[self._next % len(self.addresses)]
            conn = BrokerConnection(host, port, self.client_id, request_timeout_s=self.request_timeout_s,
                                    security=self.security)
            try:
                await conn.connect()
            except (KafkaError, OSError) as exc:
                self._next += 1
                self._backoff_s = min(self.max_backoff_s, max(INITIAL_BACKOFF_S, self._backoff_s * 2))
                self._retry_at = time.monotonic() + self._backoff_s
                message = f"cannot reach the controller at {host}:{port}: {exc}"
                if message != self._last_error:
                    log.warning("%s channel: %s (retrying)", self.name, message)
                    self._last_error = message
                raise ControllerUnavailable(message) from exc
            if self._last_error is not None:
                log.info("%s channel: connected to the controller at %s:%d", self.name, host, port)
                self._last_error = None
            self._backoff_s = 0.0
            self._conn = conn
            if self.on_connect is not None:
                self.on_connect(conn.api_versions)
            return conn

    def pick_version(self, api_key: int, wanted_max: int, our_min: int = 0) -> int:
        """The highest version of ``api_key`` both sides speak (see
        :meth:`BrokerConnection.pick_version`); raises UnsupportedVersionError."""
        if self._conn is None:
            raise ControllerUnavailable(f"{self.name} channel is not connected")
        return self._conn.pick_version(api_key, wanted_max, our_min)

    async def request(self, api_key: int, version: int | Callable[[BrokerConnection], int], body: Any, *,
                      timeout_s: float | None = None, unknown_tags: dict | None = None,
                      decoder: Callable[[bytes], Any] | None = None) -> Any:
        """Send one request to the controller and return its decoded answer (error codes
        inside it are not raised). ``version`` may be a function of the connection (to
        pick it from the controller's ApiVersions). Raises :class:`ControllerUnavailable`
        when no connection could be made or it broke (the connection is dropped and the
        next request reconnects) and KafkaTimeoutError when no answer came in time."""
        conn = await self.connection()
        v = version(conn) if callable(version) else version
        try:
            return await conn.request(api_key, v, body, timeout_s=timeout_s, unknown_tags=unknown_tags,
                                      decoder=decoder)
        except KafkaTimeoutError:
            raise
        except KafkaConnectionError as exc:
            self._drop(conn, str(exc))
            raise ControllerUnavailable(str(exc)) from exc

    def _drop(self, conn: BrokerConnection, reason: str) -> None:
        if self._conn is conn:
            self._conn = None
            self._next += 1  # a single voter: the same address again; several: the next one
            self._retry_at = time.monotonic() + INITIAL_BACKOFF_S
            log.info("%s channel: connection to %s:%d lost (%s)", self.name, conn.host, conn.port, reason)
            task = asyncio.get_running_loop().create_task(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def reset(self) -> None:
        """Drop the current connection (e.g. after a request timed out: the controller may
        be paused or gone); the next request reconnects."""
        if self._conn is not None:
            self._drop(self._conn, "reset")

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
