"""ApiVersions (key 18): computed from the route table, never hand-maintained."""

from __future__ import annotations

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.codec import RequestHeader, encode_response
from ...protocol.errors import ErrorCode
from ..registry import ROUTES, handles


def api_keys() -> list[dict]:
    return [{"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version}
            for r in sorted(ROUTES.values(), key=lambda r: r.api_key)]


@handles(18, 0, 4)
def handle(ctx, req):
    return materialize(response_schema(18, ctx.version),
                       {"error_code": ErrorCode.none, "api_keys": api_keys(), "throttle_time": 0})


def unsupported_version_response(header: RequestHeader) -> bytes:
    """Kafka answers an ApiVersions request of an unknown version with a v0 response
    carrying UNSUPPORTED_VERSION and the supported ranges, so the client can retry."""
    body = materialize(response_schema(18, 0),
                       {"error_code": ErrorCode.unsupported_version, "api_keys": api_keys()})
    return encode_response(18, 0, header.correlation_id, body)
