"""The broker process: the wiring of one node's components, and its start and stop order.

``Broker`` is an async context manager, so tests and applications can embed it::

    async with Broker(BrokerConfig(), data_dir="/tmp/ht", listen=("127.0.0.1", 0)) as b:
        print(b.port)

``Broker`` builds each component from the narrow things it uses (callables, small
collaborators, the Protocols of :mod:`hightide.services`) and never hands itself to one;
what the components are:

* :class:`~hightide.node.metadata_writer.MetadataWriter` (``metadata_writer``): the
  metadata image and the write path (this voter's Raft runtime, or the controller), the
  node's own topic creations; :class:`~hightide.node.producer_ids.ProducerIdManager`
  (``producer_ids``);
* :class:`~hightide.disk.hosted_logs.HostedLogs` (``hosted``): the partition logs hosted
  here following the image (opened, deleted, configured, retention); the flusher and the
  log cleaner (:mod:`hightide.disk`);
* the coordinators (:mod:`hightide.coordinator`), the replica manager and fetchers
  (:mod:`hightide.replica`), a broker-only node's :class:`~hightide.node.broker_node.BrokerNode`
  and a controller's :class:`~hightide.node.controller_service.ControllerService`;
* :class:`~.listeners.Listeners` (``listeners``): the listeners and the client
  connections; the handlers get the components through :class:`~.context.Services`.

What stays here: the order of :meth:`Broker.start` (data-dir lock, logs, metadata log,
flusher, the metadata runtime, hosted logs and coordinators, listeners, the broker node,
background tasks) and of :meth:`Broker.stop` (``_stop_steps``: stop accepting, let
in-flight requests finish (bounded), close connections, flush and close every log, write
the clean-shutdown marker, release the data-dir lock; every step bounded and run whatever
the one before did: :mod:`hightide.aio.shutdown`, docs/durability.md "Shutdown"), the
two hooks that put a metadata change in force on the components (``_after_own_write``,
``after_metadata_change``), the data directory's identity (cluster id), and thin
properties (``image``, ``host``, ``port``, ``advertised``, ``metadata_ready``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
from collections.abc import Iterator
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.shutdown import Step, run_steps
from ..aio.tasks import cancel_and_wait
from ..aio.transport import LOOP_TRANSPORT, Transport
from ..aio.waiters import AppendWaiters
from ..cluster.controller import Controller
from ..cluster.image import MetadataImage
from ..cluster.lifecycle import ElectionConfig, LifecycleConfig
from ..cluster.metadata_log import METADATA_TOPIC, MetadataLog
from ..cluster.settings import ClusterSettings
from ..config import BrokerConfig
from ..coordinator.env import CoordinatorEnv
from ..coordinator.groups import GroupRuntime
from ..coordinator.share_groups import ShareGroupService
from ..coordinator.share_partitions import SharePartitionManager
from ..coordinator.share_persister import REQUEST_TIMEOUT_S as SHARE_REQUEST_TIMEOUT_S
from ..coordinator.share_persister import SharePersisterClient
from ..coordinator.share_state import ShareStateRuntime
from ..coordinator.transactions import TransactionCoordinator
from ..coordinator.txn_verify import REQUEST_TIMEOUT_S as TXN_VERIFY_TIMEOUT_S
from ..coordinator.txn_verify import RemoteTxnVerifier
from ..disk.cleaner import LogCleaner
from ..disk.flusher import Flusher
from ..disk.hosted_logs import BACKGROUND_LOAD_MIN, HostedLogs
from ..log.data_dir import (DataDirNotFormatted, check_identity, format_dir, read_meta_properties,
                            write_meta_properties)
from ..log.data_dir import new_id as new_cluster_id
from ..log.dirlock import DirLock
from ..log.manager import LogManager
from ..log.storage import POSIX, Storage
from ..log.storage_cache import with_descriptor_budget
from ..node.broker_node import BrokerNode
from ..node.controller_service import ControllerService
from ..node.inter_broker import InterBroker
from ..node.metadata_runtime import (LONE_VOTER_ELECTION_S, RaftMetadataRuntime, SnapshotPolicy, raft_config,
                                     raft_metadata_runtime)
from ..node.metadata_writer import METADATA_FETCH_KEY, MetadataWriter
from ..node.producer_ids import ProducerIdManager
from ..node.snapshotter import Snapshotter, snapshotter_for
from ..quota.manager import ClientQuotas
from ..replica.fetcher import REQUEST_TIMEOUT_S as FETCHER_REQUEST_TIMEOUT_S, ReplicaFetcherManager
from ..replica.leader_offsets import LeaderOffsets
from ..replica.manager import ReplicaManager
from . import handlers
from .context import Services
from .listener_security import controller_client_security, inter_broker_client
from .listeners import Listeners
from .node_routes import broker_node_routes
from .registry import Routes

log = logging.getLogger("hightide.broker")

#: Deadline of each step of Broker.stop (``Broker.stop_step_timeout_s``) and of the flush step.
STOP_STEP_TIMEOUT_S = 5.0
FLUSH_STOP_TIMEOUT_S = 30.0


class Broker:
    """One hightide node (the single node, a broker or a controller: ``process.roles``),
    wired from its components (see the module doc). It is the handlers' BrokerIdentity
    (``node_id``, ``cluster_id``, ``advertised``, ``stopping``)."""

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
        #: This node's listeners and the client connections they accepted.
        self.listeners = Listeners(config=self.config, cluster=self.cluster, listen=listen, image=lambda: self.image,
                                   stopping=lambda: self.stopping, transport=transport, clock=clock)
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
        #: The write path to the metadata log and this node's view of it (the handlers'
        #: MetadataAccess): through this voter's Raft runtime, or the controller.
        self.metadata_writer = MetadataWriter(
            metadata=lambda: self.metadata, runtime=lambda: self.metadata_runtime, controller=self.controller,
            remote=lambda: self.node.remote if self.node is not None else None, wake=self.waiters.wake,
            follow=None if self.controller_only else self._after_own_write, clock=clock)
        self.producer_ids = ProducerIdManager(self.metadata_writer.allocate_producer_ids)
        #: Where other brokers are and how to reach them (every component calling them gets
        #: its connections from it).
        self.inter_broker = InterBroker(lambda: self.image, lambda: inter_broker_client(
            self.config.security_values, tuple(x.name for x in self.cluster.broker_listeners),
            self.cluster.controller_listener_names), transport)
        self.flusher = Flusher(lambda: self.logs, clock=clock, dirty_feed=True)
        self.cleaner = LogCleaner(lambda: self.logs, skip_topics=(METADATA_TOPIC,), clock=clock,
                                  ready=lambda: self.metadata_ready)
        #: The partition logs hosted here, as the metadata image says (opened, deleted,
        #: configured, retention): the handlers' PartitionLogs.
        self.hosted = HostedLogs(config=self.config, node_id=self.node_id, data_dir=self.data_dir,
                                 logs=lambda: self.logs, image=lambda: self.image, ready=lambda: self.metadata_ready,
                                 wake=self.waiters.wake, clock=clock)
        self._wire_coordinators(clock)
        self._wire_replication(clock)
        self.quotas = ClientQuotas(  # client quota sensors (Produce/Fetch throttling; hightide.quota)
            lambda: self.image.quotas, self.config["quota.window.num"], self.config["quota.window.size.seconds"])
        self._tasks: list[asyncio.Task] = []
        self.cluster_id = cluster_id
        self.started_at = 0.0
        self.stopping = False
        self.stop_step_timeout_s = STOP_STEP_TIMEOUT_S  # each step of stop() (tests shorten it)
        #: From this many partitions on, their logs load in the background once listening
        #: (HostedLogs: "Loading at start-up"; tests lower it).
        self.background_load_min = BACKGROUND_LOAD_MIN
        self._dir_lock: DirLock | None = None  # exclusive .lock on data_dir, held from start to stop
        self.routes = handlers.routes()  # the route table; ApiVersions is computed from it
        self.services = _services_of(self, self.routes)  # what handlers get, by narrow interface
        #: The next :meth:`after_metadata_change` walks the whole image (see there).
        self._follow_whole = True
        self._wire_broker_node(clock, transport)

    def _wire_broker_node(self, clock: Clock, transport: Transport) -> None:
        """A broker-only process's cluster side (see ``self.node``)."""
        #: The cluster side of a broker-only process (process.roles=broker): controller
        #: channels, registration and heartbeats, the metadata follower, forwarding and the
        #: read gate. None on the single node and on a controller.
        self.node: BrokerNode | None = None
        if self.cluster.is_broker and not self.cluster.is_controller:
            self.node = BrokerNode(
                self.cluster, security=controller_client_security(self.config.security_values,
                                                                  self.cluster.controller_listener_names),
                cluster_id=lambda: self.cluster_id, listeners=self.listeners.registered,
                on_metadata_change=self.after_metadata_change, data_dir=self.data_dir, clock=clock,
                transport=transport)
            self.routes = broker_node_routes(self.routes, self.node)
            self.services = _services_of(self, self.routes)

    def _wire_coordinators(self, clock: Clock) -> None:
        """The coordinators (hightide.coordinator), built from what they use of this node."""
        env = CoordinatorEnv(
            config=self.config, node_id=self.node_id, image=lambda: self.image, partition_log=self.hosted.partition_log,
            durable=self.flusher.durable, wake=self.waiters.wake, create_topics=self.metadata_writer.create_topics,
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
            partition_log=self.hosted.partition_log, wake=self.waiters.wake, groups=self.share_groups,
            persister=self.share_persister, state=self.share_state, clock=clock)
        self.share_groups.manager = self.share_manager
        self.txns = TransactionCoordinator(  # transaction coordinator (KIP-890 verifier too)
            env, groups=self.groups, next_producer_id=self.producer_ids.next_producer_id,
            peers=self.inter_broker.clients(f"hightide-txn-markers-{self.node_id}"),
            verifier=RemoteTxnVerifier(self.inter_broker.clients(f"hightide-txn-verify-{self.node_id}",
                                                          TXN_VERIFY_TIMEOUT_S), TXN_VERIFY_TIMEOUT_S))

    def _wire_replication(self, clock: Clock) -> None:
        """Replication roles, the followers' fetchers, and the leaders' offsets asked of
        other brokers (hightide.replica)."""
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
            log.info("%s", self.storage.budget_line)
        self.logs = LogManager(self.data_dir, self.storage)
        self.logs.on_dirty = self.flusher.note_dirty  # the flush policy looks at the logs that changed
        with _gc_paused():  # the image is built from every metadata record at once (issue 33)
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
        pending: list = []  # the logs left to the background loader
        if self.cluster.single_node:  # the lone voter leads before anything reads its image
            await self._elect_lone_voter()
        self.hosted.apply_dynamic_broker_configs()
        if self.controller_only:
            self._start_controller()
            if self.metadata_runtime is not None and self.metadata_runtime.shell.core.lone_voter:
                await self._elect_lone_voter()
        else:
            # A broker-only node's local copy may be stale: its logs are opened (recovered),
            # but nothing is led, followed, coordinated or deleted before it caught up with
            # the controller (BrokerNode.caught_up, then after_metadata_change).
            # The internal topics' logs now, the others in the background once listening
            # (HostedLogs: "Loading at start-up"); the logs of removed topics are deleted
            # after that.
            self.image.take_changes()  # looked at whole here
            pending = self.hosted.open_at_start(background_min=self.background_load_min)
            if self.node is None:  # the single node leads every partition: its logs take their leader epochs
                self.replica_manager.apply_image(self.image)
            self.groups.start()  # a broker-only node: nothing loaded before the catch-up
            self.share_state.start()
            self.txns.start()
        await self.listeners.start(self.services, self.controller_services)
        if not self.controller_only:
            self._tasks.append(asyncio.create_task(self.hosted.load_in_background(
                pending, self._after_loading, delete_removed=self.node is None), name="log-loader"))
        if self.node is not None:
            self.node.start(self.metadata, self.flusher.durable)  # after the listeners: the registration names their ports
        self.snapshotter = self._snapshotter()  # a broker-only node's (a voter's shell snapshots through the core)
        if self.snapshotter is not None:
            self._tasks.append(asyncio.create_task(self.snapshotter.run(), name="metadata-snapshots"))
        if self.controller_service is not None:
            self._tasks.append(asyncio.create_task(self.controller_service.run(), name="controller-timers"))
        else:
            self._tasks.append(asyncio.create_task(self.hosted.run_retention_loop(), name="retention"))
            self._tasks.append(asyncio.create_task(self.groups.run_timers(), name="group-timers"))
            self._tasks.append(asyncio.create_task(self.share_state.run_pruning(), name="share-state-pruning"))
            self._tasks.append(asyncio.create_task(self.share_manager.run_timers(), name="share-lock-expiry"))
            self._tasks.append(asyncio.create_task(self.txns.run_timers(), name="transaction-timers"))
            self._tasks.append(asyncio.create_task(self.replica_manager.run(), name="isr-expiration"))
        self._tasks.append(asyncio.create_task(self.listeners.watch_descriptors(), name="fd-watch"))
        if self.config["log.cleaner.enable"] and not self.controller_only:
            self._tasks.append(asyncio.create_task(
                self.cleaner.run(lambda: self.config["log.cleaner.backoff.ms"] / 1000), name="log-cleaner"))
        self.started_at = self.clock.monotonic()
        log.info("hightide node %d listening on %s:%d (advertised %s:%d), data dir %s, ready in %.0f ms",
                 self.node_id, self.host, self.port, *self.advertised, self.data_dir,
                 (self.clock.monotonic() - t0) * 1000)
        summary = self.listeners.summary()
        if summary is not None:
            log.info("listeners: %s", summary)

    def _start_controller(self) -> None:
        """A controller-only process: the controller service on the metadata log (see
        :mod:`.controller_service`) and the controller listener's route table."""
        assert self.metadata is not None and self.metadata_runtime is not None and self.cluster_id is not None
        metadata, runtime = self.metadata, self.metadata_runtime
        raft = runtime.shell
        self.controller_service = ControllerService(
            node_id=self.node_id, cluster_id=self.cluster_id,
            config=LifecycleConfig(self.cluster.session_timeout_ms, self.cluster.max_idle_interval_ms),
            write=self.metadata_writer.write_metadata, image=lambda: metadata.image, metadata_log=lambda: metadata.log,
            committed_end=lambda: runtime.committed_offset(0), endpoints=self.listeners.controller_endpoints, raft=raft,
            voter_endpoints={v.node_id: (v.host, v.port) for v in self.cluster.voters}, clock=self.clock,
            latest_image=runtime.latest_image)
        self.controller_service.lifecycle.elections = lambda: ElectionConfig.from_config(self.config)
        self.controller_services = _services_of(self, handlers.controller_routes(self.controller_service))
        self.metadata_writer.on_append = self.controller_service.appended
        raft.on_commit, raft.on_activate = self.metadata_writer.committed, self.controller_service.activate
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

    def _snapshotter(self) -> Snapshotter | None:
        """A broker-only node's snapshotter of its local copy
        (:func:`~hightide.node.snapshotter.snapshotter_for`); None on a voter (its Raft
        shell snapshots through the core)."""
        if self.metadata is None or self.metadata_runtime is not None:
            return None
        return snapshotter_for(self.metadata, self.cluster, clock=self.clock)

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
            Step("listeners", self.listeners.close, t),
            Step("held requests", self.waiters.wake_all, t),  # long-polls answer now with what they have
            Step("group coordinator", self.groups.close, t),  # parked JoinGroup/SyncGroup: NOT_COORDINATOR
            Step("share coordinator", self.share_state.close, t),
            Step("transaction coordinator", self.txns.close, t),  # marker writes stop; the next start resumes
            Step("replica manager", self.replica_manager.close, t),  # acks=all waits: NOT_LEADER_OR_FOLLOWER
            Step("requests in flight", lambda: self.listeners.drain_requests(grace_s), grace_s + t),
            Step("client connections", self.listeners.close_connections, t),
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
            # after an unclean start, logs the loader never opened were never recovered
            logs.close(mark_clean=self.hosted.loaded or logs.clean_shutdown)

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
        return self.listeners.bound[0]

    @property
    def port(self) -> int:
        return self.listeners.bound[1]

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
        once.

        The work is that of the change: the topics its records touched
        (:meth:`MetadataImage.take_changes`) and those whose logs failed to open
        (:meth:`HostedLogs.retry_topics`). The whole image (the data directory listed for
        logs of removed topics, every open log's config, every hosted partition's role)
        when the change is unknown — a change of the brokers (who may lead: fenced,
        unfenced, registered) or of broker configs, an image loaded from a snapshot or
        rebuilt after a truncation — and at the catch-up, and after each change while the
        start-up loader opens logs and the first one after it finished (it leaves the
        directories of topics removed meanwhile to this walk)."""
        if not self.metadata_ready:
            return
        changed = self.image.take_changes()
        if self._follow_whole:
            changed = None
        self._follow_whole = not self.hosted.loaded
        if changed is not None:
            changed |= self.hosted.retry_topics()
        self.hosted.follow_image(topics=changed)
        if changed is None:
            self.hosted.apply_dynamic_broker_configs()
        else:
            self.hosted.refresh_topic_configs(changed)
        self.replica_manager.apply_image(self.image, changed)  # lead / follow each hosted partition
        for coordinator in (self.groups, self.share_state, self.txns):
            coordinator.follow_leadership(self.image, changed)
        self.share_manager.follow_leadership(self.image)  # (its share partitions only)

    def _after_loading(self, topics: set[str]) -> None:
        """Logs of ``topics`` were loaded in the background: their replica roles follow
        the image (once this node acts on it; before, the catch-up puts all of it in force)."""
        if self.metadata_ready:
            self.replica_manager.apply_image(self.image, topics)

    def _after_own_write(self) -> None:
        """Put this node's own committed metadata write in force on what it hosts: open
        the logs of new partitions, delete those of removed ones (looking among the open
        logs only: see :meth:`HostedLogs.follow_image`), stamp leader epochs on the logs
        led here."""
        changed = self.image.take_changes()  # the work is that of the change (None: the whole image)
        self.hosted.follow_image(scan_dir=False, topics=changed)  # every log of a removed topic is open or retried here
        self.replica_manager.apply_image(self.image, changed)

@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the metadata image is built: each collection of
    the oldest generation walks every object made so far, and the image of 100,000
    partitions is a million of them (loading it took ~80% longer with collections on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _services_of(broker: Broker, routes: Routes) -> Services:
    """What the handlers of ``routes`` get of ``broker``, by narrow interface: its
    components (the metadata writer, the hosted logs, the producer ids, ...), and the
    broker object itself only typed as its identity (BrokerIdentity)."""
    return Services(config=broker.config, routes=routes, metadata=broker.metadata_writer, logs=broker.hosted,
                    identity=broker, producer_ids=broker.producer_ids, waiters=broker.waiters,
                    flusher=broker.flusher, groups=broker.groups,
                    share_groups=broker.share_groups, share_state=broker.share_state,
                    share_manager=broker.share_manager, txn_verifier=broker.txns, txns=broker.txns,
                    cluster_view=getattr(broker, "node", None),  # (set after the first route table)
                    replicas=broker.replica_manager, leader_offsets=broker.leader_offsets, clock=broker.clock,
                    quotas=broker.quotas)


def _ipv4_for_localhost(host: str) -> str:
    return "127.0.0.1" if host in ("localhost", "::1", "ip6-localhost") else host
