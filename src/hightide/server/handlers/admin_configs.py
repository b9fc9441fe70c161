"""DescribeConfigs (32) and IncrementalAlterConfigs (44) for topics, groups (GROUP
resource 32: the ``share.*`` group configs, kept in the metadata log) and brokers
(dynamic broker configs: cluster default ``""`` and per broker id, kept in the metadata
log and put in force at once). Sources and synonyms follow Kafka's ConfigHelper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ...cluster.records import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, ConfigRecord
from ...config import (
    BROKER_CONFIGS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_BROKER_CONFIGS,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    GROUP_CONFIGS,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    broker_synonyms,
    config_synonyms,
    effective_topic_config,
    group_config_default,
    validate_dynamic_broker_configs,
)
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import config_resource_refused
from ...services import MetadataAccess, PartitionLogs
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.describe_configs import DescribeConfigsRequest
    from ...protocol.views.incremental_alter_configs import IncrementalAlterConfigsRequest
    from ...cluster.image import MetadataImage
    from ...config import BrokerConfig

GROUP_CONFIG = 8  # ConfigSource.GROUP_CONFIG
_TYPE_CODES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}


def _entry(d: ConfigDef, value: str | None, source: int, synonyms: list[dict], include_docs: bool) -> dict:
    return {"name": d.name, "value": value, "read_only": False, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": d.sensitive, "synonyms": synonyms,
            "config_type": _TYPE_CODES.get(d.type, 0), "documentation": d.doc if include_docs else None}


def _synonyms(chain: Sequence[tuple[str, str | None, int]]) -> list[dict]:
    return [{"name": n, "value": v, "source": src} for n, v, src in chain]


def describe_topic(image: MetadataImage, config: BrokerConfig, name: str, keys: set[str] | None, synonyms: bool,
                   docs: bool) -> dict:
    """Kafka's ConfigHelper.createTopicConfigEntry: the override (DYNAMIC_TOPIC_CONFIG),
    then the synonyms of the topic config's broker config at every level; the source is
    the first of them, DEFAULT_CONFIG when there is none."""
    t = image.topics.get(name)
    if t is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"Topic {name} does not exist.", "configs": []}
    effective = effective_topic_config(config, t.configs)
    configs = []
    for cname, d in sorted(TOPIC_CONFIGS.items()):
        if keys and cname not in keys:
            continue
        value = d.render(effective[cname])
        chain = [(cname, value, DYNAMIC_TOPIC_CONFIG)] if cname in t.configs else []
        if d.synonym:
            chain += config_synonyms(config, d.synonym)
        source = chain[0][2] if chain else DEFAULT_CONFIG
        configs.append(_entry(d, value, source, _synonyms(chain) if synonyms else [], docs))
    return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}


# Broker configs Kafka also lists under their alias names (no table entry of their own).
_ALIASES = {n: ConfigDef(n, "int" if n.endswith(("hours", "minutes")) else "long", None,
                         f"Fallback of {broker_synonyms(n)[0]} in larger units.")
            for n in ("log.retention.minutes", "log.retention.hours", "log.roll.hours", "log.roll.jitter.hours")}


def describe_broker(image: MetadataImage, cfg: BrokerConfig, node_id: int, name: str, keys: set[str] | None,
                    synonyms: bool, docs: bool) -> dict:
    """Kafka's createBrokerConfigEntry. Broker ``<id>``: every config with its value in
    force, its synonyms (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG, DEFAULT_CONFIG) and read_only unless it can change at run time.
    Cluster default ``""``: only the configs set there (DYNAMIC_DEFAULT_BROKER_CONFIG)."""
    if name == "":
        dynamic = dict(image.broker_dynamic.get("", {}))
        configs = []
        for cname in sorted(dynamic):
            if keys and cname not in keys:
                continue
            chain = [c for c in config_synonyms(cfg, cname) if c[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
            d = BROKER_CONFIGS.get(cname) or _unknown(cname)
            configs.append({**_entry(d, None if d.sensitive else dynamic[cname], DYNAMIC_DEFAULT_BROKER_CONFIG,
                                     _synonyms(chain) if synonyms and not d.sensitive else [], docs),
                            "read_only": cname not in DYNAMIC_BROKER_CONFIGS})
        return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}
    if name != str(node_id):
        return {"error_code": ErrorCode.invalid_request,
                "error_message": f"Unexpected broker id, expected {node_id} or empty string, but received {name}",
                "configs": []}
    configs = []
    for cname, d in sorted({**BROKER_CONFIGS, **_ALIASES}.items()):
        if keys and cname not in keys:
            continue
        chain = config_synonyms(cfg, cname)
        if cname in _ALIASES:
            value = next((v for n, v, _ in chain if n == cname), None)
        else:
            value = d.render(cfg[cname])
        source = chain[0][2] if chain else DEFAULT_CONFIG
        configs.append({**_entry(d, value, source, _synonyms(chain) if synonyms else [], docs),
                        "read_only": cname not in DYNAMIC_BROKER_CONFIGS})
    for cname, source in sorted({**{n: DYNAMIC_DEFAULT_BROKER_CONFIG for n in cfg.dynamic_default},
                                 **{n: DYNAMIC_BROKER_CONFIG for n in cfg.dynamic_broker}}.items()):
        if cname not in BROKER_CONFIGS and cname not in _ALIASES and (not keys or cname in keys):
            configs.append({**_entry(_unknown(cname), None, source, [], docs), "read_only": True})
    return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}


def _unknown(name: str) -> ConfigDef:
    """A dynamic broker config name hightide does not know (kept, as Kafka keeps them):
    reported as Kafka does, sensitive (its type is unknown) and so without its value."""
    return ConfigDef(name, "string", None, sensitive=True)


def describe_group(image: MetadataImage, config: BrokerConfig, name: str, keys: set[str] | None, synonyms: bool,
                   docs: bool) -> dict:
    """A group's configs: its overrides (GROUP_CONFIG), else the broker's ``group.share.*``
    value (STATIC_BROKER_CONFIG when set explicitly) or default. Any group id may have
    configs, whether or not the group exists (as in Kafka)."""
    if not name:
        return {"error_code": ErrorCode.invalid_request, "error_message": "Group name must not be empty",
                "configs": []}
    overrides = image.group_configs.get(name, {})
    configs = []
    for cname, d in sorted(GROUP_CONFIGS.items()):
        if keys and cname not in keys:
            continue
        chain: list[dict[str, Any]] = []
        if cname in overrides:
            chain.append({"name": cname, "value": overrides[cname], "source": GROUP_CONFIG})
        base = BROKER_CONFIGS.get(d.synonym or "")
        if base is not None and d.synonym in config.explicit:
            chain.append({"name": d.synonym, "value": base.render(config[d.synonym]),
                          "source": STATIC_BROKER_CONFIG})
        # (share.assignor's default is the first of group.share.assignors)
        chain.append({"name": d.synonym or cname, "value": base.render(base.default) if base
                      else d.render(group_config_default(config, cname)), "source": DEFAULT_CONFIG})
        configs.append(_entry(d, chain[0]["value"], chain[0]["source"], chain if synonyms else [], docs))
    return {"error_code": ErrorCode.none, "error_message": None, "configs": configs}


@handles(32, 1, 4)
def describe_configs(ctx: RequestContext, req: DescribeConfigsRequest) -> Any:
    results = []
    synonyms = req.include_synonyms
    docs = bool(opt(req, "include_documentation", False))
    image, config = ctx.image, ctx.config
    for r in req.resources:
        keys = set(r.configuration_keys) if r.configuration_keys else None
        refused = config_resource_refused(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
        if refused is not None:
            res = {"error_code": refused[0], "error_message": refused[1], "configs": []}
        elif r.resource_type == TOPIC_RESOURCE:
            res = describe_topic(image, config, r.resource_name, keys, synonyms, docs)
        elif r.resource_type == BROKER_RESOURCE:
            res = describe_broker(image, config, ctx.identity.node_id, r.resource_name, keys, synonyms, docs)
        elif r.resource_type == GROUP_RESOURCE:
            res = describe_group(image, config, r.resource_name, keys, synonyms, docs)
        else:
            res = {"error_code": ErrorCode.invalid_request,
                   "error_message": f"Unsupported resource type {r.resource_type}", "configs": []}
        res.update(resource_type=r.resource_type, resource_name=r.resource_name)
        results.append(res)
    return materialize(response_schema(32, ctx.version), {"throttle_time": 0, "results": results})


AlterFn = Callable[["MetadataImage"], tuple[ErrorCode, str | None, list]]
"""A controller alter call: image -> (code, message, records to write)."""
ConfigOps = list[tuple[str, int, str | None]]
"""IncrementalAlterConfigs operations: (config name, operation, value)."""


async def write_alter(metadata: MetadataAccess, alter: AlterFn, validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Run a controller alter call as one metadata write: (code, message); nothing is
    written when it fails or with ``validate_only``."""
    def op(image: MetadataImage) -> tuple[tuple[ErrorCode, str | None], list]:
        code, msg, records = alter(image)
        return (code, msg), records if code == ErrorCode.none and not validate_only else []
    try:
        result: tuple[ErrorCode, str | None] = await metadata.write_metadata(op)
    except CoordinatorUnavailable as exc:
        return exc.error_code, str(exc)
    return result


