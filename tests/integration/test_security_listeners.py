"""Security listeners against ``hightide serve`` with real clients (issue 17).

One broker with four listeners: PLAINTEXT (the test's own admin, User:ANONYMOUS is a
super user there), SASL_SSL (SCRAM-SHA-512 and PLAIN), SSL with ``ssl.client.auth=required``
(the principal is the client certificate's DN) and SASL_PLAINTEXT (SCRAM-SHA-256 with a
3 s re-authentication lifetime, for the raw-protocol tests). The StandardAuthorizer is on,
so the mTLS principal is observable: it may write only the topics its ACLs name.

Shown here: confluent-kafka, kafka-python, aiokafka and kcat over SASL_SSL with
SCRAM-SHA-512 and over mTLS; a wrong password, a wrong mechanism, a client that skips
authentication and sends Produce, an untrusted or missing client certificate: refused,
nothing written; an expired session (KIP-368) is closed, a re-authenticated one lives on;
a slow client that never finishes authenticating (or the TLS handshake) is cut off.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from hightide.client.connection import BrokerConnection
from hightide.client.errors import KafkaConnectionError, KafkaError
from hightide.client.properties import ClientSecurity
from hightide.protocol.codec import encode_request
from hightide.protocol.records import build_batch
from ..conftest import ServerProcess, free_port
from .tls_certs import Certs, make_certs

pytestmark = pytest.mark.integration

DN_PRINCIPAL = "User:CN=alice,OU=eng,O=Example"
ALICE, BOB = ("alice", "alice-secret"), ("bob", "bob-secret")
REAUTH_MS = 3000
METADATA = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
AUTH_TIMEOUT_MS = 1500


class SecureBroker:
    def __init__(self, srv: ServerProcess, certs: Certs, ports: dict[str, int]) -> None:
        self.srv, self.certs, self.ports = srv, certs, ports

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def end_offset(self, topic: str) -> int:
        c = Consumer({"bootstrap.servers": self.srv.bootstrap, "group.id": "probe"})
        try:
            return c.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10)[1]
        finally:
            c.close()

    def create_topic(self, name: str) -> str:
        admin = AdminClient({"bootstrap.servers": self.srv.bootstrap})
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
        return name


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("secure")
    certs = make_certs(d / "certs")
    ports = {name: free_port() for name in ("SASL_SSL", "SSL", "SASL_PLAINTEXT")}
    plain = ServerProcess(d / "data")
    ports["PLAINTEXT"] = plain.port
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    settings = {
        "listeners": listeners,
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="bob-secret";',
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": str(REAUTH_MS),
        "connections.authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "authorizer.class.name": "standard",
        "super.users": "User:ANONYMOUS;User:alice;User:bob",
    }
    args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    plain.args = tuple(args)
    plain.start()
    try:
        admin = AdminClient({"bootstrap.servers": plain.bootstrap})
        upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(m, 4096), b"alice-secret")
                   for m in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256)]
        for fut in admin.alter_user_scram_credentials(upserts[:1]).values():
            fut.result(15)
        for fut in admin.alter_user_scram_credentials(upserts[1:]).values():
            fut.result(15)
        carol = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                             b"carol-secret")
        for fut in admin.alter_user_scram_credentials([carol]).values():
            fut.result(15)
        acls = [AclBinding(ResourceType.TOPIC, "mtls-", ResourcePatternType.PREFIXED, DN_PRINCIPAL, "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
        acls.append(AclBinding(ResourceType.GROUP, "mtls-", ResourcePatternType.PREFIXED, DN_PRINCIPAL, "*",
                               AclOperation.READ, AclPermissionType.ALLOW))
        for fut in admin.create_acls(acls).values():
            fut.result(15)
        yield SecureBroker(plain, certs, ports)
    finally:
        code = plain.stop()
        out = plain.output()
        assert code == 0, out[-4000:]
        assert "Traceback" not in out, out[-6000:]
        for secret in ("alice-secret", "bob-secret"):
            assert secret not in out  # never logged


def _topic(prefix: str = "sec") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- the four clients --------------------------------------------------------------------------

def _librdkafka_props(broker: SecureBroker, kind: str) -> dict[str, str]:
    c = broker.certs
    if kind == "scram":
        return {"bootstrap.servers": broker.addr("SASL_SSL"), "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ALICE[0], "sasl.password": ALICE[1],
                "ssl.ca.location": str(c.ca)}
    return {"bootstrap.servers": broker.addr("SSL"), "security.protocol": "SSL", "ssl.ca.location": str(c.ca),
            "ssl.certificate.location": str(c.client_cert), "ssl.key.location": str(c.client_key)}


def _kafka_python_args(broker: SecureBroker, kind: str) -> dict:
    c = broker.certs
    if kind == "scram":
        return dict(bootstrap_servers=broker.addr("SASL_SSL"), security_protocol="SASL_SSL",
                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ALICE[0], sasl_plain_password=ALICE[1],
                    ssl_cafile=str(c.ca))
    return dict(bootstrap_servers=broker.addr("SSL"), security_protocol="SSL", ssl_cafile=str(c.ca),
                ssl_certfile=str(c.client_cert), ssl_keyfile=str(c.client_key))


def _roundtrip_confluent(broker: SecureBroker, kind: str, topic: str) -> list[bytes]:
    props = _librdkafka_props(broker, kind)
    p = Producer(props)
    errors: list = []
    for i in range(3):
        p.produce(topic, f"m{i}".encode(), callback=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0 and errors == [None] * 3
    c = Consumer({**props, "group.id": f"mtls-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def _roundtrip_kafka_python(broker: SecureBroker, kind: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    args = _kafka_python_args(broker, kind)
    p = KafkaProducer(**args)
    for i in range(3):
        p.send(topic, f"m{i}".encode()).get(20)
    p.close()
    c = KafkaConsumer(topic, group_id=f"mtls-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                      consumer_timeout_ms=8000, **args)
    got = [m.value for m in c]
    c.close()
    return got


def _roundtrip_aiokafka(broker: SecureBroker, kind: str, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    c = broker.certs
    if kind == "scram":
        args = dict(bootstrap_servers=broker.addr("SASL_SSL"), security_protocol="SASL_SSL",
                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ALICE[0], sasl_plain_password=ALICE[1],
                    ssl_context=create_ssl_context(cafile=str(c.ca)))
    else:
        args = dict(bootstrap_servers=broker.addr("SSL"), security_protocol="SSL",
                    ssl_context=create_ssl_context(cafile=str(c.ca), certfile=str(c.client_cert),
                                                   keyfile=str(c.client_key)))

    async def go() -> list[bytes]:
        p = AIOKafkaProducer(**args)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait(topic, f"m{i}".encode())
        finally:
            await p.stop()
        cons = AIOKafkaConsumer(topic, group_id=f"mtls-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest", **args)
        await cons.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in cons:
                    got.append(m.value)
                    if len(got) == 3:
                        break
        finally:
            await cons.stop()
        return got
    return asyncio.run(go())


def _roundtrip_kcat(broker: SecureBroker, kind: str, topic: str) -> list[bytes]:
    props = _librdkafka_props(broker, kind)
    x = [a for k, v in props.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", props["bootstrap.servers"], *x, "-t", topic]
    subprocess.run([*base, "-P"], input=b"m0\nm1\nm2\n", check=True, timeout=30, capture_output=True)
    out = subprocess.run([*base, "-C", "-o", "beginning", "-c", "3", "-e"], check=True, timeout=30,
                         capture_output=True).stdout
    return out.split()


CLIENTS = {"confluent-kafka": _roundtrip_confluent, "kafka-python": _roundtrip_kafka_python,
           "aiokafka": _roundtrip_aiokafka, "kcat": _roundtrip_kcat}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_scram_sha512_over_sasl_ssl(broker, client):
    topic = broker.create_topic(_topic())
    assert CLIENTS[client](broker, "scram", topic) == [b"m0", b"m1", b"m2"]
    assert broker.end_offset(topic) == 3


@pytest.mark.parametrize("client", list(CLIENTS))
def test_mutual_tls_principal_is_the_certificate_dn(broker, client):
    # The DN principal's ACLs allow topics and groups starting with mtls- (nothing else).
    topic = broker.create_topic(_topic("mtls"))
    assert CLIENTS[client](broker, "mtls", topic) == [b"m0", b"m1", b"m2"]
    assert broker.end_offset(topic) == 3


def test_mtls_principal_gets_only_what_its_acls_allow(broker):
    other = broker.create_topic(_topic("other"))
    p = Producer({**_librdkafka_props(broker, "mtls"), "message.timeout.ms": 10000})
    errors: list = []
    p.produce(other, b"x", callback=lambda err, msg: errors.append(err))
    p.flush(15)
    assert len(errors) == 1 and errors[0] is not None and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    assert broker.end_offset(other) == 0


def test_mtls_dn_with_email_address_is_printed_as_java_prints_it(broker, tmp_path):
    """A certificate whose subject carries emailAddress (an attribute outside Java's RFC
    2253 keywords): the principal is Java's ``1.2.840.113549.1.9.1=#16...`` form, so an
    ACL written for Kafka applies (issue 26, item 9)."""
    from .tls_certs import _leaf
    d = broker.certs.ca.parent
    _leaf(d, "erin", "/O=Example/CN=erin/emailAddress=erin@example.com", "ca.crt", "ca.key",
          "extendedKeyUsage=clientAuth\n")
    email = b"erin@example.com"
    principal = f"User:1.2.840.113549.1.9.1=#16{len(email):02x}{email.hex()},CN=erin,O=Example"
    admin = AdminClient({"bootstrap.servers": broker.srv.bootstrap})
    acl = AclBinding(ResourceType.TOPIC, "erin-", ResourcePatternType.PREFIXED, principal, "*", AclOperation.WRITE,
                     AclPermissionType.ALLOW)
    for fut in admin.create_acls([acl]).values():
        fut.result(15)
    topic = broker.create_topic(_topic("erin"))
    props = {**_librdkafka_props(broker, "mtls"), "ssl.certificate.location": str(d / "erin.crt"),
             "ssl.key.location": str(d / "erin.key"), "message.timeout.ms": 15000}
    p = Producer(props)
    errors: list = []
    p.produce(topic, b"x", callback=lambda err, msg: errors.append(err))
    p.flush(20)
    assert errors == [None]
    assert broker.end_offset(topic) == 1


# -- refused ------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["wrong-password", "unknown-user", "wrong-mechanism", "plain-wrong-password"])
def test_failed_authentication_is_refused_and_nothing_is_written(broker, case):
    topic = broker.create_topic(_topic())
    props = _librdkafka_props(broker, "scram")
    if case == "wrong-password":
        props["sasl.password"] = "not-the-password"
    elif case == "unknown-user":
        props["sasl.username"] = "mallory"
    elif case == "wrong-mechanism":
        props["sasl.mechanism"] = "SCRAM-SHA-256"  # enabled on another listener only
    else:
        props.update({"sasl.mechanism": "PLAIN", "sasl.username": BOB[0], "sasl.password": "guess"})
    errors: list = []
    p = Producer({**props, "message.timeout.ms": 4000, "error_cb": errors.append})
    p.produce(topic, b"must not be written")
    p.flush(10)
    assert errors and errors[0].name() in ("_AUTHENTICATION", "_ALL_BROKERS_DOWN", "_TRANSPORT"), errors
    if case != "wrong-mechanism":
        assert any("Authentication failed" in e.str() for e in errors), errors
    assert broker.end_offset(topic) == 0


def _security(broker: SecureBroker, mechanism: str, user: tuple[str, str] = ALICE) -> ClientSecurity:
    return ClientSecurity(protocol="SASL_PLAINTEXT", mechanism=mechanism, username=user[0], password=user[1])


def _produce_body(topic: str) -> dict:
    batch = build_batch([(None, b"sneaked in", [], int(time.time() * 1000))])
    return {"transactional_id": None, "acks": 1, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def test_produce_without_authentication_is_refused(broker):
    """ApiVersions is served before authentication; a Produce sent instead of the SASL
    handshake closes the connection unanswered (Kafka: "Unexpected Kafka request of type
    PRODUCE during SASL handshake"), and nothing is written."""
    topic = broker.create_topic(_topic())
    host, port = "127.0.0.1", broker.ports["SASL_PLAINTEXT"]

    async def go() -> None:
        conn = BrokerConnection(host, port, request_timeout_s=10)
        await conn.connect()  # ApiVersions only
        assert conn.supports(17) and conn.supports(36)
        with pytest.raises(KafkaConnectionError):
            await conn.request(0, 9, _produce_body(topic))
        await conn.close()
        # after the handshake but before SaslAuthenticate: refused as well
        conn = BrokerConnection(host, port, request_timeout_s=10)
        await conn.connect()
        resp = await conn.request(17, 1, {"mechanism": "SCRAM-SHA-512"})
        assert resp.error_code == 0 and list(resp.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        with pytest.raises(KafkaConnectionError):
            await conn.request(0, 9, _produce_body(topic))
        await conn.close()
    asyncio.run(go())
    assert broker.end_offset(topic) == 0


def test_hightide_client_failures_carry_kafkas_codes(broker):
    async def go() -> None:
        conn = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10,
                                security=_security(broker, "SCRAM-SHA-512", ("alice", "wrong")))
        with pytest.raises(KafkaError) as exc:
            await conn.connect()
        assert exc.value.code == 58 and "invalid credentials" in str(exc.value)  # SASL_AUTHENTICATION_FAILED
        conn = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10,
                                security=_security(broker, "PLAIN", BOB))
        with pytest.raises(KafkaError) as exc:
            await conn.connect()
        assert exc.value.code == 33  # UNSUPPORTED_SASL_MECHANISM: PLAIN is not enabled on this listener
    asyncio.run(go())


