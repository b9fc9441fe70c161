"""Who leads a partition, and what a data request sent to the wrong broker is told.

Every data handler (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords,
ShareFetch, ShareAcknowledge) calls :func:`not_leader` once per partition, after it found
the partition in the metadata image and before it looks for its log. The answer follows
Kafka's ``ReplicaManager`` / ``KafkaApis``:

* the partition's leader (in the image) is this node: ``None`` — on the single node every
  partition is led here, so this is one dict lookup and one comparison, nothing per record;
* a broker-only node that has not caught up with the controller's log yet (a restart's
  local copy may be stale: it leads nothing until then, see :func:`acting`):
  NOT_LEADER_OR_FOLLOWER without a leader (the client asks Metadata again);
* another broker, or no leader at all (-1, its only replica is fenced or gone):
  NOT_LEADER_OR_FOLLOWER, with the leader id and epoch the image knows (Kafka's
  ``getCurrentLeader``), which Produce v10+ and Fetch v12+ carry as the ``CurrentLeader``
  tagged field (KIP-951), together with the leader's endpoint (``NodeEndpoints``, from
  :func:`node_endpoints`) so the client can go there without a Metadata round trip.

:func:`alive_brokers` and :func:`endpoint_of` answer, from the image's broker
registrations, which brokers a client may be sent to and at which address of the listener
its request came in on (Kafka's ``getAliveBrokerNodes`` / ``getAliveBrokerNode``: an
unfenced broker that has that listener).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..protocol.errors import ErrorCode

if TYPE_CHECKING:
    from ..cluster.broker_image import BrokerRegistration
    from ..cluster.image import MetadataImage, TopicImage
    from .context import RequestContext

NO_LEADER = -1


def acting(ctx: RequestContext) -> bool:
    """True if this node acts on its metadata image: the single node always, a broker-only
    node once caught up with the controller's log (``BrokerNode.caught_up``)."""
    view = ctx.services.cluster_view
    return view is None or view.caught_up


def in_cluster(ctx: RequestContext) -> bool:
    """True on a broker of a cluster: a broker-only process (even before any registration
    is in its image: it then knows no broker yet, not itself alone), or an image holding
    broker registrations. False on the single node, which answers for itself."""
    return bool(ctx.image.brokers) or ctx.services.cluster_view is not None

Endpoint = tuple[int, str, int, "str | None"]
"""(node id, host, port, rack): one entry of a response's NodeEndpoints / brokers list."""


@dataclass(frozen=True, slots=True)
class NotLeader:
    """The answer for a partition this node does not lead: the error code and the
    leader (``NO_LEADER`` when there is none) and leader epoch the image knows."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int

    @property
    def current_leader(self) -> tuple[int, int] | None:
        """(leader id, epoch) for the CurrentLeader tagged field, or None when it would
        equal the field's default (-1, -1): Kafka does not send a tagged field then."""
        if self.leader_id == NO_LEADER and self.leader_epoch == -1:
            return None
        return self.leader_id, self.leader_epoch


def not_leader(ctx: RequestContext, topic: TopicImage, partition: int) -> NotLeader | None:
    """None if this node leads ``partition`` of ``topic`` (which must be in the image),
    else NOT_LEADER_OR_FOLLOWER with the leader known to the image (Kafka answers a
    leaderless partition the same way on produce and fetch)."""
    p = topic.partitions[partition]
    if p.leader == ctx.services.identity.node_id:
        if acting(ctx):
            return None
        return NotLeader(ErrorCode.not_leader_or_follower, NO_LEADER, -1)  # stale: names no leader
    return NotLeader(ErrorCode.not_leader_or_follower, p.leader, p.leader_epoch)


def leader_epoch(image: MetadataImage, topic: str, partition: int) -> int:
    """The image's leader epoch of a partition that exists (what a client's
    CurrentLeaderEpoch is checked against)."""
    return image.topics[topic].partitions[partition].leader_epoch


