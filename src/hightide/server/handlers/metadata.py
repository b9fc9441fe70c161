"""Metadata (key 3), with ``auto.create.topics.enable`` and topic ids (v10+).

The single node answers with itself as the only broker and controller, leading every
partition. With broker registrations in the image (cluster mode) the answer is Kafka's
``KRaftMetadataCache``'s: the unfenced registered brokers with their endpoint on the
listener the request came in on; per partition the image's leader, leader epoch,
replicas and ISR, the replicas whose broker is gone, fenced or lacks that listener as
offline, and LEADER_NOT_AVAILABLE with leader -1 when the leader is not a registered
broker (no leader: its only replica was fenced) — LISTENER_NOT_FOUND (v6+) when it has no
such listener; ControllerId is a random alive broker, as KRaft brokers answer (clients
send controller requests to a broker, which forwards them).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...protocol.codec import encode_response, response_schema
from ...protocol.metadata_response import TopicEntryCache, splice_topics
from ...protocol.server_connection import RawResponse

from ...cluster.controller import NewTopic, topic_name_error
from ...cluster.image import TopicImage
from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...services import MetadataAccess
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..authorization import authorized_operations, authorizer
from ..leadership import NO_LEADER, acting, alive_brokers, in_cluster
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.metadata import MetadataRequest, MetadataRequestTopic
    from ...cluster.broker_image import BrokerRegistration
    from ...cluster.image import MetadataImage
    from ...security.authorizer import Authorizer

OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)


def topic_entry(t: TopicImage, cluster: _Cluster | None = None) -> dict:
    """A topic's entry; ``cluster`` (cluster mode) adds each partition's availability."""
    parts = []
    for p in sorted(t.partitions.values(), key=lambda p: p.partition):
        entry = {"error_code": ErrorCode.none, "partition_index": p.partition, "leader_id": p.leader,
                 "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
                 "isr_nodes": list(p.isr), "offline_replicas": []}
        if cluster is not None:
            cluster.availability(entry, p.leader)
        parts.append(entry)
    return {"error_code": ErrorCode.none, "name": t.name, "topic_id": t.topic_id, "is_internal": t.internal,
            "partitions": parts, "topic_authorized_operations": OMITTED}


class _Cluster:
    """The registered brokers as one Metadata request sees them (its listener, its version)."""

    def __init__(self, brokers: Mapping[int, BrokerRegistration], listener: str, version: int) -> None:
        self.brokers, self.listener, self.version = brokers, listener, version

    def _online(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced and reg.endpoint(self.listener) is not None

    def availability(self, entry: dict, leader: int) -> None:
        """Kafka's getPartitionMetadata: offline replicas; LEADER_NOT_AVAILABLE (leader
        -1) when the leader is not registered, LISTENER_NOT_FOUND (v6+) when it lacks the
        listener; v0 lists only available replicas and says REPLICA_NOT_AVAILABLE."""
        replicas, isr = entry["replica_nodes"], entry["isr_nodes"]
        entry["offline_replicas"] = [r for r in replicas if not self._online(r)]
        if self.version == 0:
            entry["replica_nodes"] = [r for r in replicas if self._online(r)]
            entry["isr_nodes"] = [r for r in isr if self._online(r)]
        reg = self.brokers.get(leader) if leader != NO_LEADER else None
        if reg is None or reg.endpoint(self.listener) is None:
            missing_listener = reg is not None and self.version >= 6
            entry["error_code"] = ErrorCode.listener_not_found if missing_listener else ErrorCode.leader_not_available
            entry["leader_id"] = NO_LEADER
        elif len(entry["replica_nodes"]) < len(replicas) or len(entry["isr_nodes"]) < len(isr):
            entry["error_code"] = ErrorCode.replica_not_available


def error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id or ZERO_UUID, "is_internal": False,
            "partitions": [], "topic_authorized_operations": OMITTED}


async def auto_create(metadata: MetadataAccess, names: list[str]) -> None:
    """Create the named topics with broker defaults (used by Metadata), durably."""
    if names:
        await metadata.create_topics([NewTopic(n) for n in names])


@handles(3, 0, 12)
async def handle(ctx: RequestContext, req: MetadataRequest) -> Any:
    image = ctx.image
    cluster = _Cluster(_registered(ctx), ctx.services.listener, ctx.version) if in_cluster(ctx) else None
    requested = req.topics
    if ctx.version == 0 and requested is not None and len(requested) == 0:
        requested = None  # v0: empty list means all topics
    a = authorizer(ctx)
    refused: dict[str, bool] = {}  # topic -> is internal, answered TOPIC_AUTHORIZATION_FAILED
    if requested is None:
        listed = sorted(image.topics.values(), key=lambda t: t.name)
        if a is not None:  # topics the principal may not describe are not listed at all
            listed = [t for t in listed if a.authorize(ctx.principal, ctx.client_host, AclOperation.DESCRIBE,
                                                       ResourceType.TOPIC, t.name)]
        if cluster is None and not opt(req, "include_topic_authorized_operations", False):
            return _all_topics_raw(ctx, req, listed)
        topics = [topic_entry(t, cluster) for t in listed]
    elif ctx.version >= 12 and (ids := _requested_ids(requested)):
        topics = [_by_id(ctx, a, cluster, tid) for tid in ids]
    else:
        allow = opt(req, "allow_auto_topic_creation", True) and ctx.config["auto.create.topics.enable"]
        if a is not None:
            refused = _refused(ctx, a, image, [rt.name for rt in requested if rt.name is not None], allow)
        to_create = []
        for rt in requested:
            name = rt.name
            if name is None or name in refused:
                continue
            if name not in image.topics and allow and topic_name_error(name) is None:
                to_create.append(name)
        try:
            await auto_create(ctx.metadata, list(dict.fromkeys(to_create)))
        except CoordinatorUnavailable:
            pass  # the metadata log failed: the topics are answered as unknown
        topics = []
        for rt in requested:
            if rt.name is None:  # (and a zero id: a non-zero one was looked up above)
                topics.append(_by_id(ctx, a, cluster, opt(rt, "topic_id", None)))
                continue
            if rt.name in refused:
                entry = error_entry(rt.name, ErrorCode.topic_authorization_failed)
                entry["is_internal"] = refused[rt.name]
                topics.append(entry)
                continue
            t = image.topics.get(rt.name)
            if t is not None:
                topics.append(topic_entry(t, cluster))
            elif topic_name_error(rt.name) is not None:
                topics.append(error_entry(rt.name, ErrorCode.invalid_topic_exception))
            else:
                topics.append(error_entry(rt.name, ErrorCode.unknown_topic_or_partition))
    if opt(req, "include_topic_authorized_operations", False):  # v8+; no authorizer: every operation
        for entry in topics:
            if entry["error_code"] != ErrorCode.topic_authorization_failed and entry["name"] is not None:
                entry["topic_authorized_operations"] = authorized_operations(ctx, ResourceType.TOPIC, entry["name"])
    cluster_ops = (authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                   if opt(req, "include_cluster_authorized_operations", False) else OMITTED)
    brokers, controller_id = _brokers(ctx)
    return materialize(response_schema(3, ctx.version), {
        "throttle_time": 0, "brokers": brokers, "cluster_id": ctx.identity.cluster_id,
        "controller_id": controller_id, "topics": topics, "cluster_authorized_operations": cluster_ops,
    })


def _all_topics_raw(ctx: RequestContext, req: MetadataRequest, listed: list[TopicImage]) -> RawResponse:
    """Every topic on the single node (issue 33): the entries of :func:`topic_entry`
    written from the bytes :data:`_ENTRIES` keeps per topic, into a response kio encodes
    around an empty topics array (:mod:`hightide.protocol.metadata_response`)."""
    entries = [_ENTRIES.entry(t, ctx.version) for t in listed]
    _ENTRIES.prune(len(ctx.image.topics))
    cluster_ops = (authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                   if opt(req, "include_cluster_authorized_operations", False) else OMITTED)
    brokers, controller_id = _brokers(ctx)
    frame = encode_response(3, ctx.version, ctx.header.correlation_id, materialize(response_schema(3, ctx.version), {
        "throttle_time": 0, "brokers": brokers, "cluster_id": ctx.identity.cluster_id,
        "controller_id": controller_id, "topics": [], "cluster_authorized_operations": cluster_ops,
    }))
    return RawResponse([memoryview(b) for b in splice_topics(frame[4:], ctx.version, entries)])


#: Encoded topic entries of the single node's answers for every topic (see _all_topics_raw).
_ENTRIES = TopicEntryCache()


def _requested_ids(requested: Sequence[MetadataRequestTopic]) -> list[uuid.UUID]:
    """The distinct non-zero topic ids of a v12+ request's topics, in request order. As
    Kafka's KafkaApis: when there is one, the request is answered by id alone (names,
    even ``""``, the Java client's default, are ignored, and entries with a zero id are
    dropped; nothing is auto-created)."""
    ids = (opt(rt, "topic_id", None) for rt in requested)
    return list(dict.fromkeys(tid for tid in ids if tid is not None and tid != ZERO_UUID))


def _by_id(ctx: RequestContext, a: Authorizer | None, cluster: _Cluster | None, tid: uuid.UUID | None) -> dict:
    """The answer for one topic id: the topic, TOPIC_AUTHORIZATION_FAILED without a name
    (topic ids are not sensitive: Kafka answers the id with no name), or UNKNOWN_TOPIC_ID
    (name null; ``""`` before v12, where the name is not nullable)."""
    t = ctx.image.topic_by_id(tid) if tid is not None and tid != ZERO_UUID else None
    if t is not None and a is not None and not a.authorize(
            ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
        return error_entry(None, ErrorCode.topic_authorization_failed, tid)
    if t is not None:
        return topic_entry(t, cluster)
    return error_entry(None if ctx.version >= 12 else "", ErrorCode.unknown_topic_id, tid)


def _refused(ctx: RequestContext, a: Authorizer, image: MetadataImage, names: list[str],
             allow_create: bool) -> dict[str, bool]:
    """Kafka's Metadata authorization of named topics: DESCRIBE on each; a topic that
    would be auto-created also needs CREATE on the cluster or on the topic. Returns the
    refused names with whether each is internal."""
    def ok(op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return a.authorize(ctx.principal, ctx.client_host, op, rtype, name)
    refused = {n for n in set(names) if not ok(AclOperation.DESCRIBE, ResourceType.TOPIC, n)}
    missing = {n for n in set(names) - refused if n not in image.topics}
    if allow_create and missing and not ok(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        refused |= {n for n in missing if not ok(AclOperation.CREATE, ResourceType.TOPIC, n)}
    return {n: (image.topics[n].internal if n in image.topics else False) for n in refused}


def _registered(ctx: RequestContext) -> Mapping[int, BrokerRegistration]:
    """The registered brokers this answer describes: the image's, without this broker
    while it has not caught up with the controller's log (a restart's stale copy: it is
    fenced, so the partitions it led there are answered LEADER_NOT_AVAILABLE)."""
    brokers = ctx.image.brokers
    if acting(ctx):
        return brokers
    me = ctx.services.identity.node_id
    return {b: reg for b, reg in brokers.items() if b != me}


def _brokers(ctx: RequestContext) -> tuple[list[dict], int]:
    """(brokers, controller id): this node alone on the single node; in cluster mode the
    alive brokers on the request's listener and a random one of them as controller (-1
    when there is none), as Kafka's KRaft brokers answer."""
    image = ctx.image
    if not in_cluster(ctx):
        b = ctx.identity
        host, port = b.advertised
        return [{"node_id": b.node_id, "host": host, "port": port, "rack": None}], b.node_id
    alive = [ep for ep, _ in alive_brokers(image, ctx.services.listener)
             if acting(ctx) or ep[0] != ctx.services.identity.node_id]
    brokers = [{"node_id": n, "host": h, "port": port, "rack": r} for n, h, port, r in alive]
    return brokers, random.choice(alive)[0] if alive else -1
