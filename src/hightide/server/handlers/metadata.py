"""Metadata (key 3), with ``auto.create.topics.enable`` and topic ids (v10+)."""

from __future__ import annotations

import uuid
from typing import Any

from ...protocol.codec import response_schema

from ...cluster.controller import NewTopic, topic_name_error
from ...cluster.image import TopicImage
from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ..context import MetadataAccess, RequestContext
from ..coordinator_runtime import CoordinatorUnavailable
from ...protocol.acl import all_operations
from ..registry import handles

OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)


def topic_entry(t: TopicImage) -> dict:
    parts = []
    for p in sorted(t.partitions.values(), key=lambda p: p.partition):
        parts.append({"error_code": ErrorCode.none, "partition_index": p.partition, "leader_id": p.leader,
                      "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
                      "isr_nodes": list(p.replicas), "offline_replicas": []})
    return {"error_code": ErrorCode.none, "name": t.name, "topic_id": t.topic_id, "is_internal": t.internal,
            "partitions": parts, "topic_authorized_operations": OMITTED}


def error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id or ZERO_UUID, "is_internal": False,
            "partitions": [], "topic_authorized_operations": OMITTED}


async def auto_create(metadata: MetadataAccess, names: list[str]) -> None:
    """Create the named topics with broker defaults (used by Metadata), durably."""
    if names:
        await metadata.write_metadata(lambda image: metadata.controller.create_topics(
            image, [NewTopic(n) for n in names]))


@handles(3, 0, 12)
async def handle(ctx: RequestContext, req: Any) -> Any:
    image = ctx.image
    requested = req.topics
    if ctx.version == 0 and requested is not None and len(requested) == 0:
        requested = None  # v0: empty list means all topics
    if requested is None:
        topics = [topic_entry(t) for t in sorted(image.topics.values(), key=lambda t: t.name)]
    else:
        allow = getattr(req, "allow_auto_topic_creation", True) and ctx.config["auto.create.topics.enable"]
        to_create = []
        for rt in requested:
            name = rt.name
            if name is None:
                continue
            if name not in image.topics and allow and topic_name_error(name) is None:
                to_create.append(name)
        try:
            await auto_create(ctx.metadata, list(dict.fromkeys(to_create)))
        except CoordinatorUnavailable:
            pass  # the metadata log failed: the topics are answered as unknown
        topics = []
        for rt in requested:
            tid = getattr(rt, "topic_id", None)
            if rt.name is None:
                t = image.topic_by_id(tid) if tid and tid != ZERO_UUID else None
                # the topic name is nullable only from v12 on
                topics.append(topic_entry(t) if t else error_entry(None if ctx.version >= 12 else "",
                                                                    ErrorCode.unknown_topic_id, tid))
                continue
            t = image.topics.get(rt.name)
            if t is not None:
                topics.append(topic_entry(t))
            elif topic_name_error(rt.name) is not None:
                topics.append(error_entry(rt.name, ErrorCode.invalid_topic_exception))
            else:
                topics.append(error_entry(rt.name, ErrorCode.unknown_topic_or_partition))
    if getattr(req, "include_topic_authorized_operations", False):  # v8+; no ACLs: every operation
        for entry in topics:
            entry["topic_authorized_operations"] = all_operations("topic")
    cluster_ops = all_operations("cluster") if getattr(req, "include_cluster_authorized_operations", False) else OMITTED
    b = ctx.identity
    host, port = b.advertised
    return materialize(response_schema(3, ctx.version), {
        "throttle_time": 0,
        "brokers": [{"node_id": b.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": b.cluster_id, "controller_id": b.node_id, "topics": topics,
        "cluster_authorized_operations": cluster_ops,
    })
