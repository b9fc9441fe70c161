"""SCRAM server core: RFC 5802 (SHA-1) and RFC 7677 (SHA-256) test vectors, SHA-512
round trips, every RFC error, and fuzzing of the parsers (no crash, no hang)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.security.errors import SaslFailure
from hightide.security.scram import (
    MIN_ITERATIONS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramMechanism,
    ScramServer,
    credential_from_password,
    credential_from_salted,
    encode_saslname,
    parse_client_final,
    parse_client_first,
    salted_password,
)


def _vector_server(hash_name: str, salt_b64: str, server_nonce: str) -> tuple[ScramServer, ScramCredential]:
    salt = base64.b64decode(salt_b64)
    cred = credential_from_salted(hash_name, salt, salted_password(hash_name, "pencil", salt, 4096), 4096)
    mech = ScramMechanism.SCRAM_SHA_256
    server = ScramServer(mech, lambda u: cred if u == "user" else None, nonce=lambda: server_nonce)
    return server, cred


def test_rfc7677_sha256_vector() -> None:
    server, _ = _vector_server("sha256", "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_rfc5802_sha1_vector() -> None:
    """The SHA-1 vector drives the same code with hash sha1 (SCRAM-SHA-1 is not offered)."""
    salt = base64.b64decode("QSXCR+Q6sek8bf92")
    cred = credential_from_salted("sha1", salt, salted_password("sha1", "pencil", salt, 4096), 4096)
    server = ScramServer(ScramMechanism.SCRAM_SHA_256, lambda u: cred, nonce=lambda: "3rfcNHYJY1ZVvWVs7j")
    # the exchange reads only hash_name/mechanism_name from its mechanism: SHA-1 for the vector
    server.mechanism = type("Sha1", (), {"hash_name": "sha1", "mechanism_name": "SCRAM-SHA-1"})()
    assert server.step(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL") == (
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert server.step(b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=") == (
        b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")


@pytest.mark.parametrize("mech", list(ScramMechanism))
def test_client_and_server_round_trip(mech: ScramMechanism) -> None:
    cred = credential_from_password(mech, "s3cret", iterations=4096)
    server = ScramServer(mech, lambda u: cred if u == "al,i=ce" else None)
    client = ScramClient(mech, "al,i=ce", "s3cret")
    assert b"n=al=2Ci=3Dce" in client.first()
    final = client.final(server.step(client.first()))
    client.verify(server.step(final))
    assert server.complete and server.username == "al,i=ce"


def test_wrong_password_is_invalid_proof_and_not_public() -> None:
    mech = ScramMechanism.SCRAM_SHA_512
    cred = credential_from_password(mech, "right")
    server = ScramServer(mech, lambda u: cred)
    client = ScramClient(mech, "bob", "wrong")
    final = client.final(server.step(client.first()))
    with pytest.raises(ScramError) as exc:
        server.step(final)
    assert exc.value.error == "invalid-proof" and not exc.value.public
    assert exc.value.server_error_message() == b"e=invalid-proof"
    assert isinstance(exc.value, SaslFailure)
    with pytest.raises(ScramError):  # a failed server stays failed
        server.step(final)


def test_unknown_user_fails_at_first_message() -> None:
    server = ScramServer(ScramMechanism.SCRAM_SHA_256, lambda u: None)
    with pytest.raises(ScramError) as exc:
        server.step(b"n,,n=nobody,r=abc")
    assert exc.value.error == "unknown-user" and not exc.value.public


def _started(mech: ScramMechanism = ScramMechanism.SCRAM_SHA_256, first: bytes = b"n,,n=u,r=abc"
             ) -> tuple[ScramServer, bytes]:
    cred = credential_from_password(mech, "pw")
    server = ScramServer(mech, lambda u: cred, nonce=lambda: "SRV")
    return server, server.step(first)


def test_channel_binding_must_match_gs2_header() -> None:
    server, _ = _started()
    with pytest.raises(ScramError) as exc:
        server.step(b"c=eSws,r=abcSRV,p=" + base64.b64encode(b"x" * 32))  # "y,," but the header was "n,,"
    assert exc.value.error == "channel-bindings-dont-match"


def test_y_flag_and_authzid_bind_their_own_header() -> None:
    mech = ScramMechanism.SCRAM_SHA_256
    cred = credential_from_password(mech, "pw")
    server = ScramServer(mech, lambda u: cred, nonce=lambda: "SRV")
    server.step(b"y,a=u,n=u,r=abc")
    with pytest.raises(ScramError) as exc:  # "biws" is base64("n,,"): wrong for "y,a=u,"
        server.step(b"c=biws,r=abcSRV,p=" + base64.b64encode(b"x" * 32))
    assert exc.value.error == "channel-bindings-dont-match"


def test_authzid_different_from_user_is_public_error() -> None:
    mech = ScramMechanism.SCRAM_SHA_256
    cred = credential_from_password(mech, "pw")
    server = ScramServer(mech, lambda u: cred)
    with pytest.raises(ScramError) as exc:
        server.step(b"n,a=admin,n=u,r=abc")
    assert exc.value.public and "authorization id" in str(exc.value)


def test_nonce_must_be_client_plus_server_nonce() -> None:
    server, _ = _started()
    with pytest.raises(ScramError):
        server.step(b"c=biws,r=abcOTHER,p=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("first, error", [
    (b"p=tls-unique,,n=u,r=abc", "channel-binding-not-supported"),
    (b"n,,m=ext,n=u,r=abc", "extensions-not-supported"),
    (b"n,,n=u=41,r=abc", "invalid-username-encoding"),
    (b"x,,n=u,r=abc", "invalid-encoding"),
    (b"n,,r=abc,n=u", "invalid-encoding"),
    (b"n,,n=u", "invalid-encoding"),
    (b"n,,n=u,r=a\x7fb", "invalid-encoding"),
    (b"n,,n=\xff,r=abc", "invalid-encoding"),
    (b"n,,n=u,r=abc,tokenauth=true", "unknown-user"),
])
def test_client_first_errors(first: bytes, error: str) -> None:
    server = ScramServer(ScramMechanism.SCRAM_SHA_256, lambda u: credential_from_password(
        ScramMechanism.SCRAM_SHA_256, "pw"))
    with pytest.raises(ScramError) as exc:
        server.step(first)
    assert exc.value.error == error


def test_unknown_extensions_are_ignored() -> None:
    first = parse_client_first(b"n,,n=u,r=abc,x=1")
    assert first.extensions == {"x": "1"} and first.bare == "n=u,r=abc,x=1"


def test_stored_credential_below_min_iterations_is_refused() -> None:
    mech = ScramMechanism.SCRAM_SHA_256
    weak = credential_from_password(mech, "pw", iterations=MIN_ITERATIONS)
    weak = ScramCredential(weak.salt, weak.stored_key, weak.server_key, 1000)
    with pytest.raises(ScramError):
        ScramServer(mech, lambda u: weak).step(b"n,,n=u,r=abc")


def test_overlong_message_is_refused() -> None:
    with pytest.raises(ScramError):
        parse_client_first(b"n,,n=u,r=" + b"a" * 10000)


def test_final_without_proof_or_bad_base64() -> None:
    with pytest.raises(ScramError):
        parse_client_final(b"c=biws,r=abc")
    with pytest.raises(ScramError) as exc:
        parse_client_final(b"c=biws,r=abc,p=***")
    assert exc.value.error == "invalid-encoding"


def test_saslname_round_trip() -> None:
    for name in ("a", "a,b", "a=b", "=2C", ",,=="):
        assert parse_client_first(f"n,,n={encode_saslname(name)},r=x".encode()).username == name


_ALPHABET = st.sampled_from(list(b"n,=ryapcbiws0123456789+/AZ\x00\x7f\xff\xc3") + list(range(256)))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=300) | st.builds(bytes, st.lists(_ALPHABET, max_size=120)), min_size=1,
                max_size=3))
def test_fuzz_server_never_crashes(messages: list[bytes]) -> None:
    """Arbitrary input only ever raises ScramError (no other exception, no hang)."""
    mech = ScramMechanism.SCRAM_SHA_256
    cred = credential_from_password(mech, "pw", salt=b"salt")
    server = ScramServer(mech, lambda u: cred, nonce=lambda: "SRV")
    for m in messages:
        try:
            server.step(m)
        except ScramError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60), st.text(max_size=80))
def test_fuzz_structured_messages(user: str, nonce: str, tail: str) -> None:
    mech = ScramMechanism.SCRAM_SHA_512
    cred = credential_from_password(mech, "pw", salt=b"salt")
    server = ScramServer(mech, lambda u: cred, nonce=lambda: "SRV")
    try:
        server.step(f"n,,n={user},r={nonce}{tail}".encode())
        server.step(f"c=biws,r={nonce}SRV,{tail}p=AAAA".encode())
    except ScramError:
        pass
