"""UpdateFeatures (57): finalize feature levels (``metadata.version``) as
FeatureLevelRecords in the metadata log (:mod:`hightide.cluster.features` has the
rules). Served by the controller (directly, KIP-919, or in an Envelope) and by the single
node. All or nothing: one error answers the request (v0/v1 repeat it for every feature,
as Kafka's ``UpdateFeaturesResponse.createWithErrors``). v0's AllowDowngrade means a safe
downgrade; ValidateOnly (v1+) checks without writing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.features import SAFE_DOWNGRADE, UPGRADE, FeatureUpdate, update_features
from ...cluster.image import MetadataImage
from ...cluster.records import MetadataRecord
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.update_features import UpdateFeaturesRequest


@handles(57, 0, 2)
async def handle(ctx: RequestContext, req: UpdateFeaturesRequest) -> Any:
    updates = [FeatureUpdate(u.feature, int(u.max_version_level),
                             int(opt(u, "upgrade_type", SAFE_DOWNGRADE if opt(u, "allow_downgrade", False)
                                         else UPGRADE)))
               for u in req.feature_updates]
    validate_only = bool(opt(req, "validate_only", False))
    node_id = ctx.identity.node_id
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka: ALTER on the cluster, for every feature
        code, msg = ErrorCode.cluster_authorization_failed, MESSAGES[ErrorCode.cluster_authorization_failed]
        return materialize(response_schema(57, ctx.version), {"throttle_time": 0, "error_code": code,
                                                              "error_message": msg, "results": [
            {"feature": u.name, "error_code": code, "error_message": msg} for u in updates]})

    def op(image: MetadataImage) -> tuple[tuple[ErrorCode, str | None], list[MetadataRecord]]:
        code, msg, records = update_features(image, updates, node_id)
        return (code, msg), [] if validate_only else records
    try:
        code, msg = await ctx.metadata.write_metadata(op)
    except CoordinatorUnavailable as exc:
        code, msg = exc.error_code, str(exc)
    results = [{"feature": u.name, "error_code": code, "error_message": msg} for u in updates]
    return materialize(response_schema(57, ctx.version), {"throttle_time": 0, "error_code": code,
                                                          "error_message": msg, "results": results})
