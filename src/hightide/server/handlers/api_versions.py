"""ApiVersions (key 18): computed from the route table, never hand-maintained. (An
ApiVersions request of a version outside 0-4 is answered by the connection itself with
UNSUPPORTED_VERSION and the same ranges: see ``protocol.server_connection``.)"""

from __future__ import annotations

from typing import Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.server_connection import api_version_ranges
from ..context import RequestContext
from ..registry import handles


@handles(18, 0, 4)
def handle(ctx: RequestContext, req: Any) -> Any:
    return materialize(response_schema(18, ctx.version),
                       {"error_code": ErrorCode.none, "api_keys": api_version_ranges(ctx.routes), "throttle_time": 0})
