"""The principal of an mTLS client (issue 26, item 9): its certificate's subject printed as
Java's ``X500Principal.getName()`` prints it (attributes outside Java's RFC 2253 keyword
list as ``OID=#hex`` of their DER encoding), mapped by ``ssl.principal.mapping.rules``;
when no rule applies the authentication fails and the connection is closed (Kafka's
``SslPrincipalMapper`` throws ``NoMatchingRule``), never the DN used as it is."""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hightide.security.listeners import TlsSettings, parse_principal_rules
from hightide.server.connection import KafkaConnection
from hightide.server.listener_security import ListenerSecurity
from tests.unit.test_connection import FakeBroker, FakeTransport

EMAIL_OID = "1.2.840.113549.1.9.1"


# -- DER, by hand -------------------------------------------------------------------------------
def der(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + content


def oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray([40 * arcs[0] + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out += bytes(reversed(chunk))
    return der(0x06, bytes(out))


def atv(dotted: str, tag: int, value: bytes) -> bytes:
    return der(0x30, oid(dotted) + der(tag, value))


def name(*rdns: bytes | list[bytes]) -> bytes:
    return der(0x30, b"".join(der(0x31, b"".join(r) if isinstance(r, list) else r) for r in rdns))


PRINTABLE, UTF8, IA5, BMP, INTEGER = 0x13, 0x0C, 0x16, 0x1E, 0x02


def test_emailaddress_and_other_types_print_as_java_does() -> None:
    from hightide.security.x500 import name_rfc2253
    email = der(IA5, b"alice@example.com")
    subject = name(atv("2.5.4.6", PRINTABLE, b"US"), atv("2.5.4.10", UTF8, b"Example, Inc."),
                   atv("2.5.4.3", UTF8, b"alice"), atv(EMAIL_OID, IA5, b"alice@example.com"))
    assert name_rfc2253(subject) == f"{EMAIL_OID}=#{email.hex()},CN=alice,O=Example\\, Inc.,C=US"
    assert email.hex().startswith("1611")  # IA5String of 17 bytes: Java prints the whole DER value
    # Java's keywords (RFC 2253 ones only), others by OID; a keyword type with a non-string value in hex
    subject = name(atv("0.9.2342.19200300.100.1.25", IA5, b"com"), atv("2.5.4.8", UTF8, b"Hessen"),
                   atv("2.5.4.7", UTF8, b"Kassel"), atv("2.5.4.9", UTF8, b"Main St"),
                   atv("0.9.2342.19200300.100.1.1", UTF8, b"u1"), atv("2.5.4.5", PRINTABLE, b"42"),
                   atv("2.5.4.11", INTEGER, b"\x07"))
    assert name_rfc2253(subject) == ("OU=#020107,2.5.4.5=#13023432,UID=u1,STREET=Main St,L=Kassel,ST=Hessen,DC=com")


def test_values_are_escaped_as_java_escapes_them() -> None:
    from hightide.security.x500 import name_rfc2253

    def cn(value: str, tag: int = UTF8) -> str:
        return name_rfc2253(name(atv("2.5.4.3", tag, value.encode())))
    assert cn('a,b=c+d<e>f#g;h"i\\j') == r'CN=a\,b\=c\+d\<e\>f\#g\;h\"i\\j'
    assert cn("  two  ") == r"CN=\ \ two\ \ "
    assert cn("#lead") == r"CN=\#lead"
    assert cn("n\0ul") == r"CN=n\00ul"
    assert cn("é@x_y*") == "CN=é@x_y*"  # non-printable characters are kept as they are
    multi = name([atv("2.5.4.11", UTF8, b"eng"), atv("2.5.4.3", UTF8, b"alice")], atv("2.5.4.10", UTF8, b"X"))
    assert name_rfc2253(multi) == "O=X,OU=eng+CN=alice"  # a multi-valued RDN: DER order, '+'


def test_no_matching_rule_is_an_error() -> None:
    from hightide.security.listeners import NoMatchingRule, map_principal
    rules = parse_principal_rules("RULE:^CN=([^,]*),O=Example$/$1/L")
    assert map_principal("CN=Alice,O=Example", rules) == "alice"
    with pytest.raises(NoMatchingRule, match=r"No rules apply to CN=bob,O=Other, rules \[RULE:\^CN="):
        map_principal("CN=bob,O=Other", rules)
    assert map_principal("CN=bob,O=Other", parse_principal_rules(rules_text := "RULE:^x$/y/,DEFAULT")) \
        == "CN=bob,O=Other", rules_text


# -- through the connection, with a certificate made by openssl -----------------------------------
@pytest.fixture(scope="module")
def email_cert(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("email-cert")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem", "-out", "c.pem",
                    "-days", "2", "-subj", "/C=US/O=Example/CN=alice/emailAddress=alice@example.com"],
                   cwd=d, check=True, capture_output=True, timeout=60)
    return d / "c.pem"


class TlsTransport(FakeTransport):
    """A fake transport that presents a client certificate, as asyncio's TLS transport does."""

    def __init__(self, pem: Path) -> None:
        super().__init__()
        self.pem = pem

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peercert":
            return ssl._ssl._test_decode_cert(str(self.pem))  # type: ignore[attr-defined]
        if name == "ssl_object":
            der_bytes = ssl.PEM_cert_to_DER_cert(self.pem.read_text())

            class SslObject:
                def getpeercert(self, binary_form: bool = False) -> Any:
                    return der_bytes if binary_form else ssl._ssl._test_decode_cert(str(pem))  # type: ignore[attr-defined]
            pem = self.pem
            return SslObject()
        return super().get_extra_info(name, default)


def _connect(pem: Path, rules: str) -> tuple[KafkaConnection, TlsTransport]:
    security = ListenerSecurity("SSL", "SSL", ssl_context=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
                                tls=TlsSettings(client_auth="required", principal_rules=parse_principal_rules(rules)))
    conn = KafkaConnection(FakeBroker(), security=security)  # type: ignore[arg-type]
    transport = TlsTransport(pem)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def test_mtls_principal_of_an_emailaddress_certificate_is_javas_dn(email_cert: Path) -> None:
    der_bytes = ssl.PEM_cert_to_DER_cert(email_cert.read_text())
    email = der(IA5, b"alice@example.com").hex()
    assert bytes.fromhex(email) in der_bytes  # openssl encodes emailAddress as an IA5String

    async def scenario() -> None:
        conn, transport = _connect(email_cert, "DEFAULT")
        assert conn.principal == f"User:{EMAIL_OID}=#{email},CN=alice,O=Example,C=US"
        assert not transport.closed
        conn, _ = _connect(email_cert, r"RULE:^1\.2\.840\.113549\.1\.9\.1=#[0-9a-f]+,CN=([^,]*),O=Example,C=US$/$1/U")
        assert conn.principal == "User:ALICE"
    asyncio.run(scenario())


def test_mtls_client_that_no_rule_maps_is_refused(email_cert: Path, caplog) -> None:
    async def scenario() -> None:
        conn, transport = _connect(email_cert, "RULE:^CN=([^,]*),O=Other.*$/$1/")
        assert transport.closed, conn.principal
        assert conn.principal == "User:ANONYMOUS"
    with caplog.at_level(logging.INFO, logger="hightide.server"):
        asyncio.run(scenario())
    assert "No rules apply to 1.2.840.113549.1.9.1=#16" in caplog.text
    assert "ssl.principal.mapping.rules" in caplog.text
