"""ApiVersions (key 18): computed from the route table, never hand-maintained. (An
ApiVersions request of a version outside 0-4 is answered by the connection itself with
UNSUPPORTED_VERSION and the same ranges: see ``protocol.server_connection``.)

On a broker-only node the forwarded APIs are narrowed to the versions the controller
speaks too (Kafka's ``ApiVersionManager``), and the finalized features (v3+) are those
every unfenced broker has applied (``metadata.read.consistency=acknowledged``: a new
``metadata.version`` is shown only once the lowest acknowledged offset covers it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.features import SUPPORTED_FEATURES
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.server_connection import api_version_ranges
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.api_versions import ApiVersionsRequest


@handles(18, 0, 4)
def handle(ctx: RequestContext, req: ApiVersionsRequest) -> Any:
    ranges = api_version_ranges(ctx.routes)
    view = ctx.services.cluster_view
    if view is not None:
        ranges = view.narrow(ranges)
        epoch, features = view.finalized_features()
    else:
        features = dict(ctx.image.features)
        epoch = ctx.image.offset if features else -1
    return materialize(response_schema(18, ctx.version), {
        "error_code": ErrorCode.none, "api_keys": ranges, "throttle_time": 0,
        "supported_features": [{"name": n, "min_version": lo, "max_version": hi}
                               for n, (lo, hi) in sorted(SUPPORTED_FEATURES.items())],
        "finalized_features_epoch": epoch,
        "finalized_features": [{"name": n, "max_version_level": v, "min_version_level": v}
                               for n, v in sorted(features.items())]})
