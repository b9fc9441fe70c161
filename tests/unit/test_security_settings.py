"""Security settings from Kafka's config names (what the listener wiring will read)."""

from __future__ import annotations

import pytest

from hightide.security.oauthbearer import unsecured_token
from hightide.security.session import SaslSession
from hightide.security.settings import authorizer_settings, sasl_server_config

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" '
         'user_admin="a" user_alice="alice-secret";')


def test_listener_sasl_config() -> None:
    cfg = sasl_server_config("SASL_PLAINTEXT", {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            "unsecuredValidatorRequiredScope=\"produce consume\" unsecuredValidatorAllowableClockSkewMs=\"500\";",
        "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": "2000",
        "connections.max.reauth.ms": "60000",
        "connection.failed.authentication.delay.ms": "250",
    }, lambda m, u: None)
    assert cfg.enabled == ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER")
    assert cfg.plain_users == {"admin": "a", "alice": "alice-secret"}
    assert cfg.oauth_validator.required_scope == ("produce", "consume")
    assert cfg.oauth_validator.allowable_clock_skew_ms == 500
    assert cfg.failed_auth_delay_ms == 250 and cfg.max_receive_size == 524288
    s = SaslSession(cfg)
    s.handshake(1, "OAUTHBEARER", 0)
    token = unsecured_token({"sub": "svc", "exp": 3600, "scope": "produce consume"})
    assert s.authenticate(2, f"n,,\x01auth=Bearer {token}\x01\x01".encode(), 0).body["session_lifetime"] == 2000
    p = SaslSession(cfg)
    p.handshake(1, "PLAIN", 0)
    assert p.authenticate(2, b"\x00alice\x00alice-secret", 0).body["session_lifetime"] == 60000


def test_listener_override_of_mechanisms_and_errors() -> None:
    base = {"sasl.enabled.mechanisms": "PLAIN", "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    assert sasl_server_config("INTERNAL", base, lambda m, u: None).enabled == ("SCRAM-SHA-256",)
    with pytest.raises(ValueError, match="PLAIN is enabled on listener EXTERNAL"):
        sasl_server_config("EXTERNAL", base, lambda m, u: None)
    with pytest.raises(ValueError, match="GSSAPI"):
        sasl_server_config("EXTERNAL", {}, lambda m, u: None)  # Kafka's default GSSAPI is not offered
    with pytest.raises(ValueError, match="sasl.jaas.config"):
        sasl_server_config("X", {"sasl.enabled.mechanisms": "PLAIN",
                                 "listener.name.x.plain.sasl.jaas.config": "broken"}, lambda m, u: None)


def test_authorizer_settings() -> None:
    assert authorizer_settings({}) == (frozenset(), False)
    assert authorizer_settings({"super.users": "User:admin; User:ops", "allow.everyone.if.no.acl.found": "true"}) == (
        frozenset({"User:admin", "User:ops"}), True)
    with pytest.raises(ValueError):
        authorizer_settings({"super.users": "admin"})
    with pytest.raises(ValueError):
        authorizer_settings({"allow.everyone.if.no.acl.found": "maybe"})
