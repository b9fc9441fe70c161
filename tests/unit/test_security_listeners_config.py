"""Listener security settings from Kafka's config names (hightide.security.listeners):
the protocol map, listener-scoped ssl.* values, principal mapping rules, and the broker
config accepting them (secrets kept out of the described originals)."""

from __future__ import annotations

import pytest

from hightide.config import BrokerConfig, ConfigError
from hightide.security.listeners import (
    ListenerConfigError,
    NoMatchingRule,
    listener_protocol,
    map_principal,
    parse_principal_rules,
    protocol_map,
    tls_settings,
)


def test_protocol_map_defaults_and_explicit():
    assert listener_protocol({}, "SASL_SSL") == "SASL_SSL"
    assert listener_protocol({}, "CONTROLLER", ("CONTROLLER",)) == "PLAINTEXT"  # KRaft: controller listeners
    with pytest.raises(ListenerConfigError, match="No security protocol defined for listener INTERNAL"):
        listener_protocol({}, "INTERNAL")
    cfg = {"listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT, external:ssl"}
    assert protocol_map(cfg) == {"INTERNAL": "SASL_PLAINTEXT", "EXTERNAL": "SSL"}
    assert listener_protocol(cfg, "external") == "SSL"
    with pytest.raises(ListenerConfigError, match="invalid entry 'A:TLS'"):
        protocol_map({"listener.security.protocol.map": "A:TLS"})


def test_tls_settings_listener_prefix_wins_and_errors_name_the_setting():
    cfg = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/ca.pem",
           "listener.name.mtls.ssl.client.auth": "required", "ssl.client.auth": "none"}
    assert tls_settings(cfg, "MTLS").client_auth == "required"
    assert tls_settings(cfg, "OTHER").client_auth == "none"
    with pytest.raises(ListenerConfigError, match="has no certificate"):
        tls_settings({}, "SSL")
    with pytest.raises(ListenerConfigError, match="PEM only"):
        tls_settings({**cfg, "ssl.keystore.type": "JKS"}, "SSL")
    with pytest.raises(ListenerConfigError, match="must be one of required, requested, none"):
        tls_settings({**cfg, "ssl.client.auth": "always"}, "SSL")
    with pytest.raises(ListenerConfigError, match="needs ssl.truststore.location"):
        tls_settings({"ssl.keystore.location": "/k.pem", "ssl.client.auth": "requested"}, "SSL")


# The DN's printing (Java's X500Principal.getName()) is tested in test_tls_principal.py.


def test_principal_mapping_rules():
    rules = parse_principal_rules("RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/L, RULE:^CN=([^,]*).*$/$1/U,DEFAULT")
    assert map_principal("CN=Alice,OU=Eng,O=Example", rules) == "alice@eng"
    assert map_principal("CN=bob,O=x", rules) == "BOB"
    assert map_principal("OU=only", rules) == "OU=only"  # DEFAULT: the DN itself
    with pytest.raises(NoMatchingRule):
        map_principal("OU=only", rules[:2])
    assert parse_principal_rules("") == (("DEFAULT", "", "", ""),)
    for bad in ("RULE:oops", "DEFAULT junk", "RULE:(/x/"):
        with pytest.raises(ListenerConfigError):
            parse_principal_rules(bad)


def test_broker_config_accepts_security_names_and_keeps_secrets_out_of_originals():
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="pw";'
    cfg = BrokerConfig.load(overrides={"listener.security.protocol.map": "A:SASL_SSL",
                                       "listener.name.a.plain.sasl.jaas.config": jaas,
                                       "ssl.key.password": "pw", "sasl.enabled.mechanisms": "PLAIN",
                                       "ssl.keystore.location": "/k.pem"})
    assert cfg.security_values["listener.name.a.plain.sasl.jaas.config"] == jaas
    assert cfg.originals["ssl.keystore.location"] == "/k.pem"
    assert "listener.name.a.plain.sasl.jaas.config" not in cfg.originals and "ssl.key.password" not in cfg.originals
    with pytest.raises(ConfigError, match="Unknown broker configuration 'ssl.keystore.locaton'"):
        BrokerConfig.load(overrides={"ssl.keystore.locaton": "/k.pem"})


def test_serve_refuses_a_listener_it_cannot_secure_in_one_line(tmp_path):
    from click.testing import CliRunner

    from hightide.cli import main
    for settings, message in (
            (["listeners=SSL://127.0.0.1:0"], "listener SSL uses TLS but has no certificate"),
            (["listeners=SSL://127.0.0.1:0", f"ssl.keystore.location={tmp_path}/missing.pem"],
             "TLS material of listener SSL cannot be loaded"),
            (["listeners=SASL_PLAINTEXT://127.0.0.1:0"], "GSSAPI not supported"),
            (["listeners=INTERNAL://127.0.0.1:0"], "No security protocol defined for listener INTERNAL")):
        args = ["serve", "--data-dir", str(tmp_path / "data")]
        for s in settings:
            args += ["--set", s]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, r.output


def test_inter_broker_and_controller_client_security():
    from hightide.server.listener_security import controller_client_security, inter_broker_client
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="pw";')
    cfg = {"listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SSL,CONTROLLER:SASL_PLAINTEXT",
           "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
           "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas,
           "listener.name.internal.ssl.truststore.location": "/ca.pem",
           "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
           "listener.name.controller.scram-sha-512.sasl.jaas.config": jaas}
    name, sec = inter_broker_client(cfg, ("INTERNAL", "EXTERNAL"), ("CONTROLLER",))
    assert name == "INTERNAL" and sec is not None
    assert (sec.protocol, sec.mechanism, sec.username, sec.password, sec.ca_file) == (
        "SASL_SSL", "SCRAM-SHA-512", "broker", "pw", "/ca.pem")
    ctl = controller_client_security(cfg, ("CONTROLLER",))
    assert ctl is not None and (ctl.protocol, ctl.mechanism, ctl.username) == ("SASL_PLAINTEXT", "SCRAM-SHA-512",
                                                                               "broker")
    assert inter_broker_client({}, ("PLAINTEXT",), ()) == ("PLAINTEXT", None)
    with pytest.raises(ValueError, match="inter.broker.listener.name=NOPE is not one of"):
        inter_broker_client({"inter.broker.listener.name": "NOPE"}, ("PLAINTEXT",), ())
    with pytest.raises(ValueError, match="sasl.mechanism=GSSAPI"):  # Kafka's default mechanism is not offered
        controller_client_security({"listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT"}, ("CONTROLLER",))
