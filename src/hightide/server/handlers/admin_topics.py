"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Validation lives in the sans-IO :class:`~hightide.cluster.controller.Controller`; these
handlers translate kio requests into controller calls run as metadata writes (the
controller decides from the image under the metadata log's write lock; the answer waits
until the records are fsynced, off the event loop, and applied), and describe the outcome
in the version the client asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.codec import response_schema

from ...cluster.controller import NewTopic, TopicResult
from ...config import TOPIC_CONFIGS, effective_topic_config
from ...protocol.build import materialize
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ..coordinator_runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
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


@handles(19, 2, 7)
async def create_topics(ctx: RequestContext, req: Any) -> Any:
    b = ctx.metadata
    specs = []
    for t in req.topics:
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
            "configs": topic_config_entries(ctx.config, r.configs) if ok else None,
        })
    return materialize(response_schema(19, ctx.version), {"throttle_time": 0, "topics": topics})


@handles(20, 1, 6)
async def delete_topics(ctx: RequestContext, req: Any) -> Any:
    b = ctx.metadata
    if ctx.version >= 6:
        names = [t.name for t in req.topics if t.name is not None]
        ids = [t.topic_id for t in req.topics if t.name is None and t.topic_id is not None]
    else:
        names, ids = list(req.topic_names), []
    try:
        results = await b.write_metadata(lambda image: b.controller.delete_topics(image, names, ids))
    except CoordinatorUnavailable as exc:
        results = [(n, None, exc.error_code, str(exc)) for n in names] + [(None, i, exc.error_code, str(exc))
                                                                        for i in ids]
    responses = [{"name": n, "topic_id": tid, "error_code": code, "error_message": msg}
                 for n, tid, code, msg in results]
    return materialize(response_schema(20, ctx.version), {"throttle_time": 0, "responses": responses})


@handles(37, 0, 3)
async def create_partitions(ctx: RequestContext, req: Any) -> Any:
    b = ctx.metadata
    results = []
    seen: set[str] = set()
    for t in req.topics:
        if t.name in seen:
            results.append({"name": t.name, "error_code": ErrorCode.invalid_request,
                            "error_message": "Duplicate topic in request."})
            continue
        seen.add(t.name)
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        def op(image: MetadataImage, t: Any = t, assignments: list[list[int]] | None = assignments) -> tuple:
            code, msg, records = b.controller.create_partitions(image, t.name, t.count, assignments)
            return (code, msg), records if code == ErrorCode.none and not req.validate_only else []
        try:
            code, msg = await b.write_metadata(op)
        except CoordinatorUnavailable as exc:
            code, msg = exc.error_code, str(exc)
        results.append({"name": t.name, "error_code": code, "error_message": msg})
    return materialize(response_schema(37, ctx.version), {"throttle_time": 0, "results": results})
