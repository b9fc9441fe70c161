"""The broker-only process's cluster side (``process.roles=broker``): what the broker
adds when it is not its own controller (built by ``server/broker.py`` from the narrow
parts :class:`BrokerNode` names; it never sees the broker).

It wires, in Kafka's shape (``BrokerServer``):

* three :class:`~.controller_channel.ControllerChannel` s to the active controller, as
  Kafka's broker keeps its heartbeat, forwarding and Raft channels apart: registration and
  heartbeats on one, forwarded writes (and the broker's own: topic creations, producer
  ids, AlterPartition) on another, the metadata long-poll Fetch on the third. The
  controller answers a connection's requests in order, so a heartbeat must queue neither
  behind a Fetch parked for 500 ms nor behind forwarded writes waiting for their commit
  (its answer carries the lowest acknowledged offset those writes wait for);
* the :class:`~.lifecycle.BrokerLifecycleManager` (register, heartbeat, controlled
  shutdown, the lowest acknowledged offset);
* the :class:`~.metadata_follower.MetadataFollower` (the local copy of
  ``__cluster_metadata-0`` and the image);
* the :class:`~.read_gate.ReadGate` and the :class:`~.forwarding.Forwarder` (the route
  table of a broker-only node: forwarded writes, gated metadata reads) and the remote
  metadata writes the broker makes for itself.

Start order: (cluster id known) → listeners (the registration names their bound ports) →
follower and lifecycle. Stop order: controlled shutdown (bounded), then the tasks, then the
channels.

**Acting on metadata** (Kafka's ``BrokerServer`` waits for the metadata catch-up and the
first publish before it serves; its group coordinator starts on that publish): the local
copy of the metadata log a broker restarts with may be stale (partitions it led before a
crash are led elsewhere now, the coordinators moved). So the broker acts on its image only
once :attr:`BrokerNode.caught_up`: the follower has reached the controller's high
watermark once, and the image holds this process's own registration (its incarnation id;
every record that moved leadership away from the previous incarnation comes before it).
Until then the broker leads no partition (no leader state, data requests answer
NOT_LEADER_OR_FOLLOWER), loads no coordinator partition (FindCoordinator answers
COORDINATOR_NOT_AVAILABLE, coordinator requests NOT_COORDINATOR), deletes no log, and
follows nobody; partition logs are opened (recovered) from the local copy. Then the
broker puts the whole image in force at once (``on_metadata_change``: the broker's
``after_metadata_change``), and
from then on every applied change as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..client.errors import KafkaError
from ..client.properties import ClientSecurity
from ..cluster.features import SUPPORTED_FEATURES
from ..cluster.metadata_log import MetadataLog
from ..cluster.settings import ClusterSettings
from ..log.partition_log import PartitionLog
from .lifecycle import BrokerLifecycleManager
from .controller_channel import ControllerChannel, ControllerUnavailable
from .forwarding import Forwarder, RemoteMetadataWrites
from .metadata_follower import MetadataFollower
from .read_gate import ReadGate
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.transport import LOOP_TRANSPORT, Transport
from ..aio.shutdown import Step, run_steps
from ..aio.tasks import STOP_WAIT_S

log = logging.getLogger("hightide.broker_node")

class BrokerNode:
    """The cluster side of a broker-only process (see the module doc), built from:

    * ``settings``: the cluster settings (node id, controller addresses, read consistency);
    * ``security``: how to connect to the controller listener (None: plaintext);
    * ``cluster_id()``: the data dir's cluster id (None until known);
    * ``listeners()``: the broker listeners to register, each ``{"name", "host", "port",
      "security_protocol"}`` (called once the listeners are bound);
    * ``on_metadata_change()``: put the applied image in force (called once caught up,
      then after each applied content change);
    * ``data_dir``: named in the log line when this node halts;
    * ``clock``: the node's :class:`~hightide.aio.clock.Clock`, handed to every part;
    * ``transport``: the node's :class:`~hightide.aio.transport.Transport` (the
      controller channels open their connections through it);
    * and, at :meth:`start`, the local metadata log and the flusher's ``durable``.
    """

    def __init__(self, settings: ClusterSettings, *, security: ClientSecurity | None,
                 cluster_id: Callable[[], str | None], listeners: Callable[[], list[dict[str, Any]]],
                 on_metadata_change: Callable[[], None], data_dir: str, clock: Clock = SYSTEM_CLOCK,
                 transport: Transport = LOOP_TRANSPORT) -> None:
        self.settings = settings
        self.clock = clock
        self._cluster_id_of = cluster_id
        self._listeners = listeners
        self._on_metadata_change = on_metadata_change
        self.data_dir = data_dir
        #: The local copy of ``__cluster_metadata-0`` (set by :meth:`start`).
        self.metadata: MetadataLog | None = None
        addresses = settings.controller_addresses()
        client = f"hightide-broker-{settings.node_id}"
        voters = {v.node_id: (v.host, v.port) for v in settings.voters}
        self.channel = ControllerChannel(addresses, client_id=client, name="controller", security=security,
                                         voters=voters, clock=clock, transport=transport)
        self.fetch_channel = ControllerChannel(addresses, client_id=client, name="metadata-fetch", security=security,
                                               locator=self.channel.locator, clock=clock,  # one view of the controller
                                               transport=transport)
        self.heartbeat_channel = ControllerChannel(addresses, client_id=client, name="heartbeat", security=security,
                                                   locator=self.channel.locator, clock=clock, transport=transport)
        self.gate = ReadGate(settings.read_consistency, settings.read_max_wait_ms, lao=self._lao,
                             applied=self._applied, content=self._content, clock=clock)
        self.forwarder = Forwarder(self.channel, self.gate,
                                   versions=lambda: self.channel.api_versions or self.heartbeat_channel.api_versions)
        self.lifecycle = BrokerLifecycleManager(settings, self.heartbeat_channel, self._cluster_id, self._registration,
                                                self._on_lao, clock=clock)
        self.remote = RemoteMetadataWrites(self.forwarder, settings.node_id, lambda: self.lifecycle.broker_epoch)
        self.follower: MetadataFollower | None = None
        #: (offset, finalized features) after each change of the image's features, oldest
        #: first; the first entry is what the local copy had at start (offset -1).
        self._features: list[tuple[int, dict[str, int]]] = []
        self._content_seen = -2  # content offset of the last after_metadata_change
        #: Why this node stopped itself (see :meth:`halt`), None while it runs; ``halted``
        #: is set then (``hightide serve`` stops the process, exit 1).
        self.fatal: str | None = None
        self.halted = asyncio.Event()
        self._halting: asyncio.Task[None] | None = None
        #: True once this broker acts on its metadata image (see the module doc); never
        #: goes back to False.
        self.caught_up = False

    async def features_settled(self) -> None:
        """With acknowledged consistency, wait (at most ``metadata.read.max.wait.ms``)
        until the LAO covers the newest change of the finalized features this broker has
        applied: a ``metadata.version`` changed through another broker is shown here at
        once, and never before every unfenced broker has it. Immediate when no change is
        pending (the usual case: client handshakes are not held)."""
        if self.gate.acknowledged and self._features and self._features[-1][0] > self._lao():
            await self.gate.wait_write(self._features[-1][0], "ApiVersions (a finalized feature change)")

    # -- what the other parts read ---------------------------------------------------
    def _lao(self) -> int:
        """The lowest acknowledged offset the read gate goes by: -1 (unknown) while the
        controller may no longer count this broker (:meth:`BrokerLifecycleManager.counted`),
        so a gated read waits for the lease to come back (at most
        ``metadata.read.max.wait.ms``) rather than answer from an image other brokers
        may have passed."""
        return self.lifecycle.lowest_acknowledged if self.lifecycle.counted() else -1

    def _applied(self) -> int:
        return self.metadata.image.offset if self.metadata is not None else -1

    def _content(self) -> int:
        return self.metadata.image.content_offset if self.metadata is not None else -1

    def _cluster_id(self) -> str:
        return self._cluster_id_of() or ""

    def _registration(self) -> dict[str, Any]:
        listeners = self._listeners()
        features = [{"name": n, "min_supported_version": lo, "max_supported_version": hi}
                    for n, (lo, hi) in sorted(SUPPORTED_FEATURES.items())]
        return {"listeners": listeners, "features": features, "rack": None}

    def _on_lao(self, lao: int) -> None:
        self.gate.advance()

    def _on_applied(self, applied: int, content: int) -> None:
        assert self.metadata is not None
        features = self.metadata.image.features
        if not self._features or self._features[-1][1] != features:
            self._features.append((content, dict(features)))  # content covers the FeatureLevelRecord
        if self._check_caught_up():  # the whole image was put in force just now
            self._content_seen = content
        elif content != self._content_seen:  # a batch of NoOps changes nothing the broker acts on
            self._content_seen = content
            self._on_metadata_change()
        self.lifecycle.applied(applied, content)
        self.gate.advance()

    def _on_caught_up(self) -> None:
        """The follower reached the controller's high watermark for the first time."""
        self._check_caught_up()
        self.lifecycle.caught_up()

    def _check_caught_up(self) -> bool:
        """Start acting on metadata if the conditions of the module doc hold now: the whole
        image is put in force (True: that was done just now)."""
        if self.caught_up or self.follower is None or not self.follower.caught_up:
            return False
        assert self.metadata is not None
        reg = self.metadata.image.brokers.get(self.settings.node_id)
        if reg is None or reg.incarnation_id != self.lifecycle.core.incarnation_id:
            return False  # not registered yet, or its registration not applied here yet
        self.caught_up = True
        image = self.metadata.image
        log.info("metadata caught up with the controller at offset %d (registered in epoch %d): leading and "
                 "coordinating what the controller assigned to this broker", image.offset, reg.epoch)
        self._on_metadata_change()
        return True

    # -- ApiVersions (ClusterView) -------------------------------------------------------
    def narrow(self, ranges: list[dict[str, int]]) -> list[dict[str, int]]:
        return self.forwarder.narrow(ranges)

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        """(epoch, levels) of the finalized features: with acknowledged consistency the
        newest change every unfenced broker has applied (a new ``metadata.version`` shows
        only once the LAO covers its record), else the newest applied here. The epoch is
        the metadata offset of the change (-1: as loaded at start)."""
        if not self._features:
            return -1, dict(self.metadata.image.features) if self.metadata is not None else {}
        if not self.gate.acknowledged:
            return self._features[-1][0], self._features[-1][1]
        lao = self._lao()
        visible = [f for f in self._features if f[0] <= lao] or self._features[:1]
        del self._features[:len(visible) - 1]  # older changes are never shown again
        return visible[-1]

    # -- cluster id --------------------------------------------------------------------
    def halt(self, reason: str) -> None:
        """Stop this node for good (once): log ``reason`` (one line) and set ``halted``.
        Used when the controller quorum belongs to another cluster (INCONSISTENT_CLUSTER_ID
        from the active controller, or from a majority of the controllers): following it
        would replace this broker's metadata and delete its partitions."""
        if self.fatal is not None:
            return
        self.fatal = reason
        log.critical("%s", reason)
        self.halted.set()

    def _foreign_cluster(self, where: str) -> None:
        """INCONSISTENT_CLUSTER_ID (see :meth:`halt`): ask the controller its cluster id
        (DescribeCluster, bounded) to name it, then halt. Nothing is applied meanwhile: the
        follower and the registration stop at that answer."""
        if self.fatal is None and self._halting is None:
            self._halting = asyncio.get_running_loop().create_task(self._halt_foreign(where), name="halt")

    async def _halt_foreign(self, where: str) -> None:
        theirs = "another cluster"
        try:
            async with asyncio.timeout(3.0):
                resp = await self.channel.request(60, lambda c: c.pick_version(60, 1), {
                    "include_cluster_authorized_operations": False, "endpoint_type": 2})
            if resp.cluster_id:
                theirs = f"cluster {resp.cluster_id}"
        except (TimeoutError, ControllerUnavailable, KafkaError):
            pass
        self.halt(f"the controller quorum ({where}) belongs to {theirs}, not to this broker's cluster "
                  f"{self._cluster_id_of()} (data dir {self.data_dir}): stopping rather than following it "
                  "(INCONSISTENT_CLUSTER_ID)")

    async def adopt_cluster_id(self) -> str:
        """The controller's cluster id (DescribeCluster), for a data dir that has none
        yet (Kafka requires ``kafka-storage format``; hightide adopts it on first start).
        Retries until the controller answers."""
        while True:
            try:
                resp = await self.channel.request(60, lambda c: c.pick_version(60, 1), {
                    "include_cluster_authorized_operations": False, "endpoint_type": 2})
                if resp.error_code == 0 and resp.cluster_id:
                    return str(resp.cluster_id)
                log.warning("DescribeCluster at the controller answered %s; retrying", resp.error_code)
            except (ControllerUnavailable, KafkaError) as exc:
                log.debug("no cluster id from the controller yet: %s", exc)
            await self.clock.sleep(0.5)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, metadata: MetadataLog, durable: Callable[[PartitionLog], Any]) -> None:
        """Start following ``metadata`` (the local copy, made durable through
        ``durable``) and the registration (after the listeners are bound)."""
        self.metadata = metadata
        self.follower = MetadataFollower(
            metadata, self.fetch_channel, self.settings.node_id, epoch=lambda: self.lifecycle.broker_epoch,
            cluster_id=self._cluster_id_of, on_applied=self._on_applied, on_caught_up=self._on_caught_up,
            on_reset=self.lifecycle.core.on_reset, durable=durable,
            on_foreign_cluster=lambda where: self._foreign_cluster(where), clock=self.clock)
        self.lifecycle.on_foreign_cluster = self._foreign_cluster
        image = metadata.image
        self.lifecycle.core.on_applied(image.offset, image.content_offset, 0)
        self._features = [(-1, dict(image.features))]
        self.follower.start()
        self.lifecycle.start()

    async def stop(self, timeout_s: float, step_timeout_s: float = STOP_WAIT_S) -> None:
        """Controlled shutdown (bounded by ``timeout_s``), then stop following and close
        the channels; held reads and writes are answered. Each step is bounded by
        ``step_timeout_s`` more and runs whatever the one before did
        (:func:`~hightide.aio.shutdown.run_steps`)."""
        if self._halting is not None:
            self._halting.cancel()
        lifecycle, follower = self.lifecycle, self.follower
        shutdown = ((lambda: lifecycle.shutdown(timeout_s, step_timeout_s)) if lifecycle.registered.is_set()
                    else (lambda: lifecycle.close(step_timeout_s)))
        await run_steps(f"broker {self.settings.node_id} cluster side stop", [
            Step("controlled shutdown", shutdown, timeout_s + step_timeout_s),
            None if follower is None else Step("metadata follower", lambda: follower.close(step_timeout_s),
                                               step_timeout_s + 1),
            Step("held metadata reads", self.gate.wake_all, step_timeout_s),
            Step("controller channel", self.channel.close, step_timeout_s),
            Step("heartbeat channel", self.heartbeat_channel.close, step_timeout_s),
            Step("metadata fetch channel", self.fetch_channel.close, step_timeout_s),
        ], log)
