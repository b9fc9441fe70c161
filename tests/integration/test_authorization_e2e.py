"""Authorization end to end (issue 17): ``hightide serve`` with the StandardAuthorizer, a
PLAINTEXT listener for the test's own admin (``User:ANONYMOUS`` is a super user there,
as Kafka set-ups with a plaintext inter-broker listener do) and a SASL_PLAINTEXT
listener with PLAIN users from ``listener.name.sasl_plaintext.plain.sasl.jaas.config``.

confluent-kafka as alice: a produce to a topic without a WRITE ACL fails with
TOPIC_AUTHORIZATION_FAILED and writes nothing; Metadata lists only the topics alice may
describe; a consumer group without READ on the group is refused.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from ..conftest import ServerProcess, free_port

pytestmark = pytest.mark.integration

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')


class Secured:
    def __init__(self, srv: ServerProcess, sasl_port: int) -> None:
        self.srv, self.sasl = srv, f"127.0.0.1:{sasl_port}"

    def client(self, user: str, password: str, **extra: str) -> dict[str, str]:
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": password, **extra}

    def end_offset(self, topic: str) -> int:
        c = Consumer({"bootstrap.servers": self.srv.bootstrap, "group.id": "probe"})
        try:
            return c.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10)[1]
        finally:
            c.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("authz")
    sasl_port = free_port()
    srv = ServerProcess(d / "data")
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{srv.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "auto.create.topics.enable": "false",
    }
    srv.args = tuple(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))
    srv.start()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in ("open-orders", "closed-ledger")]).values():
            fut.result(15)
        acls = [AclBinding(ResourceType.TOPIC, "open-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
        acls.append(AclBinding(ResourceType.TOPIC, "closed-ledger", ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.WRITE, AclPermissionType.DENY))
        for fut in admin.create_acls(acls).values():
            fut.result(15)
        yield Secured(srv, sasl_port)
    finally:
        code = srv.stop()
        assert code == 0, srv.output()[-4000:]
        assert "Traceback" not in srv.output(), srv.output()[-6000:]


def _produce(secured: Secured, topic: str) -> KafkaError | None:
    p = Producer(secured.client("alice", "alice-secret", **{"message.timeout.ms": "10000"}))
    result: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: result.append(err))
    p.flush(15)
    assert result, "no delivery report"
    return result[0]


def test_denied_produce_is_topic_authorization_failed_and_writes_nothing(secured: Secured) -> None:
    assert _produce(secured, "open-orders") is None
    err = _produce(secured, "closed-ledger")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert secured.end_offset("closed-ledger") == 0
    assert secured.end_offset("open-orders") >= 1


def test_metadata_hides_topics_alice_may_not_describe(secured: Secured) -> None:
    alice = AdminClient(secured.client("alice", "alice-secret"))
    listed = set(alice.list_topics(timeout=10).topics)
    assert "open-orders" in listed and "closed-ledger" not in listed  # a DENY WRITE does not allow DESCRIBE
    bob = AdminClient(secured.client("bob", "bob-secret"))
    assert not set(bob.list_topics(timeout=10).topics)  # no ACL at all: nothing listed
    named = alice.list_topics(topic="closed-ledger", timeout=10).topics["closed-ledger"]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consumer_needs_read_on_its_group(secured: Secured) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    assert _produce(secured, "open-orders") is None  # something to consume
    c = Consumer(secured.client("alice", "alice-secret", **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        c.subscribe(["open-orders"])
        msg = None
        for _ in range(20):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                break
        assert msg is not None and msg.error() is not None
        assert msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": secured.srv.bootstrap})
    for fut in admin.create_acls([AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice",
                                             "*", AclOperation.READ, AclPermissionType.ALLOW)]).values():
        fut.result(15)
    c = Consumer(secured.client("alice", "alice-secret", **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        c.subscribe(["open-orders"])
        got = None
        for _ in range(40):
            got = c.poll(0.5)
            if got is not None and got.error() is None:
                break
        assert got is not None and got.error() is None and got.value() == b"v"
    finally:
        c.close()


def test_wrong_password_is_refused(secured: Secured) -> None:
    admin = AdminClient(secured.client("alice", "wrong"))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)



def test_regex_subscription_is_resolved_with_the_members_describe_acls(secured: Secured) -> None:
    """A ConsumerGroupHeartbeat v1 whose SubscribedTopicRegex matches a topic alice may
    describe and one she may not: the broker resolves the regex with alice's ACLs and
    assigns only the first (Kafka's ``filterTopicDescribeAuthorizedTopics``; issue 26,
    item 10). Raw requests, so the regex is the broker's to resolve (librdkafka resolves a
    regex against its own, already filtered, metadata)."""
    import asyncio
    import datetime

    from hightide.client.connection import BrokerConnection
    from hightide.client.properties import ClientSecurity

    group = f"rx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secured.srv.bootstrap})
    for fut in admin.create_acls([AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice",
                                             "*", AclOperation.READ, AclPermissionType.ALLOW)]).values():
        fut.result(15)
    host, port = secured.sasl.split(":")

    async def go() -> set[str]:
        plain = BrokerConnection("127.0.0.1", secured.srv.port, request_timeout_s=10)
        await plain.connect()
        md = await plain.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
        names = {t.topic_id: t.name for t in md.topics}
        await plain.close()
        alice = BrokerConnection(host, int(port), request_timeout_s=10, security=ClientSecurity(
            protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="alice", password="alice-secret"))
        await alice.connect()
        member = uuid.uuid4().hex
        resp = await alice.request(68, 1, {
            "group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": datetime.timedelta(milliseconds=30000), "subscribed_topic_names": None,
            "subscribed_topic_regex": "^(open-orders|closed-ledger)$", "server_assignor": None,
            "topic_partitions": []})
        await alice.close()
        assert resp.error_code == 0, resp
        return {names[t.topic_id] for t in resp.assignment.topic_partitions}

    assert asyncio.run(go()) == {"open-orders"}


def test_regex_subscription_of_a_kip848_consumer_gets_only_describable_topics(secured: Secured) -> None:
    """confluent-kafka with group.protocol=consumer and a regex subscription over a topic
    alice may describe and one she may not: only the first is assigned."""
    import time
    group = f"rx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secured.srv.bootstrap})
    for fut in admin.create_acls([AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice",
                                             "*", AclOperation.READ, AclPermissionType.ALLOW)]).values():
        fut.result(15)
    c = Consumer(secured.client("alice", "alice-secret", **{"group.id": group, "group.protocol": "consumer",
                                                             "auto.offset.reset": "earliest"}))
    try:
        c.subscribe(["^(open-orders|closed-ledger)$"])
        assigned: set[str] = set()
        deadline = time.monotonic() + 30
        settled_at = None
        while time.monotonic() < deadline:
            c.poll(0.2)
            now = {tp.topic for tp in c.assignment()}
            if now != assigned:
                assigned, settled_at = now, time.monotonic()
            if assigned and settled_at is not None and time.monotonic() - settled_at > 3:
                break  # unchanged for a few heartbeats
        assert assigned == {"open-orders"}
    finally:
        c.close()
