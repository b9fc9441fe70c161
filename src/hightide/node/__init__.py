"""The cluster node: everything a process does as a member of a cluster (Kafka's
``BrokerLifecycleManager``, ``MetadataLoader``, ``ForwardingManager``,
``NodeToControllerChannelManager``, ``QuorumController``'s timers and ``KafkaRaftClient``'s
shell). Start here to find the cluster side; docs/cluster.md tells the whole story.

What runs where
---------------
``process.roles`` decides (``hightide.cluster.settings.ClusterSettings``):

* **single node** (``broker,controller``, the default): none of the network parts below.
  It is a one-voter quorum: the metadata log is written through
  :class:`~.metadata_runtime.RaftMetadataRuntime` over the :class:`~.raft_shell.RaftShell`
  (it elects itself at start, a write commits on its own fsync; no peers) and
  snapshotted through the core, as a controller is.
* **broker-only** (``broker``): one :class:`~.broker_node.BrokerNode`, which wires

  - two :class:`~.controller_channel.ControllerChannel` s to the active controller (one
    for lifecycle requests and forwarded writes, one for the metadata long-poll Fetch);
  - the :class:`~.lifecycle.BrokerLifecycleManager` (register, heartbeat, controlled
    shutdown, the lowest acknowledged offset; its state machine is ``LifecycleCore``);
  - the :class:`~.metadata_follower.MetadataFollower` (the local copy of
    ``__cluster_metadata-0`` and its image; snapshots installed with
    :func:`~.snapshotter.install_snapshot`);
  - the :class:`~.read_gate.ReadGate` (read-after-write across brokers) and the
    :class:`~.forwarding.Forwarder` (Envelope to the controller;
    :data:`~.forwarding.FORWARDED` is the one table of forwarded APIs, read by the
    controller's Envelope handler too) and :class:`~.forwarding.RemoteMetadataWrites`
    (the broker's own topic creations and producer-id blocks);

  and a :class:`~.snapshotter.Snapshotter` of the local copy.
* **controller-only** (``controller``): the :class:`~.controller_service.ControllerService`
  (registrations, heartbeats, fencing timers, the observers' Fetch). The metadata log is
  written through Raft (:mod:`.metadata_runtime`, one voter or several alike): the
  :class:`~.raft_shell.RaftShell` steps the sans-IO core (``hightide.cluster.raft``), talks
  to the other voters through :class:`~.raft_peers.RaftPeers` and keeps its vote in the
  :class:`~.quorum_state.QuorumStateStore` (through the node's Storage engine);
  snapshots go through the core.
* every broker: :class:`~.inter_broker.InterBroker` (where the other brokers are, how to
  reach them); each component calling other brokers gets its own
  :class:`~.inter_broker.InterBrokerClients` from it.
* every node: the :class:`~.metadata_writer.MetadataWriter` (the handlers'
  ``MetadataAccess``: the image, the commit path through this voter's Raft runtime, the
  node's own topic creations and producer id blocks, through the controller on a
  broker-only node) and the :class:`~.producer_ids.ProducerIdManager` (producer ids
  from those blocks).

Every connection made here (channels, Raft peers, inter-broker clients) is opened through
the node's :class:`~hightide.aio.transport.Transport`, handed down by the broker's wiring
like the clock: TCP in production, an in-memory network in tests.

Start order (``server/broker.py``, ``Broker.start``): data-dir lock, logs, the metadata
log (a broker-only node without a cluster id asks the controller for it:
:meth:`~.broker_node.BrokerNode.adopt_cluster_id`), the flusher → a voter: the Raft
runtime (the single node: its shell started and its election waited for, so its image
is committed before anything reads it) → a controller: the controller service, the Raft
shell (a lone controller waits for its election too); a broker: its logs opened, the coordinators started
(they load nothing on a broker-only node before it caught up) → the listeners → the
broker node (follower and registration: the registration names the bound ports) → the
snapshotter (a broker-only node's), the controller's timers.

Stop order (``Broker._stop_steps``, each step bounded and run whatever the one before
did): the broker node (controlled shutdown, then the follower, the held metadata reads,
the channels) → the Raft shell of a quorum (a leader resigns) → the listeners and
everything else (the single node's shell stops after the requests in flight and the
client connections).

Boundaries: this package never imports ``hightide.server`` (nor the coordinators or the
replicas; an import-linter contract keeps it so) and no component here receives the
broker: each is built from the narrow things its docstring names (settings, callables,
the metadata log, channels). What needs the shell's types stays there: the route-table
wrappers (``server/node_routes.py``), the controller's request handlers
(``server/handlers/``: broker_lifecycle, controller_fetch, raft_rpcs, fetch_snapshot,
describe_quorum, envelope) and the wiring (``server/broker.py``). The sans-IO cores
(controller, image, metadata log, snapshots, lifecycle, Raft) live in ``hightide.cluster``.
"""