def alter_broker_configs(image: MetadataImage, name: str, ops: ConfigOps) -> tuple[ErrorCode, str | None, list]:
    """IncrementalAlterConfigs on a BROKER resource (``""`` = cluster default, or a broker
    id): the resulting set of dynamic configs must hold only configs Kafka lets change at
    run time, with valid values. Returns (code, message, ConfigRecords); errors are
    INVALID_REQUEST as in Kafka (KAFKA-13609), unknown names included."""
    if name and not name.isdigit():
        return ErrorCode.invalid_request, f"Unable to parse broker name as a base 10 number: {name}", []
    old = image.broker_dynamic.get(name, {})
    current = dict(old)
    keys = [k for k, _, _ in ops]
    if len(set(keys)) != len(keys):
        return ErrorCode.invalid_request, "Error due to duplicate config keys", []
    for key, op, value in ops:
        d = BROKER_CONFIGS.get(key)
        if op == 0:
            if value is None:
                return ErrorCode.invalid_request, f"Null value not supported for : {key}", []
            current[key] = value
        elif op == 1:
            current.pop(key, None)
        elif op in (2, 3):
            if d is None or d.type != "list":
                return ErrorCode.invalid_request, f"Config value append/subtract is not allowed for config key {key}", []
            base = list(d.parse(current.get(key, d.render(d.default))))
            items = [x.strip() for x in (value or "").split(",") if x.strip()]
            base = base + [x for x in items if x not in base] if op == 2 else [x for x in base if x not in items]
            current[key] = ",".join(base)
        else:
            return ErrorCode.invalid_request, f"Unknown operations type {op}", []
    try:
        validate_dynamic_broker_configs(current)
    except ConfigError as exc:
        return ErrorCode.invalid_request, str(exc), []
    return ErrorCode.none, None, [ConfigRecord(BROKER_RESOURCE, name, k, current.get(k))
                                  for k in sorted(set(current) | set(old)) if current.get(k) != old.get(k)]


