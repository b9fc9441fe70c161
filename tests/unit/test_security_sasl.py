"""PLAIN (RFC 4616) with Kafka's JAAS users, OAUTHBEARER with unsecured JWS, and the
per-connection SASL session state machine (handshake, authenticate, failures,
KIP-368 re-authentication), with fuzzing of the parsers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.protocol.errors import ErrorCode
from hightide.security.errors import SaslFailure
from hightide.security.oauthbearer import (
    OAuthBearerError,
    OAuthBearerServer,
    TokenInvalid,
    UnsecuredValidator,
    parse_client_initial_response,
    unsecured_token,
)
from hightide.security.sasl_plain import JaasConfigError, PlainError, PlainServer, parse_jaas_config, plain_users
from hightide.security.scram import ScramClient, ScramMechanism, credential_from_password
from hightide.security.session import (
    CLOSE,
    REJECT,
    SASL,
    SERVE,
    AuthenticatedSession,
    IllegalTransition,
    SaslServerConfig,
    SaslSession,
    State,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice \\"quoted\\" secret";')


# --- PLAIN -------------------------------------------------------------------------------

def test_jaas_users() -> None:
    module = parse_jaas_config(JAAS)
    assert module.flag == "required" and module.options["username"] == "admin"
    assert plain_users(module) == {"admin": "admin-secret", "alice": 'alice "quoted" secret'}


@pytest.mark.parametrize("text", [
    "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=b",  # no ';'
    "org.apache.kafka.common.security.plain.PlainLoginModule bogus user_a=b;",
    "org.apache.kafka.common.security.plain.PlainLoginModule required user_a;",
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b;',
    "A required; B required;",
])
def test_jaas_errors(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


def test_plain_wrong_module() -> None:
    with pytest.raises(JaasConfigError):
        plain_users(parse_jaas_config("org.example.Other required user_a=b;"))


def test_plain_success_and_failures() -> None:
    users = {"alice": "pw"}
    s = PlainServer(users)
    assert s.step(b"\x00alice\x00pw") == b"" and s.complete and s.username == "alice"
    assert PlainServer(users).step(b"alice\x00alice\x00pw") == b""
    cases = {b"\x00alice\x00bad": "Invalid username or password",
             b"\x00bob\x00pw": "Invalid username or password",
             b"\x00\x00pw": "username not specified",
             b"\x00alice\x00": "password not specified",
             b"alice\x00pw": "expected 3 tokens, got 2",
             b"other\x00alice\x00pw": "authorization id that is different",
             b"\x00\xff\x00pw": "not UTF-8"}
    for msg, text in cases.items():
        with pytest.raises(PlainError) as exc:
            PlainServer(users).step(msg)
        assert text in str(exc.value) and exc.value.public
        assert "pw" not in str(exc.value).replace("password", "")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_plain(data: bytes) -> None:
    try:
        PlainServer({"a": "b"}).step(data)
    except PlainError:
        pass


# --- OAUTHBEARER ---------------------------------------------------------------------------

NOW = 1_700_000_000_000


def _first(token: str, authzid: str = "", ext: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}\x01{ext}\x01".encode()


def test_oauth_parse_with_extensions() -> None:
    r = parse_client_initial_response(b"n,a=bob,\x01auth=Bearer abc.def.\x01traceId=123\x01\x01")
    assert (r.authzid, r.token, r.extensions) == ("bob", "abc.def.", {"traceId": "123"})


@pytest.mark.parametrize("msg", [b"n,,\x01\x01", b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01auth=Basic abc\x01\x01",
                                 b"n,,\x01auth=Bearer\x01\x01", b"\xff"])
def test_oauth_parse_errors(msg: bytes) -> None:
    with pytest.raises(OAuthBearerError) as exc:
        parse_client_initial_response(msg)
    assert not exc.value.public


def test_oauth_valid_token_sets_lifetime() -> None:
    token = unsecured_token({"sub": "alice", "exp": NOW / 1000 + 60, "iat": NOW / 1000, "scope": "a b"})
    s = OAuthBearerServer(UnsecuredValidator(required_scope=("a",)), NOW)
    assert s.step(_first(token)) == b"" and s.username == "alice"
    assert s.credential_expiry_ms == NOW + 60_000


@pytest.mark.parametrize("claims, header, status", [
    ({"sub": "a", "exp": NOW / 1000 - 1}, None, "invalid_token"),         # expired
    ({"sub": "a"}, None, "invalid_token"),                                # no exp
    ({"exp": NOW / 1000 + 60}, None, "invalid_token"),                    # no sub
    ({"sub": "a", "exp": NOW / 1000 + 60, "iat": NOW / 1000 + 30}, None, "invalid_token"),  # iat in future
    ({"sub": "a", "exp": NOW / 1000 + 60, "scope": "b"}, None, "insufficient_scope"),
    ({"sub": "a", "exp": "soon"}, None, "invalid_token"),
    ({"sub": "a", "exp": 1e400}, None, "invalid_token"),
    ({"sub": "a", "exp": NOW / 1000 + 60}, {"alg": "HS256"}, "invalid_token"),
])
def test_oauth_invalid_tokens_get_json_challenge_then_fail(claims: dict, header: dict | None, status: str) -> None:
    token = unsecured_token(claims)
    if header is not None:
        import base64
        import json
        h = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
        token = h + token[token.index("."):]
    s = OAuthBearerServer(UnsecuredValidator(required_scope=("a",) if status == "insufficient_scope" else ()), NOW)
    challenge = s.step(_first(token))
    assert challenge.startswith(f'{{"status":"{status}"'.encode())
    with pytest.raises(OAuthBearerError) as exc:
        s.step(b"\x01")
    assert exc.value.public and str(exc.value) == challenge.decode()


def test_oauth_signed_token_and_authzid_mismatch() -> None:
    with pytest.raises(TokenInvalid):
        UnsecuredValidator().validate(unsecured_token({"sub": "a", "exp": 1e12}) + "sig", NOW)
    s = OAuthBearerServer(UnsecuredValidator(), NOW)
    with pytest.raises(OAuthBearerError) as exc:
        s.step(_first(unsecured_token({"sub": "a", "exp": NOW / 1000 + 9}), authzid="b"))
    assert "authorization id (b)" in str(exc.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=200).map(lambda t: _first(t)))
def test_fuzz_oauth(data: bytes) -> None:
    s = OAuthBearerServer(UnsecuredValidator(), NOW)
    try:
        s.step(data)
        s.step(b"\x01")
    except SaslFailure:
        pass


def test_oauth_deeply_nested_json_is_invalid_not_a_crash() -> None:
    import base64
    claims = base64.urlsafe_b64encode(b"[" * 60000).rstrip(b"=").decode()
    with pytest.raises(TokenInvalid):
        UnsecuredValidator().validate(unsecured_token({})[:unsecured_token({}).index(".") + 1] + claims + ".", NOW)


# --- the session -----------------------------------------------------------------------------

SCRAM = credential_from_password(ScramMechanism.SCRAM_SHA_512, "scram-pw")


def _config(**kw: object) -> SaslServerConfig:
    base: dict = dict(enabled=("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"), plain_users={"alice": "pw", "bob": "pw2"},
                      scram_lookup=lambda m, u: SCRAM if (m, u) == (ScramMechanism.SCRAM_SHA_512, "carol") else None)
    base.update(kw)
    return SaslServerConfig(**base)


def _login(session: SaslSession, user: str = "alice", pw: str = "pw", now: int = 0, version: int = 2) -> object:
    assert session.admit(17, 30, now).action == SASL
    assert session.handshake(1, "PLAIN", now).body["error_code"] == ErrorCode.none
    assert session.admit(36, 30, now).action == SASL
    return session.authenticate(version, f"\x00{user}\x00{pw}".encode(), now)


def test_only_sasl_and_api_versions_before_authentication() -> None:
    s = SaslSession(_config())
    assert s.admit(18, 50, 0).action == SERVE and s.state == State.HANDSHAKE
    a = s.admit(0, 100, 0)  # Produce before the handshake
    assert a.action == CLOSE and "Unexpected Kafka request of type PRODUCE during SASL handshake." == a.reason
    assert a.delay_ms == 100 and s.state == State.FAILED
    assert s.admit(18, 50, 0).action == CLOSE


def test_request_during_authentication_is_rejected_with_illegal_sasl_state() -> None:
    s = SaslSession(_config())
    s.handshake(1, "PLAIN", 0)
    a = s.admit(3, 40, 0)
    assert (a.action, a.error_code) == (REJECT, ErrorCode.illegal_sasl_state)
    assert "during SASL authentication" in a.reason and s.state == State.FAILED


def test_unsupported_mechanism() -> None:
    s = SaslSession(_config())
    r = s.handshake(1, "GSSAPI", 0)
    assert r.body == {"error_code": ErrorCode.unsupported_sasl_mechanism,
                      "mechanisms": ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"]}
    assert r.close and r.delay_ms == 100 and s.state == State.FAILED


def test_handshake_v0_is_refused() -> None:
    r = SaslSession(_config()).handshake(0, "PLAIN", 0)
    assert r.body["error_code"] == ErrorCode.unsupported_version and r.close


def test_plain_login_and_failure() -> None:
    s = SaslSession(_config())
    r = _login(s)
    assert r.body["error_code"] == ErrorCode.none and not r.close  # type: ignore[attr-defined]
    assert s.authenticated and s.principal == "User:alice" and s.admit(0, 10**6, 0).action == SERVE
    f = SaslSession(_config())
    r = _login(f, pw="nope")
    assert r.body == {"error_code": ErrorCode.sasl_authentication_failed,  # type: ignore[attr-defined]
                      "error_message": "Authentication failed: Invalid username or password", "auth_bytes": b"",
                      "session_lifetime": 0}
    assert r.close and r.delay_ms == 100 and f.admit(36, 10, 0).action == CLOSE  # type: ignore[attr-defined]


def test_scram_login_through_session_and_generic_failure_message() -> None:
    s = SaslSession(_config())
    s.handshake(1, "SCRAM-SHA-512", 0)
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, "carol", "scram-pw")
    r1 = s.authenticate(2, client.first(), 0)
    assert r1.body["error_code"] == ErrorCode.none and not s.authenticated
    r2 = s.authenticate(2, client.final(r1.body["auth_bytes"]), 0)
    client.verify(r2.body["auth_bytes"])
    assert s.principal == "User:carol"
    bad = SaslSession(_config())
    bad.handshake(1, "SCRAM-SHA-512", 0)
    r = bad.authenticate(2, ScramClient(ScramMechanism.SCRAM_SHA_512, "nobody", "x").first(), 0)
    assert r.body["error_message"] == ("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism SCRAM-SHA-512")


def test_oversized_frame_before_authentication_closes() -> None:
    s = SaslSession(_config(max_receive_size=100))
    assert s.admit(17, 101, 0).action == CLOSE


def test_reauthentication_lifetime_and_expiry() -> None:
    s = SaslSession(_config(max_reauth_ms=1000))
    r = _login(s, now=5000)
    assert r.body["session_lifetime"] == 1000 and s.session_expiry_ms == 6000  # type: ignore[attr-defined]
    assert s.admit(0, 10, 6000).action == SERVE
    a = s.admit(0, 10, 6001)
    assert a.action == CLOSE and "expired" in a.reason


def test_reauthentication_same_principal_renews_session() -> None:
    s = SaslSession(_config(max_reauth_ms=1000))
    _login(s, now=0)
    r = _login(s, now=900)
    assert r.body["error_code"] == ErrorCode.none and s.session_expiry_ms == 1900  # type: ignore[attr-defined]


def test_reauthentication_cannot_change_principal_or_mechanism() -> None:
    s = SaslSession(_config(max_reauth_ms=1000))
    _login(s)
    r = _login(s, user="bob", pw="pw2")
    assert r.body["error_message"] == "Cannot change principals during re-authentication from User.alice: User.bob"  # type: ignore[attr-defined]
    m = SaslSession(_config(max_reauth_ms=1000))
    _login(m)
    assert m.handshake(1, "SCRAM-SHA-512", 0).body["error_code"] == ErrorCode.none
    r2 = m.authenticate(2, b"n,,n=carol,r=x", 0)
    assert r2.close and "not supported for re-authentication of mechanism 'PLAIN'" in r2.body["error_message"]


def test_client_without_reauth_support_gets_handshake_served_and_no_lifetime_field_use() -> None:
    s = SaslSession(_config(max_reauth_ms=1000))
    _login(s, version=0)
    assert s.admit(17, 10, 10).action == SERVE  # KafkaApis answers ILLEGAL_SASL_STATE


def test_oauth_token_expiry_caps_session() -> None:
    token = unsecured_token({"sub": "dev", "exp": 10.0})
    s = SaslSession(_config(max_reauth_ms=60_000))
    s.handshake(1, "OAUTHBEARER", 4000)
    r = s.authenticate(2, _first(token), 4000)
    assert s.principal == "User:dev" and r.body["session_lifetime"] == 6000


def test_config_and_transitions() -> None:
    with pytest.raises(ValueError):
        SaslServerConfig(enabled=("GSSAPI",))
    with pytest.raises(ValueError):
        SaslServerConfig(enabled=())
    s = SaslSession(_config())
    with pytest.raises(IllegalTransition):
        s._to(State.COMPLETE)
    assert AuthenticatedSession().admit(0, 10**9, 0).action == SERVE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 3, 17, 18, 36]), st.integers(0, 2),
                          st.sampled_from(["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER", "X"]), st.binary(max_size=80)),
                max_size=8))
def test_fuzz_session(steps: list[tuple[int, int, str, bytes]]) -> None:
    """Any sequence of requests: the session never raises, and nothing but ApiVersions
    and SASL requests is SERVEd before authentication."""
    s = SaslSession(_config(max_reauth_ms=10))
    for now, (api, version, mech, data) in enumerate(steps):
        was_authenticated = s.authenticated
        a = s.admit(api, len(data) + 20, now)
        if a.action == SERVE and not was_authenticated:
            assert api == 18
        if a.action != SASL:
            continue
        if api == 17:
            s.handshake(version or 1, mech, now)
        else:
            s.authenticate(version, data, now)


@pytest.mark.parametrize("data", [
    b"n,a=" + b"=2C" * 21000 + b",\x01auth=Bearer x\x01\x01",           # long authzid, then valid
    b"n,,\x01" + b"k=" + b"=" * 65000 + b"\x01",                        # unterminated kv pair
    b"n,,\x01" + b"a=b\x01" * 16000,                                     # many pairs, no final ^A
    b"n,,\x01auth=Bearer " + b"a" * 65000 + b"=" * 500 + b"!\x01\x01",  # token regex near-miss
])
def test_oauth_parser_linear_on_adversarial_input(data: bytes) -> None:
    """Maximum-size inputs built against the grammar's repetitions are parsed (or
    refused) in one linear pass: this test would hang on a backtracking regex."""
    try:
        parse_client_initial_response(data[:65536])
    except OAuthBearerError:
        pass


def test_scram_and_plain_parsers_on_adversarial_input() -> None:
    from hightide.security.scram import ScramError, parse_client_final, parse_client_first
    for data in (b"n,,n=" + b"=3D" * 2700 + b",r=x", b"c=biws,r=x," + b"p=," * 2700 + b"p=AAAA",
                 b"n,,n=u,r=" + b"a," * 4000, b"c=" + b"A" * 8180 + b",r=x,p=A"):
        for parse in (parse_client_first, parse_client_final):
            try:
                parse(data)
            except ScramError:
                pass
    with pytest.raises(PlainError):
        PlainServer({"a": "b"}).step(b"\x00" * 70000)
