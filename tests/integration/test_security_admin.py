"""ACL and SCRAM credential management against ``hightide serve`` with real clients:
confluent-kafka's AdminClient (create/describe/delete_acls,
alter/describe_user_scram_credentials) and kafka-python's KafkaAdminClient; the
credentials survive a restart (metadata log replay)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from ..conftest import ServerProcess

pytestmark = pytest.mark.integration


#: The ACL APIs answer SECURITY_DISABLED without an authorizer (as Kafka's): these tests
#: run a broker with the StandardAuthorizer, where the test's own User:ANONYMOUS is a
#: super user.
AUTHORIZER = ("--set", "authorizer.class.name=standard", "--set", "super.users=User:ANONYMOUS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("acls") / "data", args=AUTHORIZER).start()
    yield srv
    code = srv.stop()
    assert code == 0, srv.output()[-4000:]


def _principal() -> str:
    return f"User:u-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def _binding(principal: str, name: str, pattern=ResourcePatternType.LITERAL, op=AclOperation.READ,
             perm=AclPermissionType.ALLOW, rtype=ResourceType.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def _mine(principal: str) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def test_confluent_create_describe_delete_acls(admin):
    p = _principal()
    created = [_binding(p, "orders"), _binding(p, "app-", ResourcePatternType.PREFIXED, AclOperation.WRITE),
               _binding(p, "secret", perm=AclPermissionType.DENY),
               # confluent-kafka names resource type 4 (Kafka's CLUSTER) BROKER
               _binding(p, "kafka-cluster", op=AclOperation.ALTER, rtype=ResourceType.BROKER)]
    for f in admin.create_acls(created).values():
        assert f.result(10) is None
    got = admin.describe_acls(_mine(p)).result(10)
    assert sorted(map(str, got)) == sorted(map(str, created))
    # MATCH: every binding that applies to topic app-orders (the prefixed one)
    match = AclBindingFilter(ResourceType.TOPIC, "app-orders", ResourcePatternType.MATCH, p, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert [b.name for b in admin.describe_acls(match).result(10)] == ["app-"]
    deny_only = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, p, None, AclOperation.ANY,
                                 AclPermissionType.DENY)
    deleted = admin.delete_acls([deny_only])[deny_only].result(10)
    assert [b.name for b in deleted] == ["secret"]
    assert len(admin.describe_acls(_mine(p)).result(10)) == 3
    everything = _mine(p)
    assert len(admin.delete_acls([everything])[everything].result(10)) == 3
    assert admin.describe_acls(_mine(p)).result(10) == []


def test_confluent_create_acls_errors(admin):
    p = _principal()
    bad = _binding(p, "not-the-cluster", op=AclOperation.ALTER, rtype=ResourceType.BROKER)
    with pytest.raises(KafkaException) as exc:
        admin.create_acls([bad])[bad].result(10)
    assert "kafka-cluster" in str(exc.value)
    good = _binding(p, "t")
    admin.create_acls([good])[good].result(10)
    admin.create_acls([good])[good].result(10)  # creating it again succeeds, still one binding
    assert len(admin.describe_acls(_mine(p)).result(10)) == 1


def test_confluent_scram_credentials(admin):
    user = f"u{uuid.uuid4().hex[:8]}"
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"pw"),
           ]
    for f in admin.alter_user_scram_credentials(ups).values():
        assert f.result(10) is None
    desc = admin.describe_user_scram_credentials([user])[user].result(10)
    assert [(c.mechanism, c.iterations) for c in desc.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512,
                                                                                  8192)]
    all_users = admin.describe_user_scram_credentials().result(10)
    assert user in all_users
    # Too few iterations: UNACCEPTABLE_CREDENTIAL
    weak = UserScramCredentialUpsertion(user + "w", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    with pytest.raises(KafkaException) as exc:
        admin.alter_user_scram_credentials([weak])[user + "w"].result(10)
    assert exc.value.args[0].name() == "UNACCEPTABLE_CREDENTIAL"
    # Unknown user: RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException) as exc:
        admin.describe_user_scram_credentials(["nobody-" + user])["nobody-" + user].result(10)
    assert exc.value.args[0].name() == "RESOURCE_NOT_FOUND"
    # Deleting a credential that does not exist: RESOURCE_NOT_FOUND; deleting the real one works
    missing = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
    with pytest.raises(KafkaException) as exc:
        admin.alter_user_scram_credentials([missing])[user].result(10)
    assert exc.value.args[0].name() == "RESOURCE_NOT_FOUND"
    gone = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    assert admin.alter_user_scram_credentials([gone])[user].result(10) is None
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials([user])[user].result(10)


def test_kafka_python_acls_and_scram(server):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        p = _principal()
        acl = ACL(p, "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                  ResourcePattern(KResourceType.GROUP, "g-", ACLResourcePatternType.PREFIXED))
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter(p, None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))
        acls, error = client.describe_acls(flt)
        assert error.errno == 0 and [(a.resource_pattern.resource_name, a.operation) for a in acls] == [
            ("g-", ACLOperation.DESCRIBE)]
        deleted = client.delete_acls([flt])
        assert len(deleted[0][1]) == 1
        assert client.describe_acls(flt)[0] == []
        from kafka.admin import ScramMechanism as KScram
        from kafka.admin import UserScramCredentialUpsertion as KUpsert
        user = f"kp{uuid.uuid4().hex[:8]}"
        assert client.alter_user_scram_credentials([KUpsert(user, KScram.SCRAM_SHA_256, "pw", iterations=4096)]) == {
            user: None}
        info = client.describe_user_scram_credentials([user])[user]
        assert info["error"] is None and [c["iterations"] for c in info["credential_infos"]] == [4096]
    finally:
        client.close()


def test_acls_and_credentials_survive_restart(fresh_server, tmp_path):
    srv = fresh_server(*AUTHORIZER)
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    p = _principal()
    b = _binding(p, "durable", ResourcePatternType.PREFIXED)
    admin.create_acls([b])[b].result(10)
    up = UserScramCredentialUpsertion("durable-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"x")
    admin.alter_user_scram_credentials([up])["durable-user"].result(10)
    port = srv.port
    assert srv.stop() == 0
    srv2 = fresh_server(*AUTHORIZER, port=port)
    admin2 = AdminClient({"bootstrap.servers": srv2.bootstrap})
    assert [x.name for x in admin2.describe_acls(_mine(p)).result(10)] == ["durable"]
    desc = admin2.describe_user_scram_credentials(["durable-user"])["durable-user"].result(10)
    assert [c.iterations for c in desc.scram_credential_infos] == [4096]


def test_sasl_requests_on_a_plaintext_listener_are_illegal_sasl_state(server):
    """Kafka's KafkaApis answer on a listener without SASL; both are advertised."""
    from kio.schema.errors import ErrorCode

    from ..rawkafka import RawClient
    with RawClient(server.bootstrap) as raw:
        versions = raw.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        keys = {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2)  # v0 listed for librdkafka (docs/security.md)
        assert raw.request(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.illegal_sasl_state
        auth = raw.request(36, 2, {"auth_bytes": b"\x00a\x00b"})
        assert auth.error_code == ErrorCode.illegal_sasl_state
        assert auth.error_message == "SaslAuthenticate request received after successful authentication"
