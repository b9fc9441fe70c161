"""What a handler gets besides its request: a typed :class:`RequestContext`.

Handlers do not reach into the broker object. They name what they use through narrow
interfaces, built once per broker in :class:`Services`:

(the interfaces are defined in :mod:`hightide.services`, shared with the other shell
packages)

* ``metadata`` (:class:`MetadataAccess`): the current metadata image, the controller
  core, ``write_metadata``/``commit_metadata`` to make metadata records durable and
  applied;
* ``logs`` (:class:`PartitionLogs`): partition log lookup, and
  ``refresh_topic_config``/``apply_dynamic_broker_configs`` to put changed configs in
  force on the logs (the node's :class:`~hightide.disk.hosted_logs.HostedLogs`);
* ``identity`` (:class:`BrokerIdentity`): node id, cluster id, advertised address,
  whether the broker is stopping;
* ``producer_ids`` (:class:`ProducerIdSource`);
* the runtimes: ``waiters`` (append wake-ups), ``flusher`` (durability waits),
  ``groups`` (consumer group coordinator), ``share_groups``, ``share_state`` (share
  coordinator), ``share_manager`` (share partitions and ShareFetch sessions);
* ``config`` and ``routes`` (the route table ApiVersions is computed from);
* ``txn_verifier`` (:class:`~hightide.log.transactions.TxnVerifier`): KIP-890's check
  that a transactional produce targets a partition of the producer's ongoing
  transaction; without a transaction coordinator every check fails as in Kafka.

The node's components satisfy the four protocols (the broker object only
``BrokerIdentity``); handing each out typed as its protocol keeps each handler to that
interface (the type checker enforces it) without a wrapper per request. There is deliberately no way from a context to the broker object:
a handler that needs something new gets a narrow interface here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..log.transactions import NoTransactionCoordinator, TxnVerifier
from ..services import BrokerIdentity, ClusterView, MetadataAccess, PartitionLogs, ProducerIdSource

if TYPE_CHECKING:
    from ..cluster.controller import Controller, NewTopic, TopicResult
    from ..cluster.image import MetadataImage, TopicImage
    from ..cluster.records import MetadataRecord
    from ..config import BrokerConfig
    from ..log.partition_log import PartitionLog
    from ..protocol.codec import RequestHeader
    from ..disk.flusher import Flusher
    from ..coordinator.groups import GroupRuntime
    from ..replica.leader_offsets import LeaderOffsets
    from .registry import Routes
    from ..replica.manager import ReplicaManager
    from ..coordinator.share_groups import ShareGroupService
    from ..coordinator.share_partitions import SharePartitionManager
    from ..coordinator.share_state import ShareStateRuntime
    from ..coordinator.transactions import TransactionCoordinator
    from ..aio.waiters import AppendWaiters
    from ..quota.manager import ClientQuotas


@dataclass(frozen=True, slots=True)
class Services:
    """The broker's services, by interface; built once per broker, at the end of its
    ``__init__``: a component replaced on the broker afterwards is not seen by handlers
    (build the broker with it instead)."""

    config: BrokerConfig
    routes: Routes
    metadata: MetadataAccess
    logs: PartitionLogs
    identity: BrokerIdentity
    producer_ids: ProducerIdSource
    waiters: AppendWaiters
    flusher: Flusher
    groups: GroupRuntime
    share_groups: ShareGroupService
    share_state: ShareStateRuntime
    share_manager: SharePartitionManager
    #: The listener these services answer on (cluster mode: brokers are advertised with its endpoint).
    listener: str = "PLAINTEXT"
    #: A broker-only node's view of the controller (ApiVersions' forwarded ranges and
    #: finalized features); None on the single node and a controller.
    cluster_view: ClusterView | None = None
    #: KIP-890 verification of transactional produce (the transaction coordinator).
    txn_verifier: TxnVerifier = field(default_factory=NoTransactionCoordinator)
    #: The transaction coordinator (None: a broker built without one answers
    #: COORDINATOR_NOT_AVAILABLE to the transaction APIs).
    txns: TransactionCoordinator | None = None
    #: Replication roles of the partitions hosted here (None: a broker built without one,
    #: every partition then has one replica).
    replicas: ReplicaManager | None = None
    #: Partition leaders' offsets for OffsetFetch's extension tags (None: the tags of
    #: partitions led elsewhere are not sent).
    leader_offsets: LeaderOffsets | None = None
    #: The node's clock (hightide.aio.clock): requests' arrival times, handlers' deadlines.
    clock: Clock = SYSTEM_CLOCK
    #: Client quota enforcement (Produce and Fetch; see hightide.server.quotas); None: none.
    quotas: ClientQuotas | None = None


#: The principal of a connection that did not authenticate (PLAINTEXT, or SSL without a
#: client certificate), as Kafka's ``KafkaPrincipal.ANONYMOUS``.
ANONYMOUS = "User:ANONYMOUS"


class RequestContext:
    """One request's context: its header, peer, unknown tagged fields and arrival time,
    and the broker's :class:`Services` under the names handlers use.

    Security (issue 17): ``principal`` is the authenticated KafkaPrincipal as a string
    ``"<type>:<name>"`` (``"User:alice"``; ``"User:ANONYMOUS"`` on a connection that
    did not authenticate; the certificate's mapped DN on mTLS). ``client_host`` is the
    client's IP address without the port (what ACLs' ``host`` matches). Inside an
    Envelope both are the forwarding broker's client's, not the broker's own. Handlers
    read them to authorize; they never change during a request.

    ``throttle_ms`` (0 unless a client quota was exceeded, see :mod:`.quotas`): set by
    the handler; the connection mutes the channel that long once the answer is sent.
    """

    __slots__ = ("services", "header", "peer", "unknown_tags", "now_ms", "principal", "client_host", "throttle_ms")

    def __init__(self, services: Services, header: RequestHeader, peer: str, unknown_tags: dict,
                 now_ms: int | None = None, principal: str = ANONYMOUS, client_host: str | None = None) -> None:
        self.services = services
        self.header = header
        self.peer = peer
        self.unknown_tags = unknown_tags
        self.now_ms = services.clock.now_ms() if now_ms is None else now_ms
        self.principal = principal
        self.client_host = client_host if client_host is not None else _host_of(peer)
        self.throttle_ms = 0

    @property
    def version(self) -> int:
        return self.header.api_version

    # -- the broker's services, narrowly ---------------------------------------------
    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def routes(self) -> Routes:
        return self.services.routes

    @property
    def clock(self) -> Clock:
        return self.services.clock

    @property
    def metadata(self) -> MetadataAccess:
        return self.services.metadata

    @property
    def image(self) -> MetadataImage:
        """The current metadata image (shorthand for ``metadata.image``)."""
        return self.services.metadata.image

    @property
    def logs(self) -> PartitionLogs:
        return self.services.logs

    @property
    def identity(self) -> BrokerIdentity:
        return self.services.identity

    @property
    def producer_ids(self) -> ProducerIdSource:
        return self.services.producer_ids

    @property
    def waiters(self) -> AppendWaiters:
        return self.services.waiters

    @property
    def flusher(self) -> Flusher:
        return self.services.flusher

    @property
    def groups(self) -> GroupRuntime:
        return self.services.groups

    @property
    def share_groups(self) -> ShareGroupService:
        return self.services.share_groups

    @property
    def share_state(self) -> ShareStateRuntime:
        return self.services.share_state

    @property
    def share_manager(self) -> SharePartitionManager:
        return self.services.share_manager

    @property
    def txn_verifier(self) -> TxnVerifier:
        return self.services.txn_verifier

    @property
    def txns(self) -> TransactionCoordinator:
        """The transaction coordinator. Raises CoordinatorUnavailable if there is none."""
        if self.services.txns is None:
            from ..coordinator.internal_topic import CoordinatorUnavailable
            raise CoordinatorUnavailable("this broker has no transaction coordinator")
        return self.services.txns


def _host_of(peer: str) -> str:
    """The host part of ``peer`` ("127.0.0.1:5555" -> "127.0.0.1"; "[::1]:5555" and
    "::1:5555" -> "::1"); ``peer`` itself when it has no port."""
    if peer.startswith("["):
        return peer[1:peer.find("]")] if "]" in peer else peer
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() else peer
