"""The broker process: wires the metadata log, the partition logs and the listener.

``Broker`` is an async context manager, so tests and applications can embed it::

    async with Broker(BrokerConfig(), data_dir="/tmp/ht", listen=("127.0.0.1", 0)) as b:
        print(b.port)

Shutdown order (``stop``): stop accepting, let in-flight requests finish (bounded),
close connections, flush and close every log, write the clean-shutdown marker, release
the data-dir lock; every step bounded and run whatever the one before did
(:mod:`.shutdown`, docs/durability.md "Shutdown").
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import logging
import os
import resource
from collections.abc import MutableSet
from typing import Any, Iterable

from ..cluster.controller import Controller, NewTopic, TopicResult
from ..cluster.image import MetadataImage, TopicImage
from ..cluster.lifecycle import ElectionConfig, LifecycleConfig
from ..cluster.metadata_log import METADATA_TOPIC, MetadataLog
from ..cluster.records import MetadataRecord
from ..cluster.settings import ClusterSettings, Listener
from ..config import BrokerConfig, ConfigError, effective_topic_config
from ..log.config import LogConfig
from ..log.data_dir import (DataDirNotFormatted, check_identity, format_dir, read_meta_properties,
                            write_meta_properties)
from ..log.data_dir import new_id as new_cluster_id
from ..log.dirlock import DirLock
from ..log.manager import LogManager, TopicPartition
from ..log.partition_log import PartitionLog
from ..log.storage import POSIX, Storage
from ..log.storage_cache import with_descriptor_budget
from . import handlers
from ..node.broker_node import BrokerNode
from .node_routes import broker_node_routes
from .connection import KafkaConnection
from .listener_security import (PLAINTEXT, PROTOCOL_IDS, ListenerIdentity, ListenerSecurity, controller_client_security,
                                inter_broker_client, listener_security)
from .context import Services
from .registry import Routes
from ..node.controller_service import ControllerService
from ..disk.flusher import Flusher
from ..disk.cleaner import LogCleaner
from ..coordinator.runtime import CoordinatorUnavailable
from ..coordinator.groups import GroupRuntime
from ..quota.manager import ClientQuotas
from ..replica.leader_offsets import LeaderOffsets
from ..services import MetadataOp
from ..node.metadata_runtime import (LONE_VOTER_ELECTION_S, RaftMetadataRuntime, SnapshotPolicy, raft_config,
                                     raft_metadata_runtime)
from ..replica.fetcher import REQUEST_TIMEOUT_S as FETCHER_REQUEST_TIMEOUT_S, ReplicaFetcherManager
from ..replica.manager import ReplicaManager
from ..coordinator.share_groups import ShareGroupService
from ..coordinator.share_partitions import SharePartitionManager
from ..coordinator.share_persister import REQUEST_TIMEOUT_S as SHARE_REQUEST_TIMEOUT_S
from ..coordinator.share_persister import SharePersisterClient
from ..coordinator.share_state import ShareStateRuntime
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.transport import LOOP_TRANSPORT, Listening, Transport
from ..aio.shutdown import Step, run_steps
from ..node.inter_broker import InterBroker
from ..node.snapshotter import Snapshotter, snapshotter_for
from ..aio.tasks import cancel_and_wait
from ..coordinator.env import CoordinatorEnv
from ..coordinator.transactions import TransactionCoordinator
from ..coordinator.txn_verify import REQUEST_TIMEOUT_S as TXN_VERIFY_TIMEOUT_S
from ..coordinator.txn_verify import RemoteTxnVerifier
from ..aio.ordered import OrderedSet
from ..aio.waiters import AppendWaiters

log = logging.getLogger("hightide.broker")

GROUP_TIMER_INTERVAL_S = 0.1
METADATA_FETCH_KEY = (METADATA_TOPIC, 0)  # the observers' long-poll key (handlers.controller_fetch)
#: How long a broker-only node waits for the controller on its own topic creations before
#: answering a retriable error (see Broker._create_through_controller).
OWN_WRITE_WAIT_S = 5.0
#: Deadline of each step of Broker.stop (``Broker.stop_step_timeout_s``) and of the flush step.
STOP_STEP_TIMEOUT_S = 5.0
FLUSH_STOP_TIMEOUT_S = 30.0


class Broker:
    def __init__(self, config: BrokerConfig | None = None, *, data_dir: str = "./hightide-data",
                 listen: tuple[str, int] = ("127.0.0.1", 9092),
                 advertised: tuple[str, int] | None = None, cluster_id: str | None = None,
                 storage: Storage = POSIX, clock: Clock = SYSTEM_CLOCK,
                 transport: Transport = LOOP_TRANSPORT) -> None:
        self.config = config or BrokerConfig()
        #: The one clock of this node's shell (hightide.aio.clock): every component built
        #: here reads time, sleeps and schedules through it.
        self.clock = clock
        #: The one network of this node's shell (hightide.aio.transport): its listeners
        #: and every connection it opens (inter-broker, controller channels, Raft peers).
        self.transport = transport
        #: Roles, listeners and controller addresses (cluster mode, issue 13). Raises
        #: ConfigError when the cluster configs do not fit together.
        self.cluster: ClusterSettings = self.config.cluster_settings()
        #: every partition log's files (an in-memory or faulty engine in tests), at most
        #: ``log.max.open.files`` of them open at once (hightide.log.storage_cache)
        self.storage = with_descriptor_budget(storage, self.config["log.max.open.files"])
        self.node_id: int = self.config["node.id"]
        self.data_dir = os.path.abspath(data_dir)
        self.listen = listen
        self._advertised = advertised
        self.connections: MutableSet[KafkaConnection] = OrderedSet()
        self.server: Listening | None = None  # the first listener's (single node: the only one)
        #: Every listener (cluster mode may have a broker and a controller listener).
        self.servers: list[tuple[Listener, Listening]] = []
        self.logs: LogManager | None = None
        self.metadata: MetadataLog | None = None
        #: Writes to the metadata log, through Raft (the single node and a controller: a
        #: voter, alone or one of a quorum); None on a broker-only node.
        self.metadata_runtime: RaftMetadataRuntime | None = None
        #: Cluster mode's controller-only process (process.roles=controller): the metadata
        #: log, its runtime and the controller service; no partition logs, no coordinators.
        self.controller_only = self.cluster.is_controller and not self.cluster.is_broker
        # the single node leads every partition itself; a controller places them over the
        # registered brokers (cluster.placement)
        self.controller = Controller(self.config, None if self.controller_only else [self.node_id])
        self.controller_service: ControllerService | None = None  # controller-only: started by start()
        self.controller_services: Services | None = None  # the controller listener's route table
        self.waiters = AppendWaiters()
        #: Where other brokers are and how to reach them (every component calling them gets
        #: its connections from it).
        self.inter_broker = InterBroker(lambda: self.image, lambda: inter_broker_client(
            self.config.security_values, tuple(x.name for x in self.cluster.broker_listeners),
            self.cluster.controller_listener_names), transport)
        self.flusher = Flusher(lambda: self.logs, clock=clock)
        self.cleaner = LogCleaner(lambda: self.logs, skip_topics=(METADATA_TOPIC,), clock=clock)
        # the coordinators (hightide.coordinator), built from what they use of this node
        env = CoordinatorEnv(
            config=self.config, node_id=self.node_id, image=lambda: self.image, partition_log=self.partition_log,
            durable=self.flusher.durable, wake=self.waiters.wake, create_topics=self.create_topics,
            cluster=not self.cluster.single_node, acting=lambda: self.metadata_ready, stopping=lambda: self.stopping,
            replicated=lambda topic, p, end: self.replica_manager.wait_replicated(topic, p, end), clock=clock)
        self.groups = GroupRuntime(env)
        self.share_state = ShareStateRuntime(env)  # share coordinator (SharePersister)
        self.share_persister = SharePersisterClient(  # share_state here, or its leader's (cluster mode)
            env, self.share_state, self.inter_broker.clients(f"hightide-share-{self.node_id}", SHARE_REQUEST_TIMEOUT_S))
        self.share_groups = ShareGroupService(env, self.groups, self.share_state,  # share.types.ShareGroupView
                                              self.share_persister)
        self.share_manager = SharePartitionManager(  # share partitions, ShareFetch sessions
            max_sessions=self.config["group.share.max.share.sessions"], node_id=self.node_id,
            partition_log=self.partition_log, wake=self.waiters.wake, groups=self.share_groups,
            persister=self.share_persister, state=self.share_state, clock=clock)
        self.share_groups.manager = self.share_manager
        self.txns = TransactionCoordinator(  # transaction coordinator (KIP-890 verifier too)
            env, groups=self.groups, next_producer_id=self.next_producer_id,
            peers=self.inter_broker.clients(f"hightide-txn-markers-{self.node_id}"),
            verifier=RemoteTxnVerifier(self.inter_broker.clients(f"hightide-txn-verify-{self.node_id}",
                                                          TXN_VERIFY_TIMEOUT_S), TXN_VERIFY_TIMEOUT_S))
        self.replica_manager = ReplicaManager(  # replication roles, ISR, HW, acks=all (issue 15)
            node_id=self.node_id, config=self.config, logs=lambda: self.logs, waiters=self.waiters,
            image=lambda: self.image, metadata_ready=lambda: self.metadata_ready,
            broker_epoch=self._broker_epoch, controller=lambda: self.node.channel if self.node is not None else None,
            clock=clock)
        self.replica_manager.fetchers = self.replica_fetchers = ReplicaFetcherManager(  # followers fetch
            self.inter_broker.clients(f"hightide-replica-fetcher-{self.node_id}", FETCHER_REQUEST_TIMEOUT_S),
            node_id=self.node_id, broker_epoch=self._broker_epoch,
            logs=lambda: self.logs, image=lambda: self.image, durable=self.flusher.durable, waiters=self.waiters,
            clock=clock)
        self.leader_offsets = LeaderOffsets(  # OffsetFetch's HW tags of partitions led elsewhere
            self.inter_broker.clients(f"hightide-offsets-{self.node_id}"), self.node_id,  # addresses, TLS/SASL
            clock=clock)
        self.quotas = ClientQuotas(  # client quota sensors (Produce/Fetch throttling; hightide.quota)
            lambda: self.image.quotas, self.config["quota.window.num"], self.config["quota.window.size.seconds"])
        self._tasks: list[asyncio.Task] = []
        self._own_creations: dict[tuple[str, ...], asyncio.Future[list[TopicResult]]] = {}
        self._producer_ids: tuple[int, int] = (0, 0)  # next, end of reserved block
        self.cluster_id = cluster_id
        self.started_at = 0.0
        self.stopping = False
        self.stop_step_timeout_s = STOP_STEP_TIMEOUT_S  # each step of stop() (tests shorten it)
        self._bound: tuple[str, int] = listen
        self._unopened: dict[TopicPartition, float] = {}  # logs that failed to open -> retry time
        self._dir_lock: DirLock | None = None  # exclusive .lock on data_dir, held from start to stop
        self._security: dict[str, ListenerSecurity] = {}  # listener name -> its security (issue 17)
        self.routes = handlers.routes()  # the route table; ApiVersions is computed from it
        self.services = _services_of(self, self.routes)  # what handlers get, by narrow interface
        #: The cluster side of a broker-only process (process.roles=broker): controller
        #: channels, registration and heartbeats, the metadata follower, forwarding and the
        #: read gate. None on the single node and on a controller.
        self.node: BrokerNode | None = None
        if self.cluster.is_broker and not self.cluster.is_controller:
            self.node = BrokerNode(
                self.cluster, security=controller_client_security(self.config.security_values,
                                                                  self.cluster.controller_listener_names),
                cluster_id=lambda: self.cluster_id, listeners=self._registered_listeners,
                on_metadata_change=self.after_metadata_change, data_dir=self.data_dir, clock=clock,
                transport=transport)
            self.routes = broker_node_routes(self.routes, self.node)
            self.services = _services_of(self, self.routes)

    # -- lifecycle ------------------------------------------------------------------
    async def __aenter__(self) -> "Broker":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        t0 = self.clock.monotonic()
        if self._dir_lock is None:  # first, before anything in the directory is opened or written
            self._dir_lock = DirLock.acquire(self.data_dir)  # raises log.dirlock.DataDirLocked
        self.logs = LogManager(self.data_dir, self.storage)
        self.metadata = MetadataLog(self.data_dir, self.clock.now_ms(), self.logs.clean_shutdown,
                                    storage=self.storage,
                                    segment_bytes=self.cluster.metadata_segment_bytes,
                                    refetchable=self.node is not None)  # a broker's copy may be fetched again
        if self.node is not None and self.cluster_id is None and self._read_meta_properties().get("cluster.id") is None:
            self._load_cluster_id(await self.node.adopt_cluster_id())  # written to meta.properties
        self.cluster_id = self.cluster_id or self._load_cluster_id()
        # the flusher first: a voter's metadata commits wait for its fsyncs
        self._tasks.append(asyncio.create_task(self.flusher.run(), name="flusher"))
        if self.node is None:  # a voter (a broker-only node's metadata log is a copy of the controller's)
            self.metadata_runtime = self._metadata_runtime()
        if self.cluster.single_node:  # the lone voter leads before anything reads its image
            await self._elect_lone_voter()
        self.apply_dynamic_broker_configs()
        if self.controller_only:
            self._start_controller()
            if self.metadata_runtime is not None and self.metadata_runtime.shell.core.lone_voter:
                await self._elect_lone_voter()
        else:
            # A broker-only node's local copy may be stale: its logs are opened (recovered),
            # but nothing is led, followed, coordinated or deleted before it caught up with
            # the controller (BrokerNode.caught_up, then after_metadata_change).
            self._open_logs(delete_removed=self.node is None)
            if self.node is None:  # the single node leads every partition: its logs take their leader epochs
                self.replica_manager.apply_image(self.image)
            self.groups.start()  # a broker-only node: nothing loaded before the catch-up
            self.share_state.start()
            self.txns.start()
        await self._start_listeners()
        if self.node is not None:
            self.node.start(self.metadata, self.flusher.durable)  # after the listeners: the registration names their ports
        self.snapshotter = self._snapshotter()  # a broker-only node's (a voter's shell snapshots through the core)
        if self.snapshotter is not None:
            self._tasks.append(asyncio.create_task(self.snapshotter.run(), name="metadata-snapshots"))
        if self.controller_service is not None:
            self._tasks.append(asyncio.create_task(self.controller_service.run(), name="controller-timers"))
        else:
            self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
            self._tasks.append(asyncio.create_task(self._group_timers(), name="group-timers"))
            self._tasks.append(asyncio.create_task(self._share_state_pruning(), name="share-state-pruning"))
            self._tasks.append(asyncio.create_task(self.share_manager.run_timers(), name="share-lock-expiry"))
            self._tasks.append(asyncio.create_task(self.txns.run_timers(), name="transaction-timers"))
            self._tasks.append(asyncio.create_task(self.replica_manager.run(), name="isr-expiration"))
        self._tasks.append(asyncio.create_task(self._watch_descriptors(), name="fd-watch"))
        if self.config["log.cleaner.enable"] and not self.controller_only:
            self._tasks.append(asyncio.create_task(self._cleaner_loop(), name="log-cleaner"))
        self.started_at = self.clock.monotonic()
        log.info("hightide node %d listening on %s:%d (advertised %s:%d), data dir %s, ready in %.0f ms",
                 self.node_id, self.host, self.port, *self.advertised, self.data_dir,
                 (self.clock.monotonic() - t0) * 1000)
        if len(self.servers) > 1 or self._security.get(self.servers[0][0].name, PLAINTEXT).protocol != "PLAINTEXT":
            log.info("listeners: %s", ", ".join(f"{x} ({self.listener_security(x.name).protocol})"
                                                for x, _ in self.servers))

    def _listeners(self) -> list[tuple[Listener, Services]]:
        """The listeners this process serves and the services (route table) of each: the
        single node has one, from ``listen``, serving every API."""
        if self.cluster.single_node:
            if "listeners" not in self.config.cluster_values:  # --listen: one PLAINTEXT listener
                return [(Listener("PLAINTEXT", *self.listen), self.services)]
            # explicit listeners (e.g. SASL_SSL and PLAINTEXT): each serves every API and advertises itself
            return [(x, dataclasses.replace(self.services, listener=x.name, identity=ListenerIdentity(self, x)))
                    for x in self.cluster.listeners]
        wanted = list(self.cluster.broker_listeners) if self.cluster.is_broker else []
        if self.cluster.is_controller:
            wanted += self.cluster.controller_listeners
        return [(x, dataclasses.replace(self._services_of(x), listener=x.name)) for x in wanted]

    def _services_of(self, listener: Listener) -> Services:
        """A controller listener's services have the controller's route table."""
        if listener.name in self.cluster.controller_listener_names and self.controller_services is not None:
            return self.controller_services
        return self.services

    def _start_controller(self) -> None:
        """A controller-only process: the controller service on the metadata log (see
        :mod:`.controller_service`) and the controller listener's route table."""
        assert self.metadata is not None and self.metadata_runtime is not None and self.cluster_id is not None
        metadata, runtime = self.metadata, self.metadata_runtime
        raft = runtime.shell
        self.controller_service = ControllerService(
            node_id=self.node_id, cluster_id=self.cluster_id,
            config=LifecycleConfig(self.cluster.session_timeout_ms, self.cluster.max_idle_interval_ms),
            write=self.write_metadata, image=lambda: metadata.image, metadata_log=lambda: metadata.log,
            committed_end=lambda: runtime.committed_offset(0), endpoints=self._controller_endpoints, raft=raft,
            voter_endpoints={v.node_id: (v.host, v.port) for v in self.cluster.voters}, clock=self.clock)
        self.controller_service.lifecycle.elections = lambda: ElectionConfig.from_config(self.config)
        self.controller_services = _services_of(self, handlers.controller_routes(self.controller_service))
        raft.on_commit, raft.on_activate = self._metadata_committed, self.controller_service.activate
        raft.start()

    def _voter_addresses(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every voter of the metadata quorum: the static voters
        of a controller, else this node alone (the single node, a controller without
        ``controller.quorum.voters``; its address is never used)."""
        return [(v.node_id, v.host, v.port) for v in self.cluster.voters] or [(self.node_id, "", 0)]

    def _metadata_runtime(self) -> RaftMetadataRuntime:
        """The Raft runtime of this voter (not started: the single node's by
        :meth:`_elect_lone_voter`, a controller's by :meth:`_start_controller`)."""
        assert self.metadata is not None
        return raft_metadata_runtime(
            node_id=self.node_id, voters=self._voter_addresses(), metadata=self.metadata,
            durable=self.flusher.durable, cluster_id=self.cluster_id, security=controller_client_security(
                self.config.security_values, self.cluster.controller_listener_names),
            snapshots=SnapshotPolicy(self.cluster.snapshot_max_bytes, self.cluster.snapshot_interval_ms,
                                     lambda timeout_s: self.waiters.wait([METADATA_FETCH_KEY], timeout_s)),
            config=raft_config(self.cluster), storage=self.storage, clock=self.clock, transport=self.transport,
            dynamic=self.cluster.dynamic_quorum, directory_id=self._read_meta_properties().get("directory.id", ""),
            bootstrap=self.cluster.bootstrap_servers, listener_name=(self.cluster.controller_listener_names or ("",))[0])

    async def _elect_lone_voter(self) -> None:
        """Start the lone voter's shell (unless the controller started it) and wait until
        it leads with its log committed (one quorum-state write and one fsync of the
        log, off the loop): its image is then what it serves. Raises OSError when its
        storage failed meanwhile."""
        assert self.metadata_runtime is not None
        shell = self.metadata_runtime.shell
        if not shell.started:
            shell.start()
        if not await shell.wait_active(LONE_VOTER_ELECTION_S):
            raise OSError(errno.EIO, f"the metadata log did not become writable: {shell.failed or 'no election'}",
                          self.metadata.log.path if self.metadata is not None else self.data_dir)

    def _controller_endpoints(self) -> list[tuple[str, str, int]]:
        """(name, host, port) of the controller listeners as bound (wildcards as 127.0.0.1)."""
        return [(x.name, *self.cluster.advertised_for(x, x.port)) for x, _ in self.servers
                if x.name in self.cluster.controller_listener_names]

    def _snapshotter(self) -> Snapshotter | None:
        """A broker-only node's snapshotter of its local copy
        (:func:`~hightide.node.snapshotter.snapshotter_for`); None on a voter (its Raft
        shell snapshots through the core)."""
        if self.metadata is None or self.metadata_runtime is not None:
            return None
        return snapshotter_for(self.metadata, self.cluster, clock=self.clock)

    def _registered_listeners(self) -> list[dict[str, Any]]:
        """A broker-only node's listeners as its registration names them (bound ports,
        advertised hosts, security protocols); not the controller listeners."""
        out = []
        for listener, _ in self.servers:
            if listener.name not in self.cluster.controller_listener_names:
                host, port = self.cluster.advertised_for(listener, listener.port)
                out.append({"name": listener.name, "host": host, "port": port,
                            "security_protocol": PROTOCOL_IDS[self.listener_security(listener.name).protocol]})
        return out

    def listener_security(self, name: str) -> ListenerSecurity:
        """The security (protocol, TLS context, SASL settings) of listener ``name``, built
        once. Raises ConfigError naming the setting at fault."""
        security = self._security.get(name)
        if security is None:
            try:
                security = listener_security(name, self.config.security_values, lambda: self.image,
                                             self.cluster.controller_listener_names)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            self._security[name] = security
        return security

    async def _start_listeners(self) -> None:
        for listener, services in self._listeners():
            server = await self._listen(listener, services)
            self.servers.append((Listener(listener.name, listener.host, server.address[1]), server))  # the bound port
        self.server = self.servers[0][1]
        self._bound = self.server.address

    async def _listen(self, listener: Listener, services: Services) -> Listening:
        """Open ``listener`` through the node's transport, serving ``services``."""
        security = self.listener_security(listener.name)
        return await self.transport.listen(
            functools.partial(KafkaConnection, self, services, security, self.clock), listener.host or None,
            listener.port, reuse_address=True, backlog=1024, ssl=security.ssl_context,
            ssl_handshake_timeout=security.auth_timeout_ms / 1000 if security.ssl_context else None)

    def bound_port(self, listener_name: str) -> int | None:
        """The port a listener is bound to (its configured port may be 0), or None."""
        for listener, _ in self.servers:
            if listener.name == listener_name:
                return listener.port
        return None

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop the node: the ordered steps of :meth:`_stop_steps`, each bounded by
        ``stop_step_timeout_s`` (the flush by ``FLUSH_STOP_TIMEOUT_S``, the controlled
        shutdown and the in-flight requests by ``grace_s`` more), each run whatever the
        one before raised or however long it hung (:func:`.shutdown.run_steps` logs each
        step that failed or overran). The flush, closing the logs and releasing the
        data-dir lock always run, also when ``stop`` itself is cancelled (which then ends
        in ``CancelledError`` after them)."""
        self.stopping = True
        failed = await run_steps(f"node {self.node_id} stop", self._stop_steps(grace_s), log)
        if failed:
            log.warning("hightide node %d stopped; steps that failed or did not finish in time: %s",
                        self.node_id, ", ".join(failed))
        else:
            log.info("hightide node %d stopped cleanly", self.node_id)

    def _stop_steps(self, grace_s: float) -> list[Step | None]:
        """The steps of :meth:`stop`, in order (see the module doc)."""
        t = self.stop_step_timeout_s
        node, runtime = self.node, self.metadata_runtime
        raft = runtime.shell if runtime is not None else None
        lone = self.cluster.single_node  # its shell stops once no request can write (a quorum's leader resigns first)
        shutdown_s = min(grace_s, self.cluster.session_timeout_ms / 1000)
        return [
            # controlled shutdown first, still serving; a leader resigns (EndQuorumEpoch)
            None if node is None else Step("controlled shutdown", lambda: node.stop(shutdown_s, t), shutdown_s + 3 * t),
            None if raft is None or lone else Step("raft shell", raft.close, t),
            Step("listeners", self._close_listeners, t),
            Step("held requests", self.waiters.wake_all, t),  # long-polls answer now with what they have
            Step("group coordinator", self.groups.close, t),  # parked JoinGroup/SyncGroup: NOT_COORDINATOR
            Step("share coordinator", self.share_state.close, t),
            Step("transaction coordinator", self.txns.close, t),  # marker writes stop; the next start resumes
            Step("replica manager", self.replica_manager.close, t),  # acks=all waits: NOT_LEADER_OR_FOLLOWER
            Step("requests in flight", lambda: self._drain_requests(grace_s), grace_s + t),
            Step("client connections", self._close_connections, t),
            None if raft is None or not lone else Step("raft shell", raft.close, t),
            Step("share manager", self.share_manager.close, t),  # in-flight share state writes (the flusher runs)
            Step("share persister", self.share_persister.close, t),
            Step("transaction connections", self.txns.close_connections, t),
            # before the logs close: no append after this
            Step("replica fetchers", self.replica_fetchers.close, t, essential=True),
            Step("leader offsets", self.leader_offsets.close, t),
            Step("background tasks", self._stop_tasks, t, essential=True),  # the flusher's round loop too
            Step("log cleaner", lambda: asyncio.to_thread(self.cleaner.close), t, essential=True),
            Step("flush", self.flusher.close, max(t, FLUSH_STOP_TIMEOUT_S), essential=True),
            Step("held requests after the flush", self.waiters.wake_all, t),
            Step("metadata log", self._close_metadata, t, essential=True),
            Step("logs", self._close_logs, t, essential=True),  # flushes; the clean-shutdown marker
            Step("data dir lock", self._release_dir_lock, t, essential=True),
        ]

    def _close_listeners(self) -> None:
        for _, server in self.servers:
            server.close()

    async def _drain_requests(self, grace_s: float) -> None:
        deadline = self.clock.monotonic() + grace_s
        while any(c.in_flight for c in self.connections) and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.01)

    def _close_connections(self) -> None:
        for c in list(self.connections):
            c.close("broker shutting down", level=logging.DEBUG)

    async def _stop_tasks(self) -> None:
        tasks, self._tasks = list(self._tasks), []
        stopped = await asyncio.gather(*(cancel_and_wait(t, self.stop_step_timeout_s / 2) for t in tasks))
        if not all(stopped):
            raise RuntimeError("background tasks did not stop: "
                               + ", ".join(t.get_name() for t, ok in zip(tasks, stopped) if not ok))

    def _close_metadata(self) -> None:
        if self.metadata is not None:
            metadata, self.metadata = self.metadata, None
            try:
                metadata.close()
            except OSError as exc:  # offline after a failed fsync: what is on disk is recovered at start
                log.error("closing the metadata log failed: %s", exc)

    def _close_logs(self) -> None:
        if self.logs is not None:
            logs, self.logs = self.logs, None
            logs.close()

    def _release_dir_lock(self) -> None:
        if self._dir_lock is not None:
            lock, self._dir_lock = self._dir_lock, None
            lock.release()

    def _read_meta_properties(self) -> dict[str, str]:
        return read_meta_properties(self.data_dir, self.storage)

    def _load_cluster_id(self, new_id: str | None = None) -> str:
        """The data dir's cluster id after checking that the dir is this node's
        (:func:`~hightide.log.data_dir.check_identity`: node id, cluster id and, on a
        controller, the voter set it records; raises DataDirMismatch). When the dir has
        none, ``new_id`` (or a random one) is written to meta.properties first (file and
        directory fsynced); a lone controller records its voter set too. A quorum voter's
        dir without one, with no cluster id given, is refused (DataDirNotFormatted): a
        random id of its own would keep it out of every quorum."""
        voters = self.cluster.formatted_voters
        check_identity(self.data_dir, node_id=self.node_id, cluster_id=self.cluster_id, voters=voters,
                       storage=self.storage, dynamic=self.cluster.dynamic_quorum)
        props = self._read_meta_properties()
        if "cluster.id" not in props:
            if voters is not None and len(voters) != 1 and self.cluster_id is None and new_id is None:
                raise DataDirNotFormatted(
                    f"data dir {self.data_dir} is not formatted for the controller quorum "
                    f"{','.join(map(str, sorted(voters)))}: run `hightide storage format --cluster-id ID` with this "
                    "node's flags on every voter's dir first, one ID for all (from `hightide storage random-uuid`)")
            cid = self.cluster_id or new_id or new_cluster_id()
            if voters is not None and len(voters) == 1:
                format_dir(self.data_dir, cluster_id=cid, node_id=self.node_id, voters=voters, storage=self.storage)
            else:  # a quorum voter formatted only now keeps no voter set: it votes once it has followed a leader
                write_meta_properties(self.data_dir, cid, self.node_id, self.storage)
            return cid
        return props["cluster.id"]

    # -- addresses --------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self._bound[0]

    @property
    def port(self) -> int:
        return self._bound[1]

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) clients are told to connect to. A configured advertised host is
        used exactly as given, like Kafka (clients may reach the broker only through that
        name); only the default, derived from the listen address, maps localhost and
        wildcard addresses to 127.0.0.1."""
        if self._advertised is not None:
            host, port = self._advertised
            return (host, port or self.port)
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return (_ipv4_for_localhost(host), self.port)

    # -- metadata ---------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        assert self.metadata is not None
        return self.metadata.image

    @property
    def metadata_committed_end(self) -> int:
        """The committed end of the metadata log (a broker-only node: of its local copy)."""
        if self.metadata_runtime is not None:
            return self.metadata_runtime.committed_offset(0)
        assert self.metadata is not None
        return self.metadata.log.log_end_offset

    async def write_metadata(self, op: MetadataOp) -> Any:
        """Run ``op(image) -> (response, records)`` on the metadata log (one write at a
        time, so ``op`` sees every earlier change), wait until its records are durable
        (fsynced by the flusher, off the loop), apply them to the image, open/delete
        partition logs, and return the response. Raises
        :class:`~.coordinator_runtime.CoordinatorUnavailable` (KAFKA_STORAGE_ERROR) if the
        append or the fsync fails: nothing is applied then. A broker-only node has no
        metadata log of its own to write (its writes go to the controller: see
        :meth:`create_topics`, :meth:`next_producer_id`): CoordinatorUnavailable."""
        if self.metadata_runtime is None:
            raise CoordinatorUnavailable("metadata writes go to the controller on a broker-only node")
        response, records = await self.metadata_runtime.write(0, op, self.clock.now_ms())
        if records:
            self._metadata_committed()
        return response

    def _metadata_committed(self) -> None:
        """After a metadata write with records is committed and applied: open/delete
        partition logs (not on a controller-only process: it hosts none), wake the
        observers' metadata Fetches long-polling for it, tell the controller service."""
        if not self.controller_only:
            self._open_logs(scan_dir=False)  # every log of a removed topic is open or retried here
            self.replica_manager.apply_image(self.image)  # leader epochs stamped on the logs led here
        self.waiters.wake(METADATA_FETCH_KEY)
        if self.controller_service is not None:
            self.controller_service.appended(self.clock.now_ms())

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicResult]:
        """Create topics for this node's own use (auto-creation by Metadata, coordinators'
        internal topics); a topic that exists is answered TOPIC_ALREADY_EXISTS. Returns
        once the image shows them. A broker-only node asks the controller (and, with
        acknowledged consistency, returns once every unfenced broker has them). Raises
        CoordinatorUnavailable when the metadata log (or the controller) fails."""
        if self.node is not None:
            return await self._create_through_controller(topics)
        results: list[TopicResult] = await self.write_metadata(
            lambda image: self.controller.create_topics(image, topics))
        return results

    async def _create_through_controller(self, topics: list[NewTopic]) -> list[TopicResult]:
        """A broker-only node's own creation, shared by concurrent callers asking for the
        same names and awaited at most OWN_WRITE_WAIT_S: without an active controller
        (an election, a lost majority) the caller gets CoordinatorUnavailable then — its
        client gets a retriable error at once, as Kafka answers while its creation goes
        on — and the creation keeps running in the background (it is idempotent by
        name: a late or repeated one answers TOPIC_ALREADY_EXISTS)."""
        assert self.node is not None
        key = tuple(sorted(t.name for t in topics))
        task = self._own_creations.get(key)
        if task is None:
            task = asyncio.ensure_future(self.node.remote.create_topics(topics))
            self._own_creations[key] = task
            task.add_done_callback(lambda t: self._creation_done(key, t))
        done, _ = await asyncio.wait((task,), timeout=OWN_WRITE_WAIT_S)
        if not done:
            raise CoordinatorUnavailable(f"creating {', '.join(key)}: no answer from the controller within "
                                         f"{OWN_WRITE_WAIT_S:.0f} s (it goes on in the background)")
        return task.result()

    def _creation_done(self, key: tuple[str, ...], task: asyncio.Future[list[TopicResult]]) -> None:
        if self._own_creations.get(key) is task:
            del self._own_creations[key]
        if not task.cancelled() and task.exception() is not None:
            log.debug("creating %s failed: %s", ", ".join(key), task.exception())

    @property
    def metadata_ready(self) -> bool:
        """True once this node acts on its metadata image: always on the single node and a
        controller; a broker-only node once caught up with the controller's log (see
        :mod:`.broker_node`). Before that it leads and coordinates nothing."""
        return self.node is None or self.node.caught_up

    def _broker_epoch(self) -> int:
        """This broker's epoch from its registration with the controller (the replica
        components' ``broker_epoch``); -1 on the single node."""
        return self.node.lifecycle.broker_epoch if self.node is not None else -1

    def after_metadata_change(self) -> None:
        """Put a metadata change applied by the follower (broker-only node) in force: open
        the logs of partitions hosted here and delete removed ones, refresh dynamic and
        topic configs, and let the coordinators follow leadership (load the partitions of
        their internal topics led here, unload lost ones). Nothing before the node has
        caught up with the controller (:attr:`metadata_ready`): then the whole image at
        once."""
        if not self.metadata_ready:
            return
        self._open_logs()
        self.apply_dynamic_broker_configs()
        self.replica_manager.apply_image(self.image)  # lead / follow each hosted partition
        for runtime in (self.groups, self.share_state, self.share_manager, getattr(self, "txns", None)):
            follow = getattr(runtime, "follow_leadership", None)
            if follow is not None:
                follow(self.image)

    async def commit_metadata(self, records: Iterable[MetadataRecord]) -> None:
        """Commit records computed by the caller (see :meth:`write_metadata`; prefer it when
        the records depend on the image, so concurrent writers cannot decide from the
        same image)."""
        records = list(records)
        if records:
            await self.write_metadata(lambda image: (None, records))

    def topic_log_config(self, topic: TopicImage) -> LogConfig:
        """The topic's effective log config. Without ``delete`` in ``cleanup.policy``
        (compact-only topics) nothing is ever deleted by time or size, as in Kafka."""
        eff = effective_topic_config(self.config, topic.configs)
        props = {k: str(v) if not isinstance(v, tuple) else ",".join(v) for k, v in eff.items()}
        if "delete" not in eff["cleanup.policy"]:
            props["retention.ms"] = props["retention.bytes"] = "-1"
        return LogConfig.from_kafka(props)

    def _open_logs(self, *, delete_removed: bool = True, scan_dir: bool = True) -> None:
        """Open the log of every partition hosted here (this node leads it or holds a
        replica: on the single node, every partition); delete the logs of partitions no
        longer in the image (deleted topics) unless ``delete_removed`` is False (a
        broker-only node's stale local copy at start may lack a topic created since) —
        never a log just because its partition is led elsewhere now. ``scan_dir``: look
        for such logs among the data directory's entries (at start, after a catch-up);
        False: among the open logs and those waiting to be opened (after this node's own
        metadata writes: a listing and a stat per partition at every write would cost
        more than the write at thousands of partitions)."""
        assert self.logs is not None
        wanted: dict[TopicPartition, TopicImage] = {}
        existing: set[TopicPartition] = set()
        node = self.node_id
        for t in self.image.topics.values():
            for p, pimg in t.partitions.items():
                existing.add((t.name, p))
                if pimg.leader == node or node in pimg.replicas:
                    wanted[(t.name, p)] = t
        ts = self.clock.now_ms()
        for tp, t in wanted.items():
            plog = self.logs.get(tp)
            if plog is None:
                self._try_open_log(tp, t, ts)
        dropped = [tp for tp in self._unopened if tp not in wanted]
        for tp in dropped:
            del self._unopened[tp]  # deleted before it could be opened
        if not delete_removed:
            candidates: list[TopicPartition] = []
        elif scan_dir:
            candidates = self.logs.existing_dirs()
        else:
            candidates = [tp for tp, _ in self.logs] + dropped  # a failed open may have left a directory
        for tp in candidates:
            if tp not in existing and tp[0] != METADATA_TOPIC:
                log.info("deleting log of removed topic partition %s-%d", *tp)
                self.logs.delete(tp)
                self.waiters.wake(tp)

    def _try_open_log(self, tp: TopicPartition, topic: TopicImage, ts: int) -> PartitionLog | None:
        """Open a partition log; if the files cannot be opened (out of file descriptors,
        I/O error) log it and retry at most once a second from :meth:`partition_log`
        meanwhile the partition answers KAFKA_STORAGE_ERROR."""
        assert self.logs is not None
        try:
            plog = self.logs.open(tp, self.topic_log_config(topic), ts)
        except OSError as exc:
            if tp not in self._unopened:
                log.error("cannot open the log of %s-%d (will retry): %s", *tp, exc)
            self._unopened[tp] = self.clock.monotonic() + 1.0
            return None
        if self._unopened.pop(tp, None) is not None:
            log.warning("opened the log of %s-%d after earlier failures", *tp)
        return plog

    def apply_dynamic_broker_configs(self) -> None:
        """Put the dynamic broker configs of the metadata image in force (cluster default,
        then this broker's) and refresh every open log's config from them."""
        dynamic = self.image.broker_dynamic
        self.config.apply_dynamic(dynamic.get("", {}), dynamic.get(str(self.node_id), {}))
        if self.logs is not None:
            for topic in self.image.topics.values():
                self.refresh_topic_config(topic)

    def refresh_topic_config(self, topic: TopicImage) -> None:
        cfg = self.topic_log_config(topic)
        assert self.logs is not None
        for p in topic.partitions:
            plog = self.logs.get((topic.name, p))
            if plog is not None:
                plog.config = cfg

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        assert self.logs is not None
        plog = self.logs.get((topic, partition))
        if plog is None and self._unopened:
            tp = (topic, partition)
            retry_at = self._unopened.get(tp)
            timg = self.image.topics.get(topic)
            if (retry_at is not None and self.clock.monotonic() >= retry_at and timg is not None
                    and partition in timg.partitions):
                plog = self._try_open_log(tp, timg, self.clock.now_ms())
        return plog

    def hosted_logs(self) -> list[tuple[TopicPartition, PartitionLog]]:
        """Every open partition log here (the metadata log is not among them)."""
        return [(tp, plog) for tp, plog in self.logs or () if tp[0] != METADATA_TOPIC]

    async def next_producer_id(self) -> int:
        while self._producer_ids[0] >= self._producer_ids[1]:
            if self.node is not None:  # a block from the controller (AllocateProducerIds)
                first, count = await self.node.remote.allocate_producer_ids()
                end = first + count
            else:
                first = await self.write_metadata(lambda image: self.controller.allocate_producer_ids(image))
                end = self.image.next_producer_id
            if self._producer_ids[0] >= self._producer_ids[1]:  # not refilled by a concurrent call
                self._producer_ids = (first, end)
        nxt, end = self._producer_ids
        self._producer_ids = (nxt + 1, end)
        return nxt

    # -- background -----------------------------------------------------------------
    async def _retention_loop(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await self.clock.sleep(interval)
            self.run_retention()

    async def _group_timers(self) -> None:
        """Classic group timers every 100 ms; offsets expiry on its own interval."""
        expiry_interval = self.config["offsets.retention.check.interval.ms"]
        next_expiry = self.clock.now_ms() + expiry_interval
        while True:
            await self.clock.sleep(GROUP_TIMER_INTERVAL_S)
            ts = self.clock.now_ms()
            try:
                await self.groups.poll(ts)
                if ts >= next_expiry:
                    next_expiry = ts + expiry_interval
                    await self.groups.expire_offsets(ts)
            except Exception:
                log.exception("group timers failed")

    async def _watch_descriptors(self) -> None:
        """Once a second: warn (once per episode) when open file descriptors reach the
        limit, and re-open the listener if the event loop gave it up.

        Running out of descriptors is otherwise silent under uvloop: libuv accepts and
        at once closes connections it has no descriptor for, and it closes the whole
        listener if even that fails. Segment files that cannot be opened meanwhile
        answer KAFKA_STORAGE_ERROR (see :meth:`_try_open_log`)."""
        try:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (OSError, ValueError):
            limit = resource.RLIM_INFINITY
        at_limit = False
        while True:
            await self.clock.sleep(1.0)
            if self.stopping:
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
            if not self.stopping:
                await self._reopen_closed_listeners()

    async def _reopen_closed_listeners(self) -> None:
        """Re-open any listener the event loop gave up (see :meth:`_watch_descriptors`)."""
        services = {listener.name: s for listener, s in self._listeners()}
        for i, (listener, server) in enumerate(self.servers):
            if server.is_serving():
                continue
            log.error("the listener %s on %s:%d was closed by the event loop; reopening it", listener.name,
                      listener.host, listener.port)
            try:
                server = await self._listen(listener, services[listener.name])
            except OSError as exc:
                log.error("reopening the listener failed (retrying): %s", exc)
                continue
            self.servers[i] = (listener, server)
            if i == 0:
                self.server = server

    async def _share_state_pruning(self) -> None:
        """Cold snapshots and pruning of __share_group_state: once right after start-up
        (a broker that keeps being killed before the interval passes would otherwise never
        prune, and each start would replay more), then on its interval."""
        interval = self.config["share.coordinator.state.topic.prune.interval.ms"] / 1000
        while True:
            try:
                freed = await self.share_state.prune(self.clock.now_ms())
                if freed:
                    log.info("pruned %d records of %s", freed, "__share_group_state")
            except Exception:
                log.exception("share state pruning failed")
            await self.clock.sleep(interval)

    async def _cleaner_loop(self) -> None:
        while not self.metadata_ready:  # a broker-only node's topic configs may be stale until caught up
            await self.clock.sleep(0.1)
        await self.cleaner.run(self.config["log.cleaner.backoff.ms"] / 1000)

    async def run_cleaner(self) -> int:
        """Compact the logs of compacted topics now: plan, swap and install on the loop,
        read, rewrite and fsync on the cleaner's worker thread (see :mod:`hightide.disk.cleaner`).
        Returns how many logs were cleaned."""
        return await self.cleaner.run_once()

    def run_retention(self) -> None:
        """Apply retention to every partition log (not before a broker-only node caught up
        with the controller: its topic configs may be stale)."""
        assert self.logs is not None
        if not self.metadata_ready:
            return
        ts = self.clock.now_ms()
        for tp, plog in self.logs:
            if tp[0] == METADATA_TOPIC:
                continue
            try:
                freed = plog.apply_retention(ts)
                if freed:
                    log.info("retention deleted %d bytes from %s-%d", freed, *tp)
            except OSError:
                log.exception("retention failed for %s-%d", *tp)


def _services_of(broker: Broker, routes: Routes) -> Services:
    """What the handlers of ``routes`` get of ``broker``, by narrow interface: the broker
    object itself is handed out only typed as the four protocols it satisfies
    (MetadataAccess, PartitionLogs, BrokerIdentity, ProducerIdSource)."""
    return Services(config=broker.config, routes=routes, metadata=broker, logs=broker, identity=broker,
                    producer_ids=broker, waiters=broker.waiters, flusher=broker.flusher, groups=broker.groups,
                    share_groups=broker.share_groups, share_state=broker.share_state,
                    share_manager=broker.share_manager, txn_verifier=broker.txns, txns=broker.txns,
                    cluster_view=getattr(broker, "node", None),  # (set after the first route table)
                    replicas=broker.replica_manager, leader_offsets=broker.leader_offsets, clock=broker.clock,
                    quotas=broker.quotas)


def _ipv4_for_localhost(host: str) -> str:
    return "127.0.0.1" if host in ("localhost", "::1", "ip6-localhost") else host