# -- KIP-368 re-authentication ------------------------------------------------------------------

def test_expired_session_is_closed_and_reauthentication_keeps_it(broker):
    async def go() -> None:
        sec = _security(broker, "SCRAM-SHA-256")
        expiring = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10, security=sec)
        renewed = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10, security=sec)
        await expiring.connect()
        await renewed.connect()
        expiring._reauth_at = renewed._reauth_at = None  # behave as clients without KIP-368 support
        started = time.monotonic()
        for conn in (expiring, renewed):
            await conn.request(3, 12, METADATA)
        # half-way through its lifetime the renewed connection re-authenticates (SaslHandshake +
        # SaslAuthenticate v1): a new lifetime from then on
        await asyncio.sleep(REAUTH_MS / 2000)
        await renewed._authenticate(sec)
        # past the first lifetime (both connections authenticated before `started`), within the renewed one
        await asyncio.sleep(max(0.0, REAUTH_MS / 1000 * 1.2 - (time.monotonic() - started)))
        with pytest.raises(KafkaConnectionError):
            await expiring.request(3, 12, METADATA)
        md = await renewed.request(3, 12, METADATA)
        assert md.brokers
        await expiring.close()
        await renewed.close()
    asyncio.run(go())


def test_reauthentication_cannot_change_the_principal(broker):
    """Kafka: "Cannot change principals during re-authentication"; the connection closes."""
    async def go() -> None:
        conn = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10,
                                security=_security(broker, "SCRAM-SHA-512"))
        await conn.connect()
        with pytest.raises(KafkaError) as exc:
            await conn._authenticate(_security(broker, "SCRAM-SHA-512", ("carol", "carol-secret")))
        assert exc.value.code == 58 and "Cannot change principals during re-authentication" in str(exc.value)
        with pytest.raises(KafkaConnectionError):
            await conn.request(3, 12, METADATA)
        await conn.close()
    asyncio.run(go())


