"""The SASL session against another implementation's clients: kafka-python's own PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER mechanism objects (the code its KafkaClient runs on
the wire) drive :class:`SaslSession` through handshake and authenticate, with
credentials created the way AlterUserScramCredentials creates them."""

from __future__ import annotations

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram

from hightide.cluster.image import MetadataImage
from hightide.cluster.security_control import ScramUpsertion, alter_scram_credentials
from hightide.protocol.errors import ErrorCode
from hightide.security.oauthbearer import unsecured_token
from hightide.security.scram import ScramMechanism, salted_password
from hightide.security.session import SaslServerConfig, SaslSession

NOW = 1_700_000_000_000


def _image_with(user: str, password: str) -> MetadataImage:
    image = MetadataImage()
    ups = [ScramUpsertion(user, m.type, 4096, b"NaCl-" + m.hash_name.encode(),
                          salted_password(m.hash_name, password, b"NaCl-" + m.hash_name.encode(), 4096))
           for m in ScramMechanism]
    # one request per mechanism: Kafka's controller takes one change per user per request
    for i, record in enumerate(alter_scram_credentials(image.security, [], ups[:1])[1]
                               + alter_scram_credentials(image.security, [], ups[1:])[1]):
        image.apply(record, i)
    return image


def _config(image: MetadataImage) -> SaslServerConfig:
    return SaslServerConfig(enabled=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
                            plain_users={"alice": "alice-secret"},
                            scram_lookup=lambda m, u: image.security.scram_credential(u, m.type),
                            max_reauth_ms=60_000)


def _drive(session: SaslSession, mechanism_name: str, client: object) -> tuple[ErrorCode, str | None]:
    assert session.handshake(1, mechanism_name, NOW).body["error_code"] == ErrorCode.none
    while not client.is_done():  # type: ignore[attr-defined]
        reply = session.authenticate(2, client.auth_bytes(), NOW)  # type: ignore[attr-defined]
        if reply.body["error_code"] != ErrorCode.none:
            return reply.body["error_code"], reply.body["error_message"]
        client.receive(reply.body["auth_bytes"])  # type: ignore[attr-defined]
    return ErrorCode.none, None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_scram_client(mechanism: str) -> None:
    image = _image_with("carol", "carol-secret")
    ok = SaslSession(_config(image))
    client = SaslMechanismScram(sasl_plain_username="carol", sasl_plain_password="carol-secret",
                                sasl_mechanism=mechanism)
    assert _drive(ok, mechanism, client) == (ErrorCode.none, None)  # kafka-python verified our signature
    assert ok.principal == "User:carol" and ok.session_expiry_ms == NOW + 60_000
    bad = SaslSession(_config(image))
    wrong = SaslMechanismScram(sasl_plain_username="carol", sasl_plain_password="nope", sasl_mechanism=mechanism)
    assert _drive(bad, mechanism, wrong) == (
        ErrorCode.sasl_authentication_failed,
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")


def test_kafka_python_plain_client() -> None:
    session = SaslSession(_config(MetadataImage()))
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    assert _drive(session, "PLAIN", client) == (ErrorCode.none, None) and client.is_authenticated()
    bad = SaslSession(_config(MetadataImage()))
    assert _drive(bad, "PLAIN", SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="x")) == (
        ErrorCode.sasl_authentication_failed, "Authentication failed: Invalid username or password")


class _Tokens(AbstractTokenProvider):
    def __init__(self, claims: dict) -> None:
        self.claims = claims

    def token(self) -> str:
        return unsecured_token(self.claims)

    def extensions(self) -> dict:
        return {"traceId": "abc"}


def test_kafka_python_oauthbearer_client() -> None:
    good = SaslSession(_config(MetadataImage()))
    client = SaslMechanismOAuth(sasl_oauth_token_provider=_Tokens({"sub": "svc", "exp": NOW / 1000 + 30}))
    assert _drive(good, "OAUTHBEARER", client) == (ErrorCode.none, None)
    assert good.principal == "User:svc" and good.session_expiry_ms == NOW + 30_000  # token expiry < reauth max
    expired = SaslSession(_config(MetadataImage()))
    code, message = _drive(expired, "OAUTHBEARER", SaslMechanismOAuth(
        sasl_oauth_token_provider=_Tokens({"sub": "svc", "exp": NOW / 1000 - 30})))
    assert code == ErrorCode.sasl_authentication_failed and message == '{"status":"invalid_token"}'
