"""A broker's connection to the active controller (Kafka's NodeToControllerChannelManager,
reduced), and how it finds the active controller among the voters.

Theory of operation
-------------------
:class:`ControllerLocator` knows where the active controller is (the Raft leader): the
last leader hint (leader id and epoch from a metadata Fetch answer's ``CurrentLeader``,
its address from ``NodeEndpoints`` or the static voters ``controller.quorum.voters``),
else nobody, and then the next address to try in round-robin order over the voters (or
``controller.quorum.bootstrap.servers``). A hint older than the one known is ignored; a
leader that failed us (connection lost, NOT_CONTROLLER) is forgotten, and a hint naming
that same leader in that same epoch is ignored until the leader itself answers or a newer
epoch is heard of; for STALE_SKIP_S the round-robin asks the other voters only (they
name the new leader as soon as it is elected; a paused leader would hold each visit for
a 2 s handshake). A broker's channels share one locator, so what the metadata Fetch
learns moves the lifecycle channel too: when a hint names a leader at another address,
every channel leaves its connection to another voter at once (a SIGSTOPped leader
keeps its sockets open and answers nothing). The requests in flight on it are abandoned
(``sent=True``, below: the old leader may have run them) and the next request goes to
the new leader.

:class:`ControllerChannel` owns at most one current
:class:`~hightide.client.connection.BrokerConnection` (pipelined requests matched by
correlation id, the ApiVersions handshake on connect). :meth:`ControllerChannel.request`
connects on demand to the locator's target; after a failed attempt it waits an
exponential backoff (50 ms doubling to ``max_backoff_s``; reset by a new leader hint and
by a success) before the next one. One connect attempt runs at a time, shared by every
request that needs it, and each request waits for it only until its own deadline (the
backoff and the handshake included), so callers never queue behind each other's
attempts. Two failures are told apart:

* **not sent** (no connection could be made): :class:`ControllerUnavailable` with
  ``sent=False``; repeating the request is safe;
* **outcome unknown** (the connection broke with the request in flight, or the channel
  abandoned it for a new leader): ``sent=True``; the controller may have processed it.
  The connection is dropped and the next request goes to the next candidate (or the new
  leader). Heartbeats, registrations and the metadata Fetch are sent again by their
  callers; a forwarded write is not (:mod:`.forwarding`).

An answer whose top-level ``ErrorCode`` is NOT_CONTROLLER (41: the voter is not the
active controller; it processed nothing) retires that connection — it is closed once
the requests still in flight on it are answered — and the request is sent again to the
next candidate, until the request's timeout; after it the NOT_CONTROLLER answer is
returned to the caller. Any other retrying is the caller's decision (heartbeats, the
metadata fetch and forwarded writes retry differently).

A broker uses three channels: one for lifecycle requests (registration, heartbeats), one
for forwarded writes, one for the metadata long-poll Fetch, because the controller
answers a connection's requests in order and a heartbeat must queue neither behind a
Fetch parked for up to 500 ms nor behind forwarded writes waiting for their commit (Kafka
also keeps the Raft fetch, the heartbeats and the forwarded requests on separate
channels).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.transport import LOOP_TRANSPORT, Transport
from ..client.connection import BrokerConnection, close_all
from ..client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from ..client.properties import ClientSecurity
from ..protocol.errors import ErrorCode

log = logging.getLogger("hightide.controller_channel")

INITIAL_BACKOFF_S = 0.05
#: Connect and ApiVersions handshake bound: a paused controller accepts the socket (the
#: kernel does) but never answers (Kafka's raft request timeout is 2 s).
CONNECT_TIMEOUT_S = 2.0
#: How long the round-robin skips a leader that failed us (while the others have another
#: to try): a paused leader would hold each visit for CONNECT_TIMEOUT_S while the other
#: voters elect a new one (their fetch timeout, 2 s, and a vote or two).
STALE_SKIP_S = 2.0
NOT_CONTROLLER = int(ErrorCode.not_controller)

Address = tuple[str, int]


class ControllerUnavailable(Exception):
    """No controller could be reached (``sent`` False: the request never left), or the
    connection broke while the request was in flight (``sent`` True: the controller may
    or may not have processed it)."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class _LeaderMoved(Exception):
    """A connect attempt was abandoned for a newly heard-of leader."""


