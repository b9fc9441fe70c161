"""DescribeCluster (key 60)."""

from __future__ import annotations

from typing import Any

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...protocol.acl import all_operations
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ..registry import handles

CLUSTER_AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@handles(60, 0, 2)
def handle(ctx: RequestContext, req: Any) -> Any:
    b = ctx.identity
    host, port = b.advertised
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type not in (1,):
        return materialize(response_schema(60, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "The endpoint type is not supported", "endpoint_type": endpoint_type,
            "cluster_id": b.cluster_id, "controller_id": -1, "brokers": [],
            "cluster_authorized_operations": CLUSTER_AUTHORIZED_OPERATIONS_OMITTED})
    return materialize(response_schema(60, ctx.version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "endpoint_type": 1, "cluster_id": b.cluster_id, "controller_id": b.node_id,
        "brokers": [{"broker_id": b.node_id, "host": host, "port": port, "rack": None, "is_fenced": False}],
        # No ACLs yet: every cluster operation, as Kafka without an authorizer.
        "cluster_authorized_operations": all_operations("cluster") if req.include_cluster_authorized_operations
        else CLUSTER_AUTHORIZED_OPERATIONS_OMITTED,
    })
