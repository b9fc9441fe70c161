"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1 as Kafka 3.9/4.x serve them.

Describe reads the metadata image's client quotas (Kafka's ``ClientQuotasImage.describe``,
:mod:`hightide.cluster.quota_image`): it needs DESCRIBE_CONFIGS on the cluster, else the
whole answer is CLUSTER_AUTHORIZATION_FAILED; a filter Kafka refuses is a top-level error
with Kafka's message and no entries.

Alter runs :func:`hightide.cluster.quota_control.alter_client_quotas` (Kafka's
``ClientQuotaControlManager``) as one metadata write: the answer waits until the
``ClientQuotaRecord`` s are durable and applied, so the next request already sees the
quota (``validate_only``: the same checks, nothing written). It needs ALTER_CONFIGS on the
cluster, else every entity CLUSTER_AUTHORIZATION_FAILED. A broker-only node forwards it to
the controller (:data:`hightide.node.forwarding.FORWARDED`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.quota_control import QuotaAlteration, alter_client_quotas
from ...cluster.quota_image import FilterComponent, QuotaFilterError
from ...cluster.quota_records import QuotaEntity
from ...coordinator.runtime import CoordinatorUnavailable
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...cluster.image import MetadataImage
    from ...protocol.views.alter_client_quotas import AlterClientQuotasRequest
    from ...protocol.views.describe_client_quotas import DescribeClientQuotasRequest

_DENIED = (ErrorCode.cluster_authorization_failed, MESSAGES[ErrorCode.cluster_authorization_failed])


def _entity_list(entity: Any) -> list[dict]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


@handles(48, 0, 1)
def describe_client_quotas(ctx: RequestContext, req: DescribeClientQuotasRequest) -> Any:
    schema = response_schema(48, ctx.version)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return materialize(schema, {"throttle_time": 0, "error_code": _DENIED[0], "error_message": _DENIED[1],
                                    "entries": None})
    components = [FilterComponent(c.entity_type, int(c.match_type), c.match) for c in req.components]
    try:
        found = ctx.image.quotas.describe(components, bool(req.strict))
    except QuotaFilterError as exc:
        return materialize(schema, {"throttle_time": 0, "error_code": exc.code, "error_message": str(exc),
                                    "entries": None})
    entries = [{"entity": _entity_list(entity), "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in found]
    return materialize(schema, {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries})


@handles(49, 0, 1)
async def alter_client_quotas_handler(ctx: RequestContext, req: AlterClientQuotasRequest) -> Any:
    schema = response_schema(49, ctx.version)
    alterations = [QuotaAlteration([(e.entity_type, e.entity_name) for e in entry.entity],
                                   [(op.key, None if op.remove else float(op.value)) for op in entry.ops])
                   for entry in req.entries]
    if not authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):
        return materialize(schema, {"throttle_time": 0, "entries": [
            {"error_code": _DENIED[0], "error_message": _DENIED[1], "entity": _entity_list(a.entity)}
            for a in alterations]})
    validate_only = bool(req.validate_only)

    def op(image: MetadataImage) -> tuple[list, list]:
        results, records = alter_client_quotas(image.quotas, alterations)
        return results, [] if validate_only else records
    results: list[tuple[QuotaEntity, tuple[ErrorCode, str | None]]]
    try:
        results = await ctx.metadata.write_metadata(op)
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing changed
        return materialize(schema, {"throttle_time": 0, "entries": [
            {"error_code": exc.error_code, "error_message": str(exc), "entity": _entity_list(a.entity)}
            for a in alterations]})
    return materialize(schema, {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": message, "entity": _entity_list(entity)}
        for entity, (code, message) in results]})