async def alter_broker(metadata: MetadataAccess, logs: PartitionLogs, name: str,
                       ops: ConfigOps | Callable[[MetadataImage], ConfigOps],
                       validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Write a BROKER resource's dynamic configs and put them in force (on the node's
    config and its ``logs``). ``ops`` is a list of (name, op, value) or a function of the
    image returning one."""
    code, msg = await write_alter(metadata, lambda image: alter_broker_configs(
        image, name, ops(image) if callable(ops) else ops), validate_only)
    if code == ErrorCode.none and not validate_only:
        logs.apply_dynamic_broker_configs()
    return code, msg


@handles(44, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> Any:
    metadata = ctx.metadata
    responses = []
    ops: ConfigOps
    msg: str | None
    for r in req.resources:
        refused = config_resource_refused(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
        if refused is not None:
            code, msg = refused
        elif r.resource_type == TOPIC_RESOURCE:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            code, msg = await write_alter(metadata, partial(metadata.controller.alter_topic_configs,
                                                       name=r.resource_name, ops=ops), req.validate_only)
            if code == ErrorCode.none and not req.validate_only:
                ctx.logs.refresh_topic_config(metadata.image.topics[r.resource_name])
        elif r.resource_type == GROUP_RESOURCE:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            code, msg = await write_alter(metadata, partial(metadata.controller.alter_group_configs,
                                                       group_id=r.resource_name, ops=ops), req.validate_only)
        elif r.resource_type == BROKER_RESOURCE:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            code, msg = await alter_broker(metadata, ctx.logs, r.resource_name, ops, req.validate_only)
        else:
            code, msg = ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}"
        responses.append({"error_code": code, "error_message": msg, "resource_type": r.resource_type,
                          "resource_name": r.resource_name})
    return materialize(response_schema(44, ctx.version), {"throttle_time": 0, "responses": responses})
