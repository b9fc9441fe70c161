"""An Envelope runs its inner request under the forwarded client's principal and host
(Kafka's principal serde), so the controller's ACL checks see the client, not the broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hightide import Broker, BrokerConfig
from hightide.client.connection import decode_response
from hightide.cluster.security_control import create_acls
from hightide.protocol.build import materialize
from hightide.protocol.codec import RequestHeader, encode_request, request_schema
from hightide.protocol.envelope_response import decode_envelope_response
from hightide.protocol.errors import ErrorCode
from hightide.security.acl import AclBinding, AclOperation, PatternType, ResourceType
from hightide.security.principal import serialize_principal
from hightide.server.context import RequestContext

BROKER = "User:broker"  # the forwarding broker's own principal (a super user)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[asyncio.AbstractEventLoop, Broker, Any]]:
    from hightide.cluster.lifecycle import LifecycleConfig
    from hightide.node.controller_service import ControllerService
    from hightide.server.handlers import controller_routes
    loop = asyncio.new_event_loop()
    cfg = BrokerConfig.load(overrides={"authorizer.class.name": "standard", "super.users": BROKER})
    b = Broker(cfg, data_dir=str(tmp_path_factory.mktemp("envelope")), listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    try:
        assert b.metadata is not None
        metadata = b.metadata
        service = ControllerService(node_id=1, cluster_id=b.cluster_id or "c", config=LifecycleConfig(),
                                    write=b.metadata_writer.write_metadata, image=lambda: b.image, metadata_log=lambda: metadata.log,
                                    committed_end=lambda: b.image.offset + 1)
        binding = AclBinding.of(int(ResourceType.CLUSTER), "kafka-cluster", int(PatternType.LITERAL), "User:alice",
                                "10.1.1.1", int(AclOperation.CREATE), 3)
        _, records = create_acls(b.image.security, [binding])
        loop.run_until_complete(b.metadata_writer.commit_metadata(records))
        yield loop, b, controller_routes(service)
    finally:
        loop.run_until_complete(b.stop())
        loop.close()


def _forward(env: Any, principal: bytes | None, host: bytes) -> tuple[int, Any]:
    loop, b, routes = env
    name = f"fwd-{uuid.uuid4().hex[:6]}"
    inner = materialize(request_schema(19, 7), {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": -1, "assignments": [], "configs": []}],
        "timeout": 5000, "validate_only": False})
    body = materialize(request_schema(58, 0), {"request_data": encode_request(19, 7, 99, "client", inner)[4:],
                                               "request_principal": principal, "client_host_address": host})
    ctx = RequestContext(b.services, RequestHeader(58, 0, 1, "broker"), "127.0.0.1:1", {}, principal=BROKER)
    frame = loop.run_until_complete(routes[58].fn(ctx, body))
    _, resp = decode_envelope_response(frame[4:])
    if resp.response_data is None:
        return int(resp.error_code), None
    return int(resp.error_code), decode_response(19, 7, resp.response_data)[1].topics[0]


def test_inner_request_runs_under_the_forwarded_principal_and_host(env: Any) -> None:
    alice, bob = serialize_principal("User:alice"), serialize_principal("User:bob")
    code, topic = _forward(env, alice, bytes([10, 1, 1, 1]))
    assert code == ErrorCode.none and topic.error_code == ErrorCode.none
    # another principal, or alice from another host: the controller refuses the inner request
    code, topic = _forward(env, bob, bytes([10, 1, 1, 1]))
    assert code == ErrorCode.none and topic.error_code == ErrorCode.topic_authorization_failed
    code, topic = _forward(env, alice, bytes([10, 9, 9, 9]))
    assert code == ErrorCode.none and topic.error_code == ErrorCode.topic_authorization_failed


def test_a_broker_own_write_runs_under_the_broker_principal(env: Any) -> None:
    code, topic = _forward(env, None, b"")
    assert code == ErrorCode.none and topic.error_code == ErrorCode.none


def test_unreadable_principal_is_principal_deserialization_failure(env: Any) -> None:
    code, topic = _forward(env, b"\x00\x07garbage", b"")
    assert code == ErrorCode.principal_deserialization_failure and topic is None
