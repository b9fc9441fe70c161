"""ElectLeaders (43): preferred or unclean leader election (``kafka-leader-election.sh``,
``Admin.electLeaders``), Kafka's KRaft ``electLeaders``.

The decision is the sans-IO :func:`~hightide.cluster.replication_control.elect_leaders`
run as a metadata write (the answer leaves once the new leaders are committed and
applied). On a broker-only node the request is forwarded to the controller; the single
node answers it itself (every partition is led by its only, preferred, replica:
ELECTION_NOT_NEEDED). ALTER on the cluster is required (CLUSTER_AUTHORIZATION_FAILED for
every partition otherwise); an unknown election type is INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.replication_control import PREFERRED, UNCLEAN
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
    from ...protocol.views.elect_leaders import ElectLeadersRequest


def _everyone(req: ElectLeadersRequest, code: ErrorCode, message: str | None) -> list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]:
    return [(t.topic, [(int(p), code, message) for p in t.partitions]) for t in req.topic_partitions or ()]


@handles(43, 0, 2)
async def elect_leaders(ctx: RequestContext, req: ElectLeadersRequest) -> Any:
    election_type = int(opt(req, "election_type", 0))  # v0: preferred only
    wanted = None if req.topic_partitions is None else [(t.topic, [int(p) for p in t.partitions])
                                                         for t in req.topic_partitions]
    if not authorize_cluster(ctx, AclOperation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        return _response(ctx.version, code, _everyone(req, code, MESSAGES.get(code)))
    if election_type not in (PREFERRED, UNCLEAN):  # Kafka: InvalidRequestException for the whole request
        return _response(ctx.version, ErrorCode.invalid_request, [])
    controller = ctx.metadata.controller
    try:
        results = await ctx.metadata.write_metadata(
            lambda image: controller.elect_leaders(image, election_type, wanted))
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing was elected
        return _response(ctx.version, ErrorCode.none, _everyone(req, exc.error_code, str(exc)))
    return _response(ctx.version, ErrorCode.none, results)


def _response(version: int, code: ErrorCode, results: list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]) -> Any:
    return materialize(response_schema(43, version), {
        "throttle_time": 0, "error_code": code,
        "replica_election_results": [{"topic": topic, "partition_result": [
            {"partition_id": p, "error_code": c, "error_message": m} for p, c, m in parts]}
            for topic, parts in results]})
