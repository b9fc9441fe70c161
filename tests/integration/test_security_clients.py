"""hightide's own client tools over TLS and SASL (issue 17): every operator command takes
``--command-config FILE`` with Kafka client property names; the admin client speaks
PLAIN, SCRAM-SHA-256/512, unsecured OAUTHBEARER and mTLS; Spark's KafkaIO takes the same
security. Against a ``hightide serve`` with PLAINTEXT (the test's admin), SASL_SSL and
SSL (client certificates required) listeners and the StandardAuthorizer."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient as CAdmin
from confluent_kafka.admin import NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from hightide.cli import main
from hightide.client import AdminClient
from hightide.client.errors import KafkaError
from hightide.client.properties import ClientSecurity, load_properties

from ..conftest import ServerProcess, free_port
from .tls_certs import Certs, make_certs

pytestmark = pytest.mark.integration

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'


class Secure:
    def __init__(self, srv: ServerProcess, certs: Certs, ports: dict[str, int], d: Path) -> None:
        self.srv, self.certs, self.ports, self.dir = srv, certs, ports, d

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def properties(self, name: str, **props: str) -> str:
        path = self.dir / f"{name}-{uuid.uuid4().hex[:6]}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return str(path)

    def scram(self, password: str = "alice-secret", mechanism: str = "SCRAM-SHA-512") -> str:
        return self.properties("scram", **{"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                                           "sasl.jaas.config": SCRAM_JAAS.format(password),
                                           "ssl.truststore.location": str(self.certs.ca)})

    def mtls(self) -> str:
        c = self.certs
        return self.properties("mtls", **{"security.protocol": "SSL", "ssl.truststore.location": str(c.ca),
                                          "ssl.keystore.location": str(c.client_cert.parent / "client.pem")})


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    d = tmp_path_factory.mktemp("clients")
    certs = make_certs(d / "certs")
    ports = {"SASL_SSL": free_port(), "SSL": free_port()}
    srv = ServerProcess(d / "data")
    ports["PLAINTEXT"] = srv.port
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="bob-secret";',
        "ssl.keystore.location": str(certs.server), "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "authorizer.class.name": "standard",
        "super.users": "User:ANONYMOUS;User:alice;User:bob;User:carol;User:CN=alice,OU=eng,O=Example",
    }
    srv.args = tuple(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))
    srv.start()
    try:
        admin = CAdmin({"bootstrap.servers": srv.bootstrap})
        for m in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            up = UserScramCredentialUpsertion("alice", ScramCredentialInfo(m, 4096), b"alice-secret")
            for fut in admin.alter_user_scram_credentials([up]).values():
                fut.result(15)
        admin.create_topics([NewTopic("secured", 2, 1)])["secured"].result(15)
        (d / "certs" / "client.pem").write_text(certs.client_cert.read_text() + certs.client_key.read_text())
        yield Secure(srv, certs, ports, d)
    finally:
        code = srv.stop()
        assert code == 0, srv.output()[-4000:]
        assert "alice-secret" not in srv.output() and "bob-secret" not in srv.output()


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", [("topics", "list"), ("users", "--describe"), ("acls", "--list"),
                                     ("groups", "list"), ("brokers",), ("offsets", "secured"),
                                     ("lag", "watch", "--iterations", "1", "--interval", "0.1")])
def test_operator_commands_take_command_config(secure, command):
    config = secure.scram()
    r = _cli(*command, "-b", secure.addr("SASL_SSL"), "--command-config", config)
    assert r.exit_code == 0, r.output
    if command == ("topics", "list"):
        assert "secured" in r.output
    if command == ("users", "--describe"):
        assert "user-principal 'alice'" in r.output
    # without it the SASL_SSL listener is not spoken to
    r = _cli(*command, "-b", secure.addr("SASL_SSL"))
    assert r.exit_code != 0


def test_command_config_with_a_wrong_password_fails_with_kafkas_message(secure):
    r = _cli("topics", "list", "-b", secure.addr("SASL_SSL"), "--command-config", secure.scram("nope"))
    assert r.exit_code == 1
    assert "SASL_AUTHENTICATION_FAILED" in r.output and "invalid credentials" in r.output
    assert "nope" not in r.output


def test_command_config_mtls_and_environment_variable(secure, monkeypatch):
    monkeypatch.setenv("HIGHTIDE_COMMAND_CONFIG", secure.mtls())
    r = _cli("topics", "list", "-b", secure.addr("SSL"))
    assert r.exit_code == 0 and "secured" in r.output, r.output


def test_bad_command_config_is_a_usage_error(secure):
    path = secure.properties("bad", **{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"})
    r = _cli("topics", "list", "-b", secure.addr("SASL_SSL"), "--command-config", path)
    assert r.exit_code == 2 and "sasl.mechanism=GSSAPI is not supported" in r.output


@pytest.mark.parametrize("mechanism,user,password", [("PLAIN", "bob", "bob-secret"),
                                                     ("SCRAM-SHA-256", "alice", "alice-secret"),
                                                     ("SCRAM-SHA-512", "alice", "alice-secret"),
                                                     ("OAUTHBEARER", "carol", "")])
def test_admin_client_mechanisms(secure, mechanism, user, password):
    sec = ClientSecurity(protocol="SASL_SSL", mechanism=mechanism, username=user, password=password,
                         ca_file=str(secure.certs.ca))

    async def go() -> list[str]:
        async with AdminClient(secure.addr("SASL_SSL"), security=sec) as admin:
            return sorted((await admin.metadata()).topics)
    assert "secured" in asyncio.run(go())


def test_admin_client_refused_without_trusting_the_broker_certificate(secure):
    sec = ClientSecurity.from_properties(load_properties(secure.scram()))
    untrusted = ClientSecurity(**{**sec.__dict__, "ca_file": str(secure.certs.other_cert)})

    async def go() -> None:
        async with AdminClient(secure.addr("SASL_SSL"), security=untrusted, request_timeout_s=5):
            pass
    with pytest.raises(KafkaError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(go())


def test_spark_kafkaio_over_sasl_ssl(secure):
    from hightide.spark.kafkaio import KafkaIO
    from hightide.spark.options import SourceOptions
    opts = SourceOptions.parse({"kafka.bootstrap.servers": secure.addr("SASL_SSL"), "subscribe": "secured",
                                "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                                "kafka.sasl.jaas.config": SCRAM_JAAS.format("alice-secret"),
                                "kafka.ssl.truststore.location": str(secure.certs.ca)}, streaming=False)
    with KafkaIO(opts.bootstrap_servers, security=opts.security) as io:
        assert io.partitions(["secured"]) == {"secured": [0, 1]}


def test_exporter_over_sasl_ssl(secure):
    """The exporter with --command-config's options scrapes a SASL_SSL cluster; without
    them it reports the cluster down (hightide_exporter_up 0)."""
    from hightide.client.properties import admin_options_from
    from hightide.monitoring.exporter import Exporter
    options, _, _ = admin_options_from(secure.scram())

    async def scrape(client_options: dict) -> str:
        ex = Exporter(secure.addr("SASL_SSL"), client_options=client_options, scrape_timeout_s=8.0)
        try:
            return (await ex.render()).decode()
        finally:
            await ex.stop()
    up = asyncio.run(scrape(options))
    assert "hightide_exporter_up 1.0" in up and 'topic="secured"' in up
    assert "hightide_exporter_up 0.0" in asyncio.run(scrape({}))


def test_spark_sample_offsets_command_takes_command_config(secure, tmp_path):
    pytest.importorskip("pyarrow")
    r = _cli("spark", "sample-offsets", "-b", secure.addr("SASL_SSL"), "--command-config", secure.scram(),
             "--out", str(tmp_path / "samples"), "--topic", "secured", "--count", "1")
    assert r.exit_code == 0, r.output
    assert '"partitions": 2' in r.output
