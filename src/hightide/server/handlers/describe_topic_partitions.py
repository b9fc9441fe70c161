"""DescribeTopicPartitions (key 75, v0, KIP-966): the paginated topic describe of Kafka
3.9+ admin clients and ``kafka-topics.sh --describe``, as Kafka's
``DescribeTopicPartitionsRequestHandler`` and ``KRaftMetadataCache``.

* **Topics**: an empty ``Topics`` list means every topic; otherwise the named ones.
  Either way only names ≥ the cursor's topic name (byte order) are considered, in name
  order. With a list, the cursor's topic must be in it and the cursor's partition must
  be ≥ 0, else the request is answered INVALID_REQUEST for every requested topic (and,
  asking for all topics with a bad cursor partition, with no topics: Kafka's answer).
* **Authorization**: DESCRIBE on each topic. Asking for all topics, the others are left
  out; named ones are answered TOPIC_AUTHORIZATION_FAILED with a zero topic id and no
  partitions, after the authorized topics. Every other topic carries its
  ``TopicAuthorizedOperations`` (KIP-430; the request has no flag for it).
* **Pagination**: at most ``ResponsePartitionLimit`` partitions (clamped to
  1..:data:`MAX_PARTITION_LIMIT`, Kafka's ``max.request.partition.size.limit`` default,
  not configurable here) are answered, starting at the cursor's partition within the
  cursor's topic and at 0 in later topics. When a topic is cut, ``NextCursor`` names it
  and its next partition; when the limit is used up exactly at a topic's end and more
  topics follow, ``NextCursor`` names the next topic at partition 0 (which need not
  exist). Unknown named topics are answered UNKNOWN_TOPIC_OR_PARTITION (or
  INVALID_TOPIC_EXCEPTION for an illegal name) and use none of the limit.
* **Partitions**: leader (-1 when its broker is not registered or lacks the request's
  listener — a fenced leader is still named, as Kafka's), leader epoch, replicas and
  ISR as stored, offline replicas (not registered, fenced, or without the listener),
  and empty ELR / last known ELR (hightide keeps no ELR). The single node leads
  everything itself and has no offline replicas.

A broker-only node holds the answer at the read gate like Metadata (see
:mod:`..read_gate`), so a topic created through any broker is seen here once answered.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...cluster.controller import topic_name_error
from ...cluster.image import TopicImage
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_operations, authorizer
from ..context import RequestContext
from ..leadership import NO_LEADER, acting, in_cluster
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.describe_topic_partitions import DescribeTopicPartitionsRequest
    from ...cluster.broker_image import BrokerRegistration

#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one answer holds.
MAX_PARTITION_LIMIT = 2000
OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)


def _is_internal(name: str) -> bool:
    return name.startswith("__")


def _error_topic(name: str, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": _is_internal(name),
            "partitions": [], "topic_authorized_operations": OMITTED}


class _Brokers:
    """Which replicas the answer names as offline, and whether a leader is named, on the
    request's listener; ``None`` registrations: the single node (nothing offline)."""

    def __init__(self, registered: Mapping[int, BrokerRegistration] | None, listener: str) -> None:
        self.registered, self.listener = registered, listener

    def leader(self, broker_id: int) -> int:
        if self.registered is None or broker_id == NO_LEADER:
            return broker_id
        reg = self.registered.get(broker_id)
        return broker_id if reg is not None and reg.endpoint(self.listener) is not None else NO_LEADER

    def offline(self, broker_id: int) -> bool:
        if self.registered is None:
            return False
        reg = self.registered.get(broker_id)
        return reg is None or reg.fenced or reg.endpoint(self.listener) is None


