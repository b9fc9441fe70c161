"""Envelope (58) on the controller listener: a broker forwards a client's metadata write.

``RequestData`` is the client's request (header and body, no size prefix). It is
decoded and run by the controller's own route table — the same handler code as a direct
request (KIP-919's ``--bootstrap-controller``) — and the inner response (header and
body, no size prefix) is returned in ``ResponseData``. The inner request runs under
``RequestPrincipal`` (Kafka's principal serde, :mod:`hightide.security.principal`) from
``ClientHostAddress``: the forwarding broker's client, so ACLs decide as if the client
had asked the controller. Bytes that do not deserialize answer
PRINCIPAL_DESERIALIZATION_FAILURE (as Kafka); a null (or empty) principal is a broker's
own write (auto-created topics) and runs under the Envelope sender's principal, which
holds CLUSTER_ACTION.

hightide extension: tagged field 10000 ``MetadataOffset`` (int64) = the content offset of
the controller's image once the inner request finished (the offset of the last applied
record that is not a NoOp), so it covers every record the inner write committed — and
the state an error answer (TOPIC_ALREADY_EXISTS...) was decided from. The broker answers
the client once the lowest acknowledged offset reaches it (read-after-write;
:mod:`hightide.protocol.envelope_response`, docs/protocol-extensions.md).

Envelope-level errors (Kafka's): the inner request cannot be parsed, names an API that is
not forwardable, or a version the controller does not serve → INVALID_REQUEST /
UNSUPPORTED_VERSION with no ResponseData and no MetadataOffset.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING, Any

from ...protocol.codec import decode_request, encode_response, parse_header
from ...protocol.envelope_response import EnvelopeResponse, encode_envelope_response
from ...protocol.errors import ErrorCode, PeerProtocolError
from ...protocol.regions import close_regions, joined
from ...security.acl import AclOperation
from ...security.principal import PrincipalDeserializationError, deserialize_principal
from ..authorization import authorize_cluster
from ..context import RequestContext
from ...node.forwarding import FORWARDED
from ..registry import RawResponse, handles

if TYPE_CHECKING:
    from ...protocol.views.envelope import EnvelopeRequest

log = logging.getLogger("hightide.controller")



@handles(58, 0, 0)
async def envelope(ctx: RequestContext, req: EnvelopeRequest) -> bytes:
    corr = ctx.header.correlation_id
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # Kafka: only brokers may forward
        log.warning("Envelope from %s refused: %s lacks CLUSTER_ACTION", ctx.peer, ctx.principal)
        return encode_envelope_response(corr, EnvelopeResponse(None, ErrorCode.cluster_authorization_failed))
    frame = memoryview(bytes(req.request_data)).toreadonly()
    try:
        header, body_offset = parse_header(frame)
    except (PeerProtocolError, ValueError, IndexError) as exc:
        log.warning("Envelope from %s: unreadable inner request header: %s", ctx.peer, exc)
        return encode_envelope_response(corr, EnvelopeResponse(None, ErrorCode.invalid_request))
    route = ctx.routes.get(header.api_key)
    if header.api_key not in FORWARDED or route is None:  # the one table of forwarded APIs
        log.warning("Envelope from %s: api key %d is not forwardable", ctx.peer, header.api_key)
        return encode_envelope_response(corr, EnvelopeResponse(None, ErrorCode.invalid_request))
    if not route.min_version <= header.api_version <= route.max_version:
        return encode_envelope_response(corr, EnvelopeResponse(None, ErrorCode.unsupported_version))
    unknown: dict = {}
    try:
        body = decode_request(header, frame, body_offset, unknown)
    except PeerProtocolError as exc:
        log.warning("Envelope from %s: malformed inner request: %s", ctx.peer, exc.reason)
        return encode_envelope_response(corr, EnvelopeResponse(None, ErrorCode.invalid_request))
    try:
        principal = deserialize_principal(bytes(req.request_principal)) if req.request_principal else ctx.principal
    except PrincipalDeserializationError as exc:
        log.warning("Envelope from %s: request principal cannot be read: %s", ctx.peer, exc)
        return encode_envelope_response(corr, EnvelopeResponse(None, ErrorCode.principal_deserialization_failure))
    inner_ctx = RequestContext(ctx.services, header, ctx.peer, unknown, ctx.now_ms, principal,
                               _client_host(bytes(req.client_host_address or b""), ctx.client_host))
    result = route.fn(inner_ctx, body)
    if hasattr(result, "__await__"):
        result = await result
    data = _inner_bytes(header.api_key, header.api_version, header.correlation_id, result)
    return encode_envelope_response(corr, EnvelopeResponse(data, ErrorCode.none, ctx.image.content_offset))


def _client_host(address: bytes, default: str) -> str:
    """The client's IP address (4 or 16 bytes) as text; ``default`` when absent or malformed."""
    try:
        return str(ipaddress.ip_address(address)) if len(address) in (4, 16) else default
    except ValueError:
        return default


def _inner_bytes(api_key: int, version: int, correlation_id: int, result: Any) -> bytes:
    """The inner response as header + body without the size prefix."""
    if isinstance(result, RawResponse):
        try:
            return joined(result.buffers)
        finally:
            close_regions(result.buffers)
    if isinstance(result, bytes):
        return result[4:]
    return encode_response(api_key, version, correlation_id, result)[4:]
