"""This node's listeners and the client connections they accepted (Kafka's ``SocketServer``).

Theory of operation. :meth:`Listeners.start` opens every listener this process serves,
through the node's :class:`~hightide.aio.transport.Transport`, each with its security
(:func:`~.listener_security.listener_security`, built once per listener name) and the
route table it answers with:

* the single node without ``listeners``: one PLAINTEXT listener on ``listen``, serving
  every API; with ``listeners`` (e.g. SASL_SSL and PLAINTEXT): each serves every API and
  advertises itself (:class:`~.listener_security.ListenerIdentity`);
* cluster mode: a broker's listeners serve the broker's route table, a controller's
  listener the controller's.

Each accepted connection is a :class:`~.connection.KafkaConnection` owned by this object
(:class:`~.connection.ConnectionOwner`): it adds itself to :attr:`Listeners.connections`
while open. The ports actually bound are kept (a configured port may be 0): a broker-only
node registers them (:meth:`~Listeners.registered`), a controller publishes its
endpoints (:meth:`~Listeners.controller_endpoints`). :meth:`~Listeners.watch_descriptors`
runs once a second: it warns when open file descriptors reach the limit and re-opens a
listener the event loop gave up. Stopping is three steps of the broker's stop
(docs/durability.md "Shutdown"): :meth:`~Listeners.close` (stop accepting),
:meth:`~Listeners.drain_requests` (in-flight requests, bounded),
:meth:`~Listeners.close_connections`.

Built from: ``config`` (the broker config: the listeners' security settings and what
each connection reads), ``cluster`` (roles, listeners, advertised listeners), ``listen``
(the single node's default address), ``image`` (the current metadata image: SCRAM
credentials when a client authenticates), ``stopping`` (whether the node is stopping),
``transport`` and ``clock``; at start, the route tables (the default
:class:`~.context.Services` and a controller's). Never the broker.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import os
import resource
from collections.abc import Callable, MutableSet
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.ordered import OrderedSet
from ..aio.transport import LOOP_TRANSPORT, Listening, Transport
from ..cluster.image import MetadataImage
from ..cluster.settings import ClusterSettings, Listener
from ..config import BrokerConfig, ConfigError
from .connection import KafkaConnection
from .context import Services
from .listener_security import PLAINTEXT, PROTOCOL_IDS, ListenerIdentity, ListenerSecurity, listener_security
from .registry import Routes

log = logging.getLogger("hightide.broker")

#: How often :meth:`Listeners.watch_descriptors` looks.
DESCRIPTOR_WATCH_S = 1.0


class Listeners:
    """The listeners of this node and their open connections (see the module doc)."""

    def __init__(self, *, config: BrokerConfig, cluster: ClusterSettings, listen: tuple[str, int],
                 image: Callable[[], MetadataImage], stopping: Callable[[], bool],
                 transport: Transport = LOOP_TRANSPORT, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.cluster = cluster
        self.listen = listen
        self._image = image
        self._stopping = stopping
        self.transport = transport
        self.clock = clock
        #: The open client connections (each adds and removes itself).
        self.connections: MutableSet[KafkaConnection] = OrderedSet()
        self.server: Listening | None = None  # the first listener's (single node: the only one)
        #: Every listener with its bound port (cluster mode may have a broker and a controller listener).
        self.servers: list[tuple[Listener, Listening]] = []
        #: (host, port) of the first listener as bound (``listen`` until started).
        self.bound: tuple[str, int] = listen
        self._services: Services | None = None  # the default route table, given at start
        self._serving: dict[str, Services] = {}  # listener name -> its services
        self._security: dict[str, ListenerSecurity] = {}  # listener name -> its security (issue 17)

    # -- ConnectionOwner: what a connection reads of the node that accepted it ------------
    @property
    def services(self) -> Services:
        """The default services (the broker's route table), as given to :meth:`start`."""
        assert self._services is not None, "the listeners are not started"
        return self._services

    @property
    def routes(self) -> Routes:
        return self.services.routes

    # -- start ----------------------------------------------------------------------------
    def security(self, name: str) -> ListenerSecurity:
        """The security (protocol, TLS context, SASL settings) of listener ``name``, built
        once. Raises ConfigError naming the setting at fault."""
        security = self._security.get(name)
        if security is None:
            try:
                security = listener_security(name, self.config.security_values, self._image,
                                             self.cluster.controller_listener_names)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            self._security[name] = security
        return security

    def _wanted(self, services: Services, controller_services: Services | None) -> list[tuple[Listener, Services]]:
        """The listeners this process serves and the services (route table) of each: the
        single node has one, from ``listen``, serving every API."""
        if self.cluster.single_node:
            if "listeners" not in self.config.cluster_values:  # --listen: one PLAINTEXT listener
                return [(Listener("PLAINTEXT", *self.listen), services)]
            # explicit listeners (e.g. SASL_SSL and PLAINTEXT): each serves every API and advertises itself
            return [(x, dataclasses.replace(services, listener=x.name, identity=ListenerIdentity(
                services.identity, x, self.bound_port, self.cluster))) for x in self.cluster.listeners]
        wanted = list(self.cluster.broker_listeners) if self.cluster.is_broker else []
        if self.cluster.is_controller:
            wanted += self.cluster.controller_listeners
        names = self.cluster.controller_listener_names
        return [(x, dataclasses.replace(controller_services if x.name in names and controller_services is not None
                                        else services, listener=x.name)) for x in wanted]

    async def start(self, services: Services, controller_services: Services | None = None) -> None:
        """Open every listener (see the module doc): ``services`` is the default route
        table, ``controller_services`` a controller listener's. Raises OSError when one
        cannot be opened (its port taken, say), ConfigError for a bad security setting."""
        self._services = services
        for listener, serving in self._wanted(services, controller_services):
            self._serving[listener.name] = serving
            server = await self._listen(listener, serving)
            self.servers.append((Listener(listener.name, listener.host, server.address[1]), server))  # the bound port
        self.server = self.servers[0][1]
        self.bound = self.server.address

    async def _listen(self, listener: Listener, services: Services) -> Listening:
        """Open ``listener`` through the node's transport, serving ``services``."""
        security = self.security(listener.name)
        return await self.transport.listen(
            functools.partial(KafkaConnection, self, services, security, self.clock), listener.host or None,
            listener.port, reuse_address=True, backlog=1024, ssl=security.ssl_context,
            ssl_handshake_timeout=security.auth_timeout_ms / 1000 if security.ssl_context else None)

    def summary(self) -> str | None:
        """The listeners with their security protocols, for the start-up log; None for a
        single PLAINTEXT listener (nothing to add to the address already logged)."""
        if len(self.servers) == 1 and self._security.get(self.servers[0][0].name, PLAINTEXT).protocol == "PLAINTEXT":
            return None
        return ", ".join(f"{x} ({self.security(x.name).protocol})" for x, _ in self.servers)

    # -- what others learn of them -------------------------------------------------------
    def bound_port(self, listener_name: str) -> int | None:
        """The port a listener is bound to (its configured port may be 0), or None."""
        for listener, _ in self.servers:
            if listener.name == listener_name:
                return listener.port
        return None

    def registered(self) -> list[dict[str, Any]]:
        """A broker-only node's listeners as its registration names them (bound ports,
        advertised hosts, security protocols); not the controller listeners."""
        out = []
        for listener, _ in self.servers:
            if listener.name not in self.cluster.controller_listener_names:
                host, port = self.cluster.advertised_for(listener, listener.port)
                out.append({"name": listener.name, "host": host, "port": port,
                            "security_protocol": PROTOCOL_IDS[self.security(listener.name).protocol]})
        return out

    def controller_endpoints(self) -> list[tuple[str, str, int]]:
        """(name, host, port) of the controller listeners as bound (wildcards as 127.0.0.1)."""
        return [(x.name, *self.cluster.advertised_for(x, x.port)) for x, _ in self.servers
                if x.name in self.cluster.controller_listener_names]

    # -- while running --------------------------------------------------------------------
    async def watch_descriptors(self) -> None:
        """Once a second: warn (once per episode) when open file descriptors reach the
        limit, and re-open the listener if the event loop gave it up.

        Running out of descriptors is otherwise silent under uvloop: libuv accepts and
        at once closes connections it has no descriptor for, and it closes the whole
        listener if even that fails. Segment files that cannot be opened meanwhile
        answer KAFKA_STORAGE_ERROR (see :class:`~hightide.disk.hosted_logs.HostedLogs`)."""
        try:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (OSError, ValueError):
            limit = resource.RLIM_INFINITY
        at_limit = False
        while True:
            await self.clock.sleep(DESCRIPTOR_WATCH_S)
            if self._stopping():
                return
            try:
                in_use = len(os.listdir("/proc/self/fd"))
            except OSError as exc:  # EMFILE itself, or no /proc
                in_use = limit if exc.errno in (errno.EMFILE, errno.ENFILE) else -1
            if limit != resource.RLIM_INFINITY and in_use >= 0:
                if not at_limit and in_use >= limit - max(4, limit // 100):
                    at_limit = True
                    log.warning("open file descriptors at the limit (%d of %d, %d connections): new connections "
                                "are refused and new segments cannot be opened until some close; raise ulimit -n",
                                in_use, limit, len(self.connections))
                elif at_limit and in_use < limit * 9 // 10:
                    at_limit = False
                    log.warning("open file descriptors back under the limit (%d of %d)", in_use, limit)
            if not self._stopping():
                await self._reopen_closed()

    async def _reopen_closed(self) -> None:
        """Re-open any listener the event loop gave up (see :meth:`watch_descriptors`)."""
        for i, (listener, server) in enumerate(self.servers):
            if server.is_serving():
                continue
            log.error("the listener %s on %s:%d was closed by the event loop; reopening it", listener.name,
                      listener.host, listener.port)
            try:
                server = await self._listen(listener, self._serving[listener.name])
            except OSError as exc:
                log.error("reopening the listener failed (retrying): %s", exc)
                continue
            self.servers[i] = (listener, server)
            if i == 0:
                self.server = server

    # -- stop -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop accepting connections (the open ones go on)."""
        for _, server in self.servers:
            server.close()

    async def drain_requests(self, grace_s: float) -> None:
        """Wait until no connection has a request in flight, at most ``grace_s``."""
        deadline = self.clock.monotonic() + grace_s
        while any(c.in_flight for c in self.connections) and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.01)

    def close_connections(self) -> None:
        """Close every client connection."""
        for c in list(self.connections):
            c.close("broker shutting down", level=logging.DEBUG)
