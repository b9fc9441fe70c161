"""SaslHandshake (17) and SaslAuthenticate (36) on an authenticated connection.

A connection that still has to authenticate never reaches the route table for these two
APIs: its :class:`~hightide.security.session.SaslSession` admits them with ``SASL`` and
answers them itself (handshake, mechanism exchange, KIP-368 re-authentication). What is
routed here is a SASL request on a connection that needs none (a PLAINTEXT or SSL
listener) or that is already authenticated without re-authentication support: Kafka's
``KafkaApis`` answers both with ILLEGAL_SASL_STATE, and so does hightide. Registering
them also makes ApiVersions advertise them, as Kafka does on every listener.

SaslHandshake is advertised from v0 although a v0 handshake (raw tokens, removed in Kafka
4) is refused by the session: librdkafka (kcat, confluent-kafka before 2.x) enables SASL
only when the broker's range includes v0, and then sends v1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.sasl_authenticate import SaslAuthenticateRequest
    from ...protocol.views.sasl_handshake import SaslHandshakeRequest


@handles(17, 0, 1)
def sasl_handshake(ctx: RequestContext, req: SaslHandshakeRequest) -> Any:
    return materialize(response_schema(17, ctx.version), {"error_code": ErrorCode.illegal_sasl_state,
                                                          "mechanisms": []})


@handles(36, 0, 2)
def sasl_authenticate(ctx: RequestContext, req: SaslAuthenticateRequest) -> Any:
    return materialize(response_schema(36, ctx.version), {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"", "session_lifetime": 0})
