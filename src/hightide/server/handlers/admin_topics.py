"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Validation lives in the sans-IO :class:`~hightide.cluster.controller.Controller`; these
handlers translate kio requests into controller calls run as metadata writes (the
controller decides from the image under the metadata log's write lock; the answer waits
until the records are fsynced, off the event loop, and applied), and describe the outcome
in the version the client asked for.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ...protocol.codec import response_schema

from ...cluster.controller import NewTopic, TopicResult
from ...config import TOPIC_CONFIGS, effective_topic_config
from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..authorization import MESSAGES, authorizer
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
    from ...protocol.views.create_topics import CreateTopicsRequest
    from ...protocol.views.delete_topics import DeleteTopicsRequest
    from ...cluster.image import MetadataImage
    from ...config import BrokerConfig

DEFAULT_CONFIG = 5  # ConfigSource.DEFAULT_CONFIG
STATIC_BROKER_CONFIG = 4
DYNAMIC_TOPIC_CONFIG = 1


def topic_config_entries(config: BrokerConfig, overrides: dict[str, str]) -> list[dict]:
    """Every topic config with its value and source, as CreateTopics v5+ reports it."""
    eff = effective_topic_config(config, overrides)
    out = []
    for name, d in sorted(TOPIC_CONFIGS.items()):
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif d.synonym and d.synonym in config.explicit:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        out.append({"name": name, "value": d.render(eff[name]), "read_only": False,
                    "config_source": source, "is_sensitive": False})
    return out