def _partitions(t: TopicImage, start: int, limit: int, brokers: _Brokers) -> tuple[list[dict[str, Any]], int]:
    """The partitions of ``t`` from ``start``, at most ``limit``, and the next partition
    index (-1: none left), as Kafka's ``getPartitionMetadataForDescribeTopicResponse``."""
    count = len(t.partitions)
    upper = min(count, start + limit)
    out = []
    for pid in range(start, upper):
        p = t.partitions.get(pid)
        if p is None:
            continue
        out.append({"error_code": ErrorCode.none, "partition_index": pid, "leader_id": brokers.leader(p.leader),
                    "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                    "eligible_leader_replicas": [], "last_known_elr": [],
                    "offline_replicas": [r for r in p.replicas if brokers.offline(r)]})
    return out, upper if upper < count else -1


def describe(topics: Mapping[str, TopicImage], names: list[str], fetch_all: bool, cursor: tuple[str, int] | None,
             limit: int, brokers: _Brokers) -> tuple[list[dict[str, Any]], tuple[str, int] | None]:
    """(topic entries, next cursor) for the authorized ``names`` (sorted), as Kafka's
    ``getTopicMetadataForDescribeTopicResponse``."""
    remaining = max(min(MAX_PARTITION_LIMIT, limit), 1)
    out: list[dict[str, Any]] = []
    for name in names:
        if remaining == 0:
            return out, (name, 0)
        t = topics.get(name)
        if t is None:
            if not fetch_all:
                code = ErrorCode.invalid_topic_exception if topic_name_error(name) else ErrorCode.unknown_topic_or_partition
                out.append(_error_topic(name, code))
            continue
        start = cursor[1] if cursor is not None and name == cursor[0] else 0
        parts, nxt = _partitions(t, start, remaining, brokers)
        out.append({"error_code": ErrorCode.none, "name": name, "topic_id": t.topic_id, "is_internal": t.internal,
                    "partitions": parts, "topic_authorized_operations": OMITTED})
        if nxt != -1:
            return out, (name, nxt)
        remaining -= len(parts)
    return out, None


def _invalid(ctx: RequestContext, req: DescribeTopicPartitionsRequest) -> Any:
    return materialize(response_schema(75, ctx.version), {"throttle_time": 0, "next_cursor": None, "topics": [
        {**_error_topic(t.name, ErrorCode.invalid_request), "is_internal": False} for t in req.topics]})


@handles(75, 0, 0)
def handle(ctx: RequestContext, req: DescribeTopicPartitionsRequest) -> Any:
    image = ctx.image
    fetch_all = len(req.topics) == 0
    cursor = (req.cursor.topic_name, int(req.cursor.partition_index)) if req.cursor is not None else None
    first = cursor[0] if cursor is not None else ""
    wanted = image.topics.keys() if fetch_all else {t.name for t in req.topics}
    names = sorted(n for n in wanted if n >= first)
    if cursor is not None and ((not fetch_all and cursor[0] not in names) or cursor[1] < 0):
        return _invalid(ctx, req)
    a = authorizer(ctx)
    refused: list[str] = []
    if a is not None:
        allowed = [n for n in names
                   if a.authorize(ctx.principal, ctx.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC, n)]
        refused = [] if fetch_all else sorted(set(names) - set(allowed))
        names = allowed
    registered: Mapping[int, BrokerRegistration] | None = None
    if in_cluster(ctx):
        me = ctx.services.identity.node_id
        registered = {b: r for b, r in image.brokers.items() if acting(ctx) or b != me}
    topics, nxt = describe(image.topics, names, fetch_all, cursor, int(req.response_partition_limit),
                           _Brokers(registered, ctx.services.listener))
    for entry in topics:
        entry["topic_authorized_operations"] = authorized_operations(ctx, ResourceType.TOPIC, entry["name"])
    topics += [{**_error_topic(n, ErrorCode.topic_authorization_failed), "is_internal": False} for n in refused]
    return materialize(response_schema(75, ctx.version), {
        "throttle_time": 0, "topics": topics,
        "next_cursor": None if nxt is None else {"topic_name": nxt[0], "partition_index": nxt[1]}})