def leads(image: MetadataImage, node_id: int, topic: str, partition: int) -> bool:
    """True if ``node_id`` is the image's leader of ``topic``-``partition``."""
    t = image.topics.get(topic)
    p = t.partitions.get(partition) if t is not None else None
    return p is not None and p.leader == node_id


def led_partitions(image: MetadataImage, node_id: int, topic: str) -> set[int]:
    """The partitions of ``topic`` whose leader is ``node_id`` (empty if no such topic)."""
    t = image.topics.get(topic)
    if t is None:
        return set()
    return {p.partition for p in t.partitions.values() if p.leader == node_id}


def hosted_here(image: MetadataImage, node_id: int, topic: TopicImage, partition: int) -> bool:
    """True if ``node_id`` leads the partition or holds one of its replicas (its log
    belongs on this node)."""
    p = topic.partitions[partition]
    return p.leader == node_id or node_id in p.replicas


# -- endpoints ------------------------------------------------------------------------------
def endpoint_of(registration: BrokerRegistration, listener: str) -> Endpoint | None:
    """The broker's endpoint on ``listener``, or None if it has no such listener."""
    e = registration.endpoint(listener)
    return None if e is None else (registration.broker_id, e[1], e[2], registration.rack)


def alive_brokers(image: MetadataImage, listener: str, *, include_fenced: bool = False) -> list[tuple[Endpoint, bool]]:
    """(endpoint, fenced) of every registered broker with ``listener``, by id; unfenced
    ones only unless ``include_fenced``."""
    out = []
    for bid in sorted(image.brokers):
        reg = image.brokers[bid]
        if reg.fenced and not include_fenced:
            continue
        ep = endpoint_of(reg, listener)
        if ep is not None:
            out.append((ep, reg.fenced))
    return out


def alive_endpoint(image: MetadataImage, broker_id: int, listener: str) -> Endpoint | None:
    """The endpoint of ``broker_id`` on ``listener`` if it is registered and unfenced."""
    reg = image.brokers.get(broker_id)
    if reg is None or reg.fenced:
        return None
    return endpoint_of(reg, listener)


def coordinator_endpoint(ctx: RequestContext, topic: str, partition: int) -> tuple[ErrorCode, str | None,
                                                                                   Endpoint | None]:
    """(error, message, node) FindCoordinator answers for the coordinator living in
    ``partition`` of the internal ``topic``: this node on the single node (it leads every
    partition); in cluster mode the partition's leader when it is alive with the
    request's listener, else COORDINATOR_NOT_AVAILABLE (no leader yet, or it is fenced;
    or this broker has not caught up with the controller's log: its image may be stale)."""
    image = ctx.image
    if not in_cluster(ctx):
        host, port = ctx.services.identity.advertised
        return ErrorCode.none, None, (ctx.services.identity.node_id, host, port, None)
    if not acting(ctx):
        return (ErrorCode.coordinator_not_available,
                "this broker has not caught up with the controller's metadata log yet", None)
    t = image.topics.get(topic)
    p = t.partitions.get(partition) if t is not None else None
    if p is None or p.leader == NO_LEADER:
        return ErrorCode.coordinator_not_available, f"{topic}-{partition} has no leader", None
    ep = alive_endpoint(image, p.leader, ctx.services.listener)
    if ep is None:
        return (ErrorCode.coordinator_not_available,
                f"broker {p.leader}, the leader of {topic}-{partition}, is not available", None)
    return ErrorCode.none, None, ep


def node_endpoints(ctx: RequestContext, leader_ids: Iterable[int]) -> list[Endpoint]:
    """NodeEndpoints for the leaders named in a response's CurrentLeader fields: every
    alive one, on the listener the request came in on (Kafka's ``getAliveBrokerNode``)."""
    image = ctx.image
    listener = ctx.services.listener
    out = []
    for bid in sorted(set(leader_ids)):
        ep = alive_endpoint(image, bid, listener)
        if ep is not None:
            out.append(ep)
    return out
