"""DescribeCluster (key 60).

The single node describes itself. With broker registrations in the image (cluster mode)
a broker answers as Kafka's: the unfenced brokers with their endpoint on the listener
the request came in on (v2 ``IncludeFencedBrokers``: the fenced ones too, marked
``IsFenced``), and a random alive broker as ControllerId (-1 when there is none).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from ...protocol.codec import response_schema

from ...protocol.build import materialize
from ...security.acl import CLUSTER_NAME, ResourceType
from ..authorization import authorized_operations
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ..context import RequestContext
from ..leadership import alive_brokers, in_cluster
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.describe_cluster import DescribeClusterRequest

CLUSTER_AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@handles(60, 0, 2)
def handle(ctx: RequestContext, req: DescribeClusterRequest) -> Any:
    b = ctx.identity
    host, port = b.advertised
    endpoint_type = opt(req, "endpoint_type", 1)
    if endpoint_type not in (1,):
        return materialize(response_schema(60, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "The endpoint type is not supported", "endpoint_type": endpoint_type,
            "cluster_id": b.cluster_id, "controller_id": -1, "brokers": [],
            "cluster_authorized_operations": CLUSTER_AUTHORIZED_OPERATIONS_OMITTED})
    brokers: list[dict[str, Any]] = [
        {"broker_id": b.node_id, "host": host, "port": port, "rack": None, "is_fenced": False}]
    controller_id = b.node_id
    if in_cluster(ctx):
        listed = alive_brokers(ctx.image, ctx.services.listener,
                               include_fenced=opt(req, "include_fenced_brokers", False))
        brokers = [{"broker_id": n, "host": h, "port": p, "rack": r, "is_fenced": fenced}
                   for (n, h, p, r), fenced in listed]
        alive = [x["broker_id"] for x in brokers if not x["is_fenced"]]
        controller_id = random.choice(alive) if alive else -1
    return materialize(response_schema(60, ctx.version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "endpoint_type": 1, "cluster_id": b.cluster_id, "controller_id": controller_id,
        "brokers": brokers,
        # KIP-430: from the ACLs (every cluster operation without an authorizer, as Kafka)
        "cluster_authorized_operations": authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        if req.include_cluster_authorized_operations
        else CLUSTER_AUTHORIZED_OPERATIONS_OMITTED,
    })