class ControllerLocator:
    """Where the active controller is (see the module doc). ``addresses`` are tried in
    round-robin order while no leader is known; ``voters`` maps voter ids to their
    controller-listener addresses (to resolve a hint that carries only an id); ``clock``
    times the skipping of a failed leader. No IO; safe to share between the channels of
    one event loop."""

    def __init__(self, addresses: Sequence[Address], voters: Mapping[int, Address] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        if not addresses:
            raise ValueError("a controller channel needs at least one controller address")
        self.addresses = list(addresses)
        self.voters = dict(voters or {})
        self.leader_id = -1
        self.leader_epoch = -1
        self.leader_address: Address | None = None
        self._next = 0
        self._stale: tuple[int, int] | None = None  # (id, epoch) of a leader that failed us
        self._stale_address: Address | None = None  # its address, skipped in turn until _stale_until
        self._stale_until = 0.0
        #: Bumped whenever a new leader address is learned (channels reset their backoff).
        self.generation = 0
        #: Called (synchronously, no arguments) after each new leader address.
        self.listeners: list[Callable[[], None]] = []

    def hint(self, leader_id: int, epoch: int, address: Address | None = None, *, authoritative: bool = False) -> bool:
        """Node ``leader_id`` leads ``epoch`` (``leader_id`` -1: an election is on in
        ``epoch``, nobody leads). ``address`` is its controller listener when the answer
        named it (NodeEndpoints); a static voter's configured address wins (it may be a
        proxy, or the only route from here). ``authoritative``:
        the leader itself said so (a successful Fetch answer from it). Returns True when
        the leader's address changed. Hints older than the known epoch are ignored."""
        if epoch < self.leader_epoch:
            return False
        if leader_id < 0:
            if epoch > self.leader_epoch:
                self.leader_epoch, self.leader_id, self.leader_address = epoch, -1, None
            return False
        if self._stale == (leader_id, epoch) and not authoritative:
            return False
        if authoritative:
            self._stale = None
        address = self.voters.get(leader_id) or address
        changed = address is not None and address != self.leader_address
        self.leader_id, self.leader_epoch = leader_id, epoch
        if address is not None:
            self.leader_address = address
        if changed:
            self.generation += 1
            for listener in list(self.listeners):
                listener()
        return changed

    def target(self) -> Address:
        """The address to connect to: the known leader's, else the next in turn — not the
        leader that failed us less than STALE_SKIP_S ago while there is another."""
        if self.leader_address is not None:
            return self.leader_address
        n = len(self.addresses)
        for i in range(n):
            address = self.addresses[(self._next + i) % n]
            if address != self._stale_address or self.clock.monotonic() >= self._stale_until:
                return address
        return self.addresses[self._next % n]

    def failed(self, address: Address) -> None:
        """``address`` did not serve (unreachable, connection lost, NOT_CONTROLLER): if
        it was the known leader, forget it (and ignore hints naming it in this epoch);
        the next target is the address after it in turn."""
        if address == self.leader_address:
            self._stale = (self.leader_id, self.leader_epoch)
            self._stale_address, self._stale_until = address, self.clock.monotonic() + STALE_SKIP_S
            self.leader_address = None
            self.leader_id = -1
        if address in self.addresses:
            self._next = self.addresses.index(address) + 1
        else:
            self._next += 1

    def describe(self) -> str:
        """The known leader for logs: ``3001 (epoch 4) at 127.0.0.1:9095`` or ``unknown``."""
        if self.leader_address is None:
            return "unknown"
        host, port = self.leader_address
        return f"{self.leader_id} (epoch {self.leader_epoch}) at {host}:{port}"


class ControllerChannel:
    """Requests to the active controller. ``addresses`` are the voters (or bootstrap
    servers) tried in turn unless ``locator`` (shared with another channel) is given;
    ``name`` and ``client_id`` identify the channel in logs and in the controller's
    request log; ``clock`` times backoffs and request deadlines (a shared ``locator``
    keeps its own clock: give both the same); ``transport`` opens the connections."""

    def __init__(self, addresses: Sequence[Address], *, client_id: str, name: str = "controller",
                 request_timeout_s: float = 10.0, max_backoff_s: float = 1.0,
                 security: ClientSecurity | None = None, locator: ControllerLocator | None = None,
                 voters: Mapping[int, Address] | None = None, clock: Clock = SYSTEM_CLOCK,
                 transport: Transport = LOOP_TRANSPORT) -> None:
        self.clock = clock
        self.transport = transport
        self.locator = locator if locator is not None else ControllerLocator(addresses, voters, clock)
        self.client_id = client_id
        self.name = name
        self.request_timeout_s = request_timeout_s
        self.max_backoff_s = max_backoff_s
        #: TLS/SASL towards the controller listener (None: PLAINTEXT); see
        #: :func:`~hightide.server.listener_security.controller_client_security`.
        self.security = security
        self._conn: BrokerConnection | None = None
        self._attempt: asyncio.Task[BrokerConnection] | None = None  # the connect attempt under way
        self._backoff_s = 0.0
        self._retry_at = 0.0  # monotonic time before which no connect is attempted
        self._generation = self.locator.generation
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()  # connections being closed after a drop
        self._in_flight: dict[BrokerConnection, int] = {}
        self._retired: set[BrokerConnection] = set()  # closed once their requests are answered
        self._abandoned: set[BrokerConnection] = set()  # left for a new leader with requests in flight
        self._warned: set[str] = set()  # connect failures logged since the last success
        #: Requests answered NOT_CONTROLLER and sent again (for tests and logs).
        self.not_controller_retries = 0
        #: Called with the new connection's ApiVersions map after each successful connect.
        self.on_connect: Callable[[dict[int, tuple[int, int]]], None] | None = None
        self.locator.listeners.append(self._leader_moved)

    @property
    def addresses(self) -> list[Address]:
        return self.locator.addresses

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The controller's ApiVersions (api key → (min, max)) from the last connect;
        empty before the first one."""
        return self._conn.api_versions if self._conn is not None else {}

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.connected

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (every request fails at once)."""
        return self._closed

    @property
    def address(self) -> Address | None:
        """The address of the current connection, if any."""
        return (self._conn.host, self._conn.port) if self._conn is not None else None

    async def connection(self, deadline: float | None = None) -> BrokerConnection:
        """The open connection, connecting first if needed: joins the connect attempt under
        way or starts one (it waits out the backoff of an earlier failed attempt, unless a
        new leader was heard of meanwhile; the handshake is bounded by CONNECT_TIMEOUT_S).
        Waits at most until ``deadline`` (monotonic; None: for the one attempt). Raises
        :class:`ControllerUnavailable` (``sent=False``) if the attempt fails or the
        deadline comes first (the attempt goes on for the other callers)."""
        while True:
            conn = self._conn
            if conn is not None and conn.connected:
                return conn
            if self._closed:
                raise ControllerUnavailable(f"{self.name} channel closed")
            attempt = self._attempt
            if attempt is None or attempt.done():
                attempt = self._attempt = asyncio.get_running_loop().create_task(
                    self._open(), name=f"{self.name}-channel-connect")
                attempt.add_done_callback(_retrieve)
            left = None if deadline is None else deadline - self.clock.monotonic()
            if left is not None and left <= 0:
                raise ControllerUnavailable(f"{self.name} channel: no connection to the active controller in time")
            done, _ = await asyncio.wait((attempt,), timeout=left)
            if not done:
                raise ControllerUnavailable(f"{self.name} channel: no connection to the active controller in time")
            if attempt.cancelled():
                raise ControllerUnavailable(f"{self.name} channel closed")
            failure = attempt.exception()
            if failure is not None:  # else: connected (or moved on since): look again
                raise ControllerUnavailable(str(failure)) from failure

    async def _open(self) -> BrokerConnection:
        """One connect attempt to the locator's target (see :meth:`connection`)."""
        await self._wait_backoff()
        if self._closed:
            raise ControllerUnavailable(f"{self.name} channel closed")
        old, self._conn = self._conn, None
        if old is not None:
            self._close_later(old)
        host, port = self.locator.target()
        conn = BrokerConnection(host, port, self.client_id, security=self.security, transport=self.transport,
                                request_timeout_s=min(self.request_timeout_s, CONNECT_TIMEOUT_S))
        try:
            await self._connect(conn)
            moved_to = self.locator.leader_address
            if moved_to is not None and moved_to != (host, port):  # heard of as the handshake ended
                raise _LeaderMoved()
        except _LeaderMoved:
            self._close_later(conn)
            raise ControllerUnavailable(f"a new leader was heard of while connecting to {host}:{port}") from None
        except (KafkaError, OSError) as exc:
            self.locator.failed((host, port))
            self._back_off()
            message = f"cannot reach the controller at {host}:{port}: {exc}"
            if message not in self._warned:  # once per address and cause until a connect succeeds
                log.warning("%s channel: %s (retrying)", self.name, message)
                self._warned.add(message)
            raise ControllerUnavailable(message) from exc
        if self._closed:
            self._close_later(conn)
            raise ControllerUnavailable(f"{self.name} channel closed")
        if self._warned:
            log.info("%s channel: connected to the controller at %s:%d", self.name, host, port)
            self._warned.clear()
        conn.request_timeout_s = self.request_timeout_s
        self._conn = conn
        if self.on_connect is not None:
            self.on_connect(conn.api_versions)
        return conn

    async def _connect(self, conn: BrokerConnection) -> None:
        """``conn.connect()`` (socket and ApiVersions, bounded by CONNECT_TIMEOUT_S: a
        paused process accepts the socket but never answers), abandoned with
        :class:`_LeaderMoved` when a leader at another address is heard of meanwhile."""
        generation = self.locator.generation
        task = asyncio.ensure_future(conn.connect())
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=0.05)
                moved = self.locator.generation != generation
                if not task.done() and moved and self.locator.target() != (conn.host, conn.port):
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                    raise _LeaderMoved()
        except asyncio.CancelledError:
            task.cancel()
            raise
        task.result()

    async def _wait_backoff(self) -> None:
        """Sleep until the backoff ends; a new leader hint ends it at once."""
        while True:
            if self.locator.generation != self._generation:
                self._generation = self.locator.generation
                self._retry_at, self._backoff_s = 0.0, 0.0
            wait = self._retry_at - self.clock.monotonic()
            if wait <= 0:
                return
            await self.clock.sleep(min(wait, 0.05))

    def _back_off(self) -> None:
        self._backoff_s = min(self.max_backoff_s, max(INITIAL_BACKOFF_S, self._backoff_s * 2))
        self._retry_at = self.clock.monotonic() + self._backoff_s

    def pick_version(self, api_key: int, wanted_max: int, our_min: int = 0) -> int:
        """The highest version of ``api_key`` both sides speak (see
        :meth:`BrokerConnection.pick_version`); raises UnsupportedVersionError."""
        if self._conn is None:
            raise ControllerUnavailable(f"{self.name} channel is not connected")
        return self._conn.pick_version(api_key, wanted_max, our_min)

    async def request(self, api_key: int, version: int | Callable[[BrokerConnection], int], body: Any, *,
                      timeout_s: float | None = None, unknown_tags: dict | None = None,
                      decoder: Callable[[bytes], Any] | None = None) -> Any:
        """Send one request to the active controller and return its decoded answer (error
        codes inside it are not raised). ``version`` may be a function of the connection
        (to pick it from the controller's ApiVersions). Until ``timeout_s`` (default: the
        channel's request timeout) has passed, a failed connect is tried again (the next
        candidate, after the backoff) and an answer NOT_CONTROLLER is sent again to the
        next candidate; after it that answer is returned. Raises
        :class:`ControllerUnavailable` when no connection could be made in that time
        (``sent=False``) or it broke with the request in flight
        (``sent=True``; the connection is dropped and the next request reconnects), and
        KafkaTimeoutError when no answer came in time."""
        limit = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = self.clock.monotonic() + limit
        refused: Any = None  # the last NOT_CONTROLLER answer
        while True:
            try:
                conn = await self.connection(deadline)
            except ControllerUnavailable:
                if self.clock.monotonic() >= deadline or self._retry_at >= deadline or self._closed:
                    if refused is not None:
                        return refused
                    raise
                continue
            if self.clock.monotonic() >= deadline:  # waited for a connection too long: never sent
                if refused is not None:
                    return refused
                raise ControllerUnavailable(f"{self.name} channel: no connection to the active controller within "
                                            f"{limit:g} s")
            v = version(conn) if callable(version) else version
            self._in_flight[conn] = self._in_flight.get(conn, 0) + 1
            try:
                resp = await conn.request(api_key, v, body, timeout_s=max(0.05, deadline - self.clock.monotonic()),
                                          unknown_tags=unknown_tags, decoder=decoder)
            except KafkaTimeoutError:
                raise
            except KafkaConnectionError as exc:
                if conn in self._abandoned:
                    raise ControllerUnavailable(
                        f"{self.name} channel: the request in flight to {conn.host}:{conn.port} was abandoned: the "
                        f"active controller is {self.locator.describe()} now", sent=True) from exc
                self._drop(conn, str(exc))
                raise ControllerUnavailable(str(exc), sent=True) from exc
            finally:
                self._done(conn)
            if getattr(resp, "error_code", 0) != NOT_CONTROLLER:
                self._backoff_s = 0.0
                return resp
            self._retire(conn)
            refused = resp
            if self.clock.monotonic() >= deadline:
                return resp
            self.not_controller_retries += 1
            if unknown_tags is not None:
                unknown_tags.clear()

    def _done(self, conn: BrokerConnection) -> None:
        left = self._in_flight.get(conn, 1) - 1
        if left > 0:
            self._in_flight[conn] = left
            return
        self._in_flight.pop(conn, None)
        self._abandoned.discard(conn)
        if conn in self._retired:
            self._retired.discard(conn)
            self._close_later(conn)

    def _retire(self, conn: BrokerConnection) -> None:
        """``conn`` answered NOT_CONTROLLER: send nothing more on it (close it once its
        requests in flight are answered) and look for the active controller elsewhere."""
        if self._conn is not conn:
            return
        self._conn = None
        self.locator.failed((conn.host, conn.port))
        self._back_off()
        log.debug("%s channel: %s:%d is not the active controller (NOT_CONTROLLER); next: %s", self.name,
                  conn.host, conn.port, self.locator.describe())
        if self._in_flight.get(conn):
            self._retired.add(conn)
        else:
            self._close_later(conn)

    def _leader_moved(self) -> None:
        """The locator learned a new leader address: leave a connection to another voter
        now (closing it abandons its requests in flight; see the module doc)."""
        conn, target = self._conn, self.locator.leader_address
        if conn is None or target is None or (conn.host, conn.port) == target or self._closed:
            return
        self._conn = None
        log.info("%s channel: leaving %s:%d for the active controller %s%s", self.name, conn.host, conn.port,
                 self.locator.describe(), f" ({self._in_flight[conn]} request(s) in flight abandoned)"
                 if self._in_flight.get(conn) else "")
        if self._in_flight.get(conn):
            self._abandoned.add(conn)
        self._close_later(conn)

    def _drop(self, conn: BrokerConnection, reason: str) -> None:
        if self._conn is conn:
            self._conn = None
            self.locator.failed((conn.host, conn.port))
            self._retry_at = self.clock.monotonic() + INITIAL_BACKOFF_S
            log.log(logging.DEBUG if reason == "reset" else logging.INFO, "%s channel: connection to %s:%d %s",
                    self.name, conn.host, conn.port, "dropped" if reason == "reset" else f"lost ({reason})")
            self._close_later(conn)

    def _close_later(self, conn: BrokerConnection) -> None:
        task = asyncio.get_running_loop().create_task(conn.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def retire_current(self) -> None:
        """The current connection's controller answered that it is not active (e.g.
        NOT_CONTROLLER inside a forwarded response): retire it as :meth:`request` does."""
        if self._conn is not None:
            self._retire(self._conn)

    def reset(self) -> None:
        """Drop the current connection (e.g. after a request timed out: the controller may
        be paused or gone); the next request connects to the next candidate."""
        if self._conn is not None:
            self._drop(self._conn, "reset")

    async def close(self) -> None:
        self._closed = True
        with contextlib.suppress(ValueError):
            self.locator.listeners.remove(self._leader_moved)
        attempt, self._attempt = self._attempt, None
        if attempt is not None and not attempt.done():
            attempt.cancel()
            await asyncio.wait((attempt,), timeout=CONNECT_TIMEOUT_S)
        conn, self._conn = self._conn, None
        retired, self._retired = list(self._retired), set()
        await close_all(([conn] if conn is not None else []) + retired)  # at once, each bounded


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A connect attempt's failure is its waiters' to raise; none may be left to see it."""
    if not task.cancelled():
        task.exception()