# -- slow clients ----------------------------------------------------------------------------------

def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the peer closed ``sock`` (recv returns b"" or the connection resets)."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    return time.monotonic() - start


def test_slow_loris_sasl_client_is_cut_off(broker):
    """A client that trickles a SaslHandshake one byte at a time (each byte resets any
    idle timer) is closed once connections.authentication.timeout.ms has passed."""
    frame = encode_request(17, 1, 1, "slow", _handshake_body())
    sock = socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]))
    start = time.monotonic()
    closed = False
    try:
        for b in frame[:-1]:
            try:
                sock.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.1)
            if time.monotonic() - start > AUTH_TIMEOUT_MS / 1000 * 3:
                break
        if not closed:
            sock.settimeout(5)
            closed = sock.recv(1) == b""
    except ConnectionResetError:
        closed = True
    finally:
        sock.close()
    elapsed = time.monotonic() - start
    assert closed and AUTH_TIMEOUT_MS / 1000 * 0.9 <= elapsed < AUTH_TIMEOUT_MS / 1000 * 3, elapsed


def _handshake_body():
    from hightide.protocol.build import materialize
    from hightide.protocol.codec import request_schema
    return materialize(request_schema(17, 1), {"mechanism": "SCRAM-SHA-512"})


def test_tls_handshake_that_never_starts_is_cut_off(broker):
    sock = socket.create_connection(("127.0.0.1", broker.ports["SASL_SSL"]))
    try:
        elapsed = _closed_within(sock, AUTH_TIMEOUT_MS / 1000 * 4)
    finally:
        sock.close()
    assert AUTH_TIMEOUT_MS / 1000 * 0.9 <= elapsed < AUTH_TIMEOUT_MS / 1000 * 3, elapsed


