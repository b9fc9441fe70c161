"""UnregisterBroker (key 64, v0) on a broker listener.

A broker-only node forwards it to the active controller (``forwarding.FORWARDED``;
Kafka's ``KafkaApis`` forwards it too), which needs ALTER on the cluster and removes the
registration of any registered broker, fenced or not, as Kafka's
``ReplicationControlManager.unregisterBroker`` (see ``handlers.broker_lifecycle``): an
active broker that is unregistered gets STALE_BROKER_EPOCH on its next heartbeat and
registers again. This route answers only on the single node, which runs without broker
registrations: ALTER on the cluster is checked as on the controller, then every id is
BROKER_ID_NOT_REGISTERED, and its own id INVALID_REQUEST (it cannot be removed from
itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.unregister_broker import UnregisterBrokerRequest


@handles(64, 0, 0)
def handle(ctx: RequestContext, req: UnregisterBrokerRequest) -> Any:
    broker_id = int(req.broker_id)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        code, msg = ErrorCode.cluster_authorization_failed, MESSAGES[ErrorCode.cluster_authorization_failed]
    elif broker_id == ctx.services.identity.node_id:
        code, msg = ErrorCode.invalid_request, (f"Broker {broker_id} is this single node, which runs without broker "
                                                "registrations: it cannot be unregistered")
    else:
        code, msg = ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered"
    return materialize(response_schema(64, ctx.version), {"throttle_time": 0, "error_code": code,
                                                          "error_message": msg})