def _creatable(ctx: RequestContext, names: set[str]) -> tuple[set[str], set[str]]:
    """Kafka's CreateTopics authorization (ControllerApis.createTopics): (names the
    principal may create — all with CREATE on the cluster, else those with CREATE on the
    topic; names whose configs it may see — DESCRIBE_CONFIGS on the topic)."""
    a = authorizer(ctx)
    if a is None:
        return names, names

    def ok(op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return a.authorize(ctx.principal, ctx.client_host, op, rtype, name)
    creatable = names if ok(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) else {
        n for n in names if ok(AclOperation.CREATE, ResourceType.TOPIC, n)}
    return creatable, {n for n in names if ok(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, n)}


@handles(19, 2, 7)
async def create_topics(ctx: RequestContext, req: CreateTopicsRequest) -> Any:
    """Topics the principal may not create answer TOPIC_AUTHORIZATION_FAILED ("Authorization
    failed.") and are not passed to the controller; a created topic whose configs it may
    not describe answers TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED with no configs."""
    b = ctx.metadata
    creatable, describable = _creatable(ctx, {t.name for t in req.topics})
    specs = []
    refused = []
    for t in req.topics:
        if t.name not in creatable:
            refused.append({"name": t.name, "topic_id": None, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": "Authorization failed.", "num_partitions": -1,
                            "replication_factor": -1, "configs": None})
            continue
        specs.append(NewTopic(
            name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            assignments={a.partition_index: list(a.broker_ids) for a in t.assignments},
            configs={c.name: c.value for c in t.configs}))
    try:
        results = await b.write_metadata(lambda image: b.controller.create_topics(image, specs,
                                                                                 validate_only=req.validate_only))
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing was created
        results = [TopicResult(s.name, exc.error_code, str(exc)) for s in specs]
    topics = []
    for r in results:
        ok = r.error_code == ErrorCode.none
        topics.append({
            "name": r.name, "topic_id": r.topic_id if (ok and not req.validate_only) else None,
            "error_code": r.error_code, "error_message": r.message,
            "num_partitions": r.num_partitions if ok else -1,
            "replication_factor": r.replication_factor if ok else -1,
            "configs": topic_config_entries(ctx.config, r.configs) if ok and r.name in describable else None,
            "topic_config_error_code": ErrorCode.topic_authorization_failed if ok and r.name not in describable
            else ErrorCode.none,
        })
    return materialize(response_schema(19, ctx.version), {"throttle_time": 0, "topics": topics + refused})


DeleteResult = tuple[str | None, uuid.UUID | None, ErrorCode, str | None]


def _deletable(ctx: RequestContext, names: list[str], ids: list[uuid.UUID]
               ) -> tuple[list[str], list[uuid.UUID], list[DeleteResult]]:
    """Kafka's DeleteTopics authorization (ControllerApis.deleteTopics): with DELETE on
    the cluster everything may be deleted; otherwise a name the principal may not
    DESCRIBE, or an existing topic it may not DELETE, answers TOPIC_AUTHORIZATION_FAILED
    (a topic named by id keeps its name in the answer only if it may be described).
    Returns (names, ids) to delete and the refused results."""
    a = authorizer(ctx)
    if a is None or a.authorize(ctx.principal, ctx.client_host, AclOperation.DELETE, ResourceType.CLUSTER,
                                CLUSTER_NAME):
        return names, ids, []

    def ok(op: AclOperation, name: str) -> bool:
        return a.authorize(ctx.principal, ctx.client_host, op, ResourceType.TOPIC, name)
    image = ctx.image
    code, msg = ErrorCode.topic_authorization_failed, MESSAGES[ErrorCode.topic_authorization_failed]
    refused: list[DeleteResult] = []
    kept_names = []
    for n in names:
        if not ok(AclOperation.DESCRIBE, n) or (n in image.topics and not ok(AclOperation.DELETE, n)):
            refused.append((n, None, code, msg))
        else:
            kept_names.append(n)
    kept_ids = []
    for i in ids:
        t = image.topic_by_id(i)
        if t is not None and not ok(AclOperation.DELETE, t.name):
            refused.append((t.name if ok(AclOperation.DESCRIBE, t.name) else None, i, code, msg))
        else:
            kept_ids.append(i)
    return kept_names, kept_ids, refused


@handles(20, 1, 6)
async def delete_topics(ctx: RequestContext, req: DeleteTopicsRequest) -> Any:
    b = ctx.metadata
    if ctx.version >= 6:
        topics = opt(req, "topics", ())
        names = [t.name for t in topics if t.name is not None]
        ids = [t.topic_id for t in topics if t.name is None and t.topic_id is not None]
    else:
        names, ids = list(opt(req, "topic_names", ())), []
    names, ids, refused = _deletable(ctx, names, ids)
    try:
        results = await b.write_metadata(lambda image: b.controller.delete_topics(image, names, ids))
    except CoordinatorUnavailable as exc:
        results = [(n, None, exc.error_code, str(exc)) for n in names] + [(None, i, exc.error_code, str(exc))
                                                                        for i in ids]
    responses = [{"name": n, "topic_id": tid, "error_code": code, "error_message": msg}
                 for n, tid, code, msg in results + refused]
    return materialize(response_schema(20, ctx.version), {"throttle_time": 0, "responses": responses})


@handles(37, 0, 3)
async def create_partitions(ctx: RequestContext, req: CreatePartitionsRequest) -> Any:
    b = ctx.metadata
    results = []
    seen: set[str] = set()
    a = authorizer(ctx)
    for t in req.topics:
        if t.name in seen:
            results.append({"name": t.name, "error_code": ErrorCode.invalid_request,
                            "error_message": "Duplicate topic in request."})
            continue
        seen.add(t.name)
        if a is not None and not a.authorize(ctx.principal, ctx.client_host, AclOperation.ALTER,
                                             ResourceType.TOPIC, t.name):  # Kafka: ALTER on the topic
            results.append({"name": t.name, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": None})
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        def op(image: MetadataImage, t: CreatePartitionsTopic = t, assignments: list[list[int]] | None = assignments) -> tuple:
            code, msg, records = b.controller.create_partitions(image, t.name, t.count, assignments)
            return (code, msg), records if code == ErrorCode.none and not req.validate_only else []
        try:
            code, msg = await b.write_metadata(op)
        except CoordinatorUnavailable as exc:
            code, msg = exc.error_code, str(exc)
        results.append({"name": t.name, "error_code": code, "error_message": msg})
    return materialize(response_schema(37, ctx.version), {"throttle_time": 0, "results": results})