@pytest.mark.parametrize("cert", ["none", "untrusted"])
def test_ssl_listener_requires_a_trusted_client_certificate(broker, cert):
    c = broker.certs
    ctx = ssl.create_default_context(cafile=str(c.ca))
    if cert == "untrusted":
        ctx.load_cert_chain(str(c.other_cert), str(c.other_key))
    with socket.create_connection(("127.0.0.1", broker.ports["SSL"])) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                # TLS 1.3: the server's refusal of the client certificate arrives after the
                # client's handshake completes, at the first read
                tls.sendall(struct.pack(">i", 0))
                tls.settimeout(10)
                if tls.recv(1) == b"":
                    raise ConnectionResetError("closed")


def test_sasl_handshake_v0_is_refused(broker):
    """SaslHandshake is listed from v0 for librdkafka, but v0's raw-token exchange (removed
    in Kafka 4) is refused: UNSUPPORTED_VERSION with the enabled mechanisms, then closed."""
    async def go() -> None:
        conn = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10)
        await conn.connect()
        assert conn.api_versions[17] == (0, 1)
        resp = await conn.request(17, 0, {"mechanism": "SCRAM-SHA-512"})
        assert resp.error_code == 35 and list(resp.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        with pytest.raises(KafkaConnectionError):
            await conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        await conn.close()
    asyncio.run(go())


def test_hightide_client_reauthenticates_before_its_session_expires(broker):
    """KIP-368 on the client side: past 85% of the session lifetime the next requests
    wait for one re-authentication on the same connection, which then outlives the first
    lifetime."""
    async def go() -> None:
        conn = BrokerConnection("127.0.0.1", broker.ports["SASL_PLAINTEXT"], request_timeout_s=10,
                                security=_security(broker, "SCRAM-SHA-256"))
        await conn.connect()
        started = time.monotonic()
        try:
            await conn.request(3, 12, METADATA)
            await asyncio.sleep(REAUTH_MS / 1000 * 0.9)
            # concurrent requests: one re-authentication, every request answered
            answers = await asyncio.gather(*(conn.request(3, 12, METADATA) for _ in range(5)))
            assert all(a.brokers for a in answers) and conn.requests_sent[17] == 2
            await asyncio.sleep(max(0.0, REAUTH_MS / 1000 * 1.3 - (time.monotonic() - started)))
            assert (await conn.request(3, 12, METADATA)).brokers  # past the first lifetime, same socket
            assert conn.connected and conn.requests_sent[17] == 2
        finally:
            await conn.close()
    asyncio.run(go())


def test_sasl_principal_is_what_acls_decide_on(broker):
    """carol (SCRAM-SHA-512, not a super user) may write a topic only once an ACL for
    User:carol allows it: the authenticated SASL user is the request's principal."""
    topic = broker.create_topic(_topic())
    props = {**_librdkafka_props(broker, "scram"), "sasl.username": "carol", "sasl.password": "carol-secret",
             "message.timeout.ms": 10000}

    def produce() -> object:
        results: list = []
        p = Producer(props)
        p.produce(topic, b"x", callback=lambda err, msg: results.append(err))
        p.flush(15)
        return results[0] if results else "no delivery report"
    err = produce()
    assert err is not None and err.name() == "TOPIC_AUTHORIZATION_FAILED", err
    admin = AdminClient({"bootstrap.servers": broker.srv.bootstrap})
    acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*", AclOperation.WRITE,
                     AclPermissionType.ALLOW)
    for fut in admin.create_acls([acl]).values():
        fut.result(15)
    assert produce() is None
    assert broker.end_offset(topic) == 1
