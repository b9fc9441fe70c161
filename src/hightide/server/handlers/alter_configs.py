"""AlterConfigs (key 33), the non-incremental form Kafka 4 still serves (kafkajs'
``alterConfigs`` uses it).

Kafka's semantics (``ConfigurationControlManager.legacyAlterConfigs``): the configs in
the request *replace* the resource's whole set of dynamic configs (a topic's, a group's, a broker's or the
cluster default broker configs) — a config not named is
deleted, a config named twice keeps its last value. Each resource is validated and
answered on its own (unknown topic, unknown or invalid config, null topic config value);
``validate_only`` checks without writing. A resource named twice in one request answers
INVALID_REQUEST "Duplicate resource." once; an unknown resource type answers
UNSUPPORTED_VERSION, as Kafka's controller does.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ...cluster.records import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import config_resource_refused
from ...services import MetadataAccess, PartitionLogs
from ..context import RequestContext
from ..registry import handles
from .admin_configs import alter_broker, write_alter

if TYPE_CHECKING:
    from ...protocol.views.alter_configs import AlterConfigsRequest
    from ...cluster.image import MetadataImage

SET, DELETE = 0, 1
_KNOWN_TYPES = {1, 2, 4, 8, 16, 32}  # Kafka's ConfigResource.Type ids (UNKNOWN is 0)


def replace_ops(current: dict[str, str], wanted: dict[str, str | None]) -> list[tuple[str, int, str | None]]:
    """IncrementalAlterConfigs operations that turn ``current`` into exactly ``wanted``:
    SET for every wanted config, DELETE for every current one not wanted."""
    ops: list[tuple[str, int, str | None]] = [(k, DELETE, None) for k in sorted(current) if k not in wanted]
    ops += [(k, SET, v) for k, v in wanted.items()]
    return ops


async def _alter_resource(metadata: MetadataAccess, logs: PartitionLogs, rtype: int, name: str, wanted: dict[str, str | None],
                          validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Replace the dynamic configs of one resource; (error code, message)."""
    if rtype == TOPIC_RESOURCE:
        nulls = [k for k, v in wanted.items() if v is None]
        if nulls:
            return ErrorCode.invalid_config, f"Null value not supported for topic configs: {','.join(nulls)}"
        code, msg = await write_alter(metadata, lambda image: metadata.controller.alter_topic_configs(
            image, name, replace_ops(image.topics[name].configs if name in image.topics else {}, wanted)),
            validate_only)
        if code == ErrorCode.none and not validate_only:
            logs.refresh_topic_config(metadata.image.topics[name])
        return code, msg
    if rtype == GROUP_RESOURCE:
        return await write_alter(metadata, lambda image: metadata.controller.alter_group_configs(
            image, name, replace_ops(image.group_configs.get(name, {}), wanted)), validate_only)
    if rtype == BROKER_RESOURCE:
        nulls = [k for k, v in wanted.items() if v is None]
        if nulls:
            return ErrorCode.invalid_request, f"Null value not supported for : {','.join(nulls)}"
        return await alter_broker(metadata, logs, name, lambda image: replace_ops(image.broker_dynamic.get(name, {}), wanted),
                                  validate_only)
    if rtype not in _KNOWN_TYPES:
        return ErrorCode.unsupported_version, f"Unknown resource type {rtype}."
    return ErrorCode.invalid_request, f"Unsupported resource type {rtype} for AlterConfigs"


@handles(33, 0, 2)
async def handle(ctx: RequestContext, req: AlterConfigsRequest) -> Any:
    count = Counter((r.resource_type, r.resource_name) for r in req.resources)
    answered: set[tuple[int, str]] = set()
    msg: str | None
    responses = []
    for r in req.resources:
        key = (r.resource_type, r.resource_name)
        if key in answered:
            continue
        answered.add(key)
        refused = config_resource_refused(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
        if count[key] > 1:
            code, msg = ErrorCode.invalid_request, "Duplicate resource."
        elif refused is not None:
            code, msg = refused
        else:
            wanted = {c.name: c.value for c in r.configs}  # a name given twice: the last value wins
            code, msg = await _alter_resource(ctx.metadata, ctx.logs, r.resource_type, r.resource_name, wanted, req.validate_only)
        responses.append({"error_code": code, "error_message": msg, "resource_type": r.resource_type,
                          "resource_name": r.resource_name})
    return materialize(response_schema(33, ctx.version), {"throttle_time": 0, "responses": responses})
