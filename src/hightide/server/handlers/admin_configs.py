"""DescribeConfigs (32) and IncrementalAlterConfigs (44) for topics, groups (GROUP
resource 32: the ``share.*`` group configs, kept in the metadata log) and broker reads.
Sources and synonyms follow Kafka's DescribeConfigs semantics."""

from __future__ import annotations

from ...cluster.records import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from ...config import BROKER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS, ConfigDef
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ..coordinator_runtime import CoordinatorUnavailable
from ..registry import handles
from .admin_topics import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG

GROUP_CONFIG = 8  # ConfigSource.GROUP_CONFIG
_TYPE_CODES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}


def _entry(d: ConfigDef, value, source: int, synonyms: list[dict], include_docs: bool) -> dict:
    return {"name": d.name, "value": value, "read_only": False, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": d.sensitive, "synonyms": synonyms,
            "config_type": _TYPE_CODES.get(d.type, 0), "documentation": d.doc if include_docs else None}


def describe_topic(broker, name: str, keys, synonyms: bool, docs: bool) -> dict:
    t = broker.image.topics.get(name)
    if t is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"Topic {name} does not exist.", "configs": []}
    configs = []
    for cname, d in sorted(TOPIC_CONFIGS.items()):
        if keys and cname not in keys:
            continue
        chain = []
        if cname in t.configs:
            chain.append({"name": cname, "value": t.configs[cname], "source": DYNAMIC_TOPIC_CONFIG})
        if d.synonym and d.synonym in broker.config.explicit:
            chain.append({"name": d.synonym, "value": BROKER_CONFIGS[d.synonym].render(broker.config[d.synonym]),
                          "source": STATIC_BROKER_CONFIG})
        base = BROKER_CONFIGS.get(d.synonym or "")
        chain.append({"name": d.synonym or cname, "value": base.render(base.default) if base else d.render(d.default),
                      "source": DEFAULT_CONFIG})
        value, source = chain[0]["value"], chain[0]["source"]
        configs.append(_entry(d, value, source, chain if synonyms else [], docs))
    return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}


def describe_broker(broker, name: str, keys, synonyms: bool, docs: bool) -> dict:
    if name not in ("", str(broker.node_id)):
        return {"error_code": ErrorCode.invalid_request,
                "error_message": f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
                "configs": []}
    configs = []
    for cname, d in sorted(BROKER_CONFIGS.items()):
        if keys and cname not in keys:
            continue
        explicit = cname in broker.config.explicit
        source = STATIC_BROKER_CONFIG if explicit else DEFAULT_CONFIG
        value = d.render(broker.config[cname])
        chain = [{"name": cname, "value": value, "source": source}]
        if explicit:
            chain.append({"name": cname, "value": d.render(d.default), "source": DEFAULT_CONFIG})
        configs.append(_entry(d, value, source, chain if synonyms else [], docs))
    return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}


def describe_group(broker, name: str, keys, synonyms: bool, docs: bool) -> dict:
    """A group's configs: its overrides (GROUP_CONFIG), else the broker's ``group.share.*``
    value (STATIC_BROKER_CONFIG when set explicitly) or default. Any group id may have
    configs, whether or not the group exists (as in Kafka)."""
    if not name:
        return {"error_code": ErrorCode.invalid_request, "error_message": "Group name must not be empty",
                "configs": []}
    overrides = broker.image.group_configs.get(name, {})
    configs = []
    for cname, d in sorted(GROUP_CONFIGS.items()):
        if keys and cname not in keys:
            continue
        chain = []
        if cname in overrides:
            chain.append({"name": cname, "value": overrides[cname], "source": GROUP_CONFIG})
        base = BROKER_CONFIGS.get(d.synonym or "")
        if base is not None and d.synonym in broker.config.explicit:
            chain.append({"name": d.synonym, "value": base.render(broker.config[d.synonym]),
                          "source": STATIC_BROKER_CONFIG})
        chain.append({"name": d.synonym or cname, "value": base.render(base.default) if base else d.render(d.default),
                      "source": DEFAULT_CONFIG})
        configs.append(_entry(d, chain[0]["value"], chain[0]["source"], chain if synonyms else [], docs))
    return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}


@handles(32, 1, 4)
def describe_configs(ctx, req):
    results = []
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))
    for r in req.resources:
        keys = set(r.configuration_keys) if r.configuration_keys else None
        if r.resource_type == TOPIC_RESOURCE:
            res = describe_topic(ctx.broker, r.resource_name, keys, synonyms, docs)
        elif r.resource_type == BROKER_RESOURCE:
            res = describe_broker(ctx.broker, r.resource_name, keys, synonyms, docs)
        elif r.resource_type == GROUP_RESOURCE:
            res = describe_group(ctx.broker, r.resource_name, keys, synonyms, docs)
        else:
            res = {"error_code": ErrorCode.invalid_request,
                   "error_message": f"Unsupported resource type {r.resource_type}", "configs": []}
        res.update(resource_type=r.resource_type, resource_name=r.resource_name)
        results.append(res)
    return materialize(response_schema(32, ctx.version), {"throttle_time": 0, "results": results})


async def _alter(b, alter, validate_only: bool):
    """Run a controller alter call as one metadata write: (code, message)."""
    def op(image):
        code, msg, records = alter(image)
        return (code, msg), records if code == ErrorCode.none and not validate_only else []
    try:
        return await b.write_metadata(op)
    except CoordinatorUnavailable as exc:
        return exc.error_code, str(exc)


@handles(44, 0, 1)
async def incremental_alter_configs(ctx, req):
    b = ctx.broker
    responses = []
    for r in req.resources:
        if r.resource_type == TOPIC_RESOURCE:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            code, msg = await _alter(b, lambda image, n=r.resource_name, o=ops: b.controller.alter_topic_configs(
                image, n, o), req.validate_only)
            if code == ErrorCode.none and not req.validate_only:
                b.refresh_topic_config(b.image.topics[r.resource_name])
        elif r.resource_type == GROUP_RESOURCE:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            code, msg = await _alter(b, lambda image, n=r.resource_name, o=ops: b.controller.alter_group_configs(
                image, n, o), req.validate_only)
        elif r.resource_type == BROKER_RESOURCE:
            code, msg = ErrorCode.invalid_request, "Dynamic broker configs are not supported by hightide; use --config"
        else:
            code, msg = ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}"
        responses.append({"error_code": code, "error_message": msg, "resource_type": r.resource_type,
                          "resource_name": r.resource_name})
    return materialize(response_schema(44, ctx.version), {"throttle_time": 0, "responses": responses})
