"""SASL/OAUTHBEARER (RFC 7628) with unsecured JWS tokens, for development, sans-IO.

This is Kafka's ``OAuthBearerSaslServer`` with its ``OAuthBearerUnsecuredValidatorCallbackHandler``:
tokens are unsigned JWTs (``alg: none``) and are trusted as they are. Never use it where
anyone untrusted can reach the listener.

The client's first message (RFC 7628 §3.1)::

    n,[a=<authzid>],^Aauth=Bearer <token>^A[key=value^A...]^A

Validation (Kafka's ``OAuthBearerValidationUtils``): three dot-separated base64url parts,
the last empty; header ``alg`` is ``none``; the principal claim (``sub`` unless
configured) is a string; ``exp`` is a number of seconds and not past (with the allowed
clock skew); ``iat``, when present, is a number not in the future and before ``exp``;
every required scope is in the ``scope`` claim (a space-separated string or a list).

A token that fails validation gets Kafka's JSON error challenge
(``{"status":"invalid_token"}``, or ``insufficient_scope`` with the scope); the client
answers ``\\x01`` and the exchange fails with that JSON as the message. A malformed first
message fails at once with the generic authentication-failed message.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import SaslFailure

MAX_MESSAGE_BYTES = 65536
SEPARATOR = "\x01"
_MAX_SECONDS = 1e13  # a time claim beyond year 318857 is not a time
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_CLIENT_FIRST = re.compile(f"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEPARATOR}(?P<kvpairs>(?:{_KEY}={_VALUE}{SEPARATOR})*)"
                           f"{SEPARATOR}")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)


class OAuthBearerError(SaslFailure):
    """The exchange failed; ``public`` says whether Kafka shows ``str()`` to the client."""


class TokenInvalid(Exception):
    """Token validation failed: ``status`` (``invalid_token``/``insufficient_scope``),
    ``scope`` (the missing required scope, space-separated) and a description."""

    def __init__(self, description: str, scope: str | None = None) -> None:
        super().__init__(description)
        self.status = "insufficient_scope" if scope is not None else "invalid_token"
        self.scope = scope

    def json(self) -> str:
        """Kafka's JSON error challenge."""
        out = f'{{"status":"{self.status}"'
        if self.scope is not None:
            out += f', "scope":"{self.scope}"'
        return out + "}"


@dataclass(frozen=True, slots=True)
class ClientInitialResponse:
    authzid: str
    token: str
    extensions: dict[str, str]


def parse_client_initial_response(data: bytes) -> ClientInitialResponse:
    """Parse the GS2-framed first message; raises :class:`OAuthBearerError` (not public:
    the client gets the generic message, as in Kafka)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: too long", public=False)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message", public=False) from None
    m = _CLIENT_FIRST.fullmatch(text)
    if m is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message", public=False)
    pairs = dict(kv.split("=", 1) for kv in m["kvpairs"].split(SEPARATOR) if kv)
    auth = pairs.pop("auth", None)
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified", public=False)
    am = _AUTH.fullmatch(auth)
    if am is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format", public=False)
    if am["scheme"].lower() != "bearer":
        raise OAuthBearerError(f"Invalid scheme in OAUTHBEARER client first message: {am['scheme']}", public=False)
    authzid = (m["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return ClientInitialResponse(authzid, am["token"], pairs)


@dataclass(frozen=True, slots=True)
class UnsecuredToken:
    """A validated token: principal name, lifetime (expiry, ms since the epoch), scope."""
    principal_name: str
    lifetime_ms: int
    scope: frozenset[str]
    claims: dict


def _b64url_json(part: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        raise TokenInvalid("malformed JSON") from None
    if not isinstance(value, dict):
        raise TokenInvalid("malformed JSON")
    return value


def _number(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenInvalid(f"The {name} claim is not a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or abs(number) > _MAX_SECONDS:
        raise TokenInvalid(f"The {name} claim is out of range")
    return number


@dataclass(frozen=True)
class UnsecuredValidator:
    """Kafka's unsecured validator options (``unsecuredValidatorPrincipalClaimName``,
    ``unsecuredValidatorScopeClaimName``, ``unsecuredValidatorRequiredScope``,
    ``unsecuredValidatorAllowableClockSkewMs``)."""
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: Sequence[str] = field(default_factory=tuple)
    allowable_clock_skew_ms: int = 0

    def validate(self, token: str, now_ms: int) -> UnsecuredToken:
        """The token's principal and lifetime; raises :class:`TokenInvalid`."""
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                               "values")
        if parts[2]:
            raise TokenInvalid("Unsecured JWS must not contain a digital signature")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if header.get("alg") != "none":
            raise TokenInvalid("Unsecured JWS must have 'none' for an algorithm")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"Required claim missing or not a string: {self.principal_claim}")
        exp, iat = _number(claims, "exp"), _number(claims, "iat")
        if exp is None:
            raise TokenInvalid("Required claim missing: exp")
        skew = self.allowable_clock_skew_ms
        if now_ms - skew >= exp * 1000:
            raise TokenInvalid(f"The indicated time is too long ago: exp={exp}")
        if iat is not None:
            if now_ms + skew < iat * 1000:
                raise TokenInvalid(f"The Issued At value is in the future: iat={iat}")
            if exp <= iat:
                raise TokenInvalid(f"The Expiration Time time ({exp}) was not after the Issued At time ({iat})")
        scope = self._scope(claims)
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise TokenInvalid(f"The provided scope ({sorted(scope)}) was missing a required scope ({missing})",
                               scope=" ".join(self.required_scope))
        return UnsecuredToken(principal, int(exp * 1000), scope, claims)

    def _scope(self, claims: dict) -> frozenset[str]:
        value = claims.get(self.scope_claim)
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return frozenset(value)
        raise TokenInvalid(f"The {self.scope_claim} claim is not a string or a list of strings")


class OAuthBearerServer:
    """One OAUTHBEARER exchange, server side (Kafka's ``OAuthBearerSaslServer``)."""

    def __init__(self, validator: UnsecuredValidator, now_ms: int) -> None:
        self._validator = validator
        self._now_ms = now_ms
        self._error: str | None = None
        self.token: UnsecuredToken | None = None
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self.token is not None

    @property
    def username(self) -> str | None:
        return None if self.token is None else self.token.principal_name

    @property
    def credential_expiry_ms(self) -> int | None:
        return None if self.token is None else self.token.lifetime_ms

    def step(self, data: bytes) -> bytes:
        """Feed one client message: ``b""`` on success, the JSON error challenge when the
        token is invalid; raises :class:`OAuthBearerError` when the exchange fails."""
        if self.token is not None:
            raise OAuthBearerError("Authentication failed: unexpected message after completion", public=True)
        if data == SEPARATOR.encode() and self._error is not None:
            raise OAuthBearerError(self._error, public=True)
        self._error = None
        first = parse_client_initial_response(data)
        try:
            token = self._validator.validate(first.token, self._now_ms)
        except TokenInvalid as exc:
            self._error = exc.json()
            return self._error.encode()
        if first.authzid and first.authzid != token.principal_name:
            raise OAuthBearerError(
                f"Authentication failed: Client requested an authorization id ({first.authzid}) that is different "
                f"from the token's principal name ({token.principal_name})", public=True)
        self.token, self.extensions = token, first.extensions
        return b""


def unsecured_token(claims: dict) -> str:
    """An unsecured JWS for ``claims`` (tests and development clients)."""
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none'})}.{part(claims)}."
