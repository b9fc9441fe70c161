"""BrokerRegistration (62), BrokerHeartbeat (63) and UnregisterBroker (64): the
controller's broker-lifecycle RPCs (served on the controller listener only).

Each handler takes the :class:`~hightide.node.controller_service.ControllerService`
first (bound by ``handlers.controller_routes(service)``), decodes the request into the
lifecycle core's terms and answers with the core's reply:

* BrokerRegistration: ``BrokerEpoch`` = the metadata offset of the broker's
  RegisterBrokerRecord for a new incarnation; errors INCONSISTENT_CLUSTER_ID,
  DUPLICATE_BROKER_REGISTRATION, INVALID_REGISTRATION, UNSUPPORTED_VERSION (feature
  levels), KAFKA_STORAGE_ERROR (the metadata log failed).
* BrokerHeartbeat: ``CurrentMetadataOffset`` is the offset of the last metadata record
  the broker has applied; the answer carries IsCaughtUp, IsFenced, ShouldShutDown and
  hightide's tagged field 10000 LowestAcknowledgedOffset (always sent; -1 when unknown
  and on errors), encoded by :mod:`hightide.protocol.broker_heartbeat_response`.
  STALE_BROKER_EPOCH for an unknown broker or a wrong epoch (re-register).
* UnregisterBroker: BROKER_ID_NOT_REGISTERED for an unknown id.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ...cluster.lifecycle import Heartbeat, HeartbeatReply, Registration, heartbeat_response
from ...protocol.broker_heartbeat_response import encode_broker_heartbeat_response
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ..registry import service_handler

if TYPE_CHECKING:
    from ...protocol.views.broker_heartbeat import BrokerHeartbeatRequest
    from ...protocol.views.broker_registration import BrokerRegistrationRequest
    from ...protocol.views.unregister_broker import UnregisterBrokerRequest
    from ...node.controller_service import ControllerService


def registration(req: BrokerRegistrationRequest, incarnation_id: uuid.UUID, version: int) -> Registration:
    """The core's view of a BrokerRegistrationRequest (any version) with an incarnation id."""
    listeners = tuple((x.name, x.host, int(x.port), int(x.security_protocol)) for x in req.listeners)
    features = tuple((f.name, int(f.min_supported_version), int(f.max_supported_version)) for f in req.features)
    log_dirs = tuple(str(d) for d in opt(req, "log_dirs", ()) if d is not None)
    return Registration(int(req.broker_id), req.cluster_id, incarnation_id, listeners, features, req.rack, log_dirs)


@service_handler(62, 0, 4)
async def broker_registration(service: ControllerService, ctx: RequestContext, req: BrokerRegistrationRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # Kafka: brokers only
        code, epoch = ErrorCode.cluster_authorization_failed, -1
    elif req.incarnation_id is None:
        code, epoch = ErrorCode.invalid_registration, -1
    else:
        reply = await service.register(registration(req, req.incarnation_id, ctx.version))
        code, epoch = reply.error_code, reply.broker_epoch
    return materialize(response_schema(62, ctx.version), {"throttle_time": 0, "error_code": code,
                                                          "broker_epoch": epoch})


@service_handler(63, 0, 2)
async def broker_heartbeat(service: ControllerService, ctx: RequestContext, req: BrokerHeartbeatRequest) -> bytes:
    hb = Heartbeat(int(req.broker_id), int(req.broker_epoch), int(req.current_metadata_offset),
                   bool(req.want_fence), bool(req.want_shut_down))
    reply: HeartbeatReply
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # Kafka: brokers only
        reply = HeartbeatReply(ErrorCode.cluster_authorization_failed)
    else:
        reply = await service.heartbeat(hb)
    return encode_broker_heartbeat_response(ctx.version, ctx.header.correlation_id, heartbeat_response(reply))


@service_handler(64, 0, 0)
async def unregister_broker(service: ControllerService, ctx: RequestContext, req: UnregisterBrokerRequest) -> Any:
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka: ALTER on the cluster (an operator's call)
        code, msg = ErrorCode.cluster_authorization_failed, None
    else:
        code, msg = await service.unregister(int(req.broker_id))
    return materialize(response_schema(64, ctx.version), {"throttle_time": 0, "error_code": code,
                                                          "error_message": msg})
