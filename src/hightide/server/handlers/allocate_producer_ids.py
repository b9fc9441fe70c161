"""AllocateProducerIds (67) on the controller listener: a broker-only node asks for a
block of producer ids (Kafka's ``ProducerIdControlManager``): STALE_BROKER_EPOCH unless the
broker is registered with that epoch; otherwise a ProducerIdsRecord reserves the next
block (``PRODUCER_ID_BLOCK`` ids), written like every metadata change, and the answer is
(ProducerIdStart, ProducerIdLen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.controller import PRODUCER_ID_BLOCK
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import service_handler

if TYPE_CHECKING:
    from ...protocol.views.allocate_producer_ids import AllocateProducerIdsRequest
    from ...node.controller_service import ControllerService


@service_handler(67, 0, 0)
async def allocate_producer_ids(service: ControllerService, ctx: RequestContext, req: AllocateProducerIdsRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # Kafka: brokers only
        code = ErrorCode.cluster_authorization_failed
    else:
        code, _ = service.check_broker_epoch(int(req.broker_id), int(req.broker_epoch))
    start, length = -1, 0
    if code == ErrorCode.none:
        controller = ctx.metadata.controller
        try:
            start = await ctx.metadata.write_metadata(lambda image: controller.allocate_producer_ids(image))
            length = PRODUCER_ID_BLOCK
        except CoordinatorUnavailable as exc:
            code = exc.error_code
    return materialize(response_schema(67, ctx.version), {"throttle_time": 0, "error_code": code,
                                                          "producer_id_start": start, "producer_id_len": length})
