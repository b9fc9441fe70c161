"""A connection's authentication, sans-IO: Kafka's ``SaslServerAuthenticator`` as a
state machine the connection holds and asks before serving each request.

Theory of operation
-------------------
A connection on a SASL listener holds a :class:`SaslSession`; a connection on a listener
without SASL holds an :class:`AuthenticatedSession` (principal ``User:ANONYMOUS``, or the
TLS client certificate's principal). Both answer the same three calls:

* :meth:`admit` — before a request is decoded past its header: :data:`SERVE` (route it
  normally, with :attr:`principal`), :data:`SASL` (call :meth:`handshake` or
  :meth:`authenticate`), :data:`REJECT` (answer this request with ``error_code`` and then
  close) or :data:`CLOSE` (close without answering, after ``delay_ms``);
* :meth:`handshake` (SaslHandshake, 17) and :meth:`authenticate` (SaslAuthenticate, 36)
  return a :class:`SaslReply`: the response body (a dict in the request's version) and,
  on failure, ``close=True`` with ``delay_ms``: send the response after that delay, then
  close (Kafka's ``connection.failed.authentication.delay.ms``: the failure answer and the
  close are both delayed, which slows password guessing).

States (``TRANSITIONS`` lists the legal moves; :meth:`_to` raises on any other)::

    INITIAL --ApiVersions--> HANDSHAKE --SaslHandshake(ok)--> AUTHENTICATE --done--> COMPLETE
    INITIAL --SaslHandshake(ok)--> AUTHENTICATE
    COMPLETE --SaslHandshake (client sent SaslAuthenticate v1+)--> AUTHENTICATE (re-authentication)
    COMPLETE --SaslHandshake(other mechanism)--> REAUTH_BAD_MECHANISM --SaslAuthenticate--> FAILED
    any --failure--> FAILED (every later request: CLOSE)

Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served; any
other request closes the connection (Kafka: ``IllegalSaslStateException`` "Unexpected Kafka
request of type X during SASL handshake/authentication"). A frame larger than
``sasl.server.max.receive.size`` before authentication closes it too: the connection
bounds frames by it at their size field while :attr:`SaslSession.authenticated` is
False, so such a frame is never received; :meth:`SaslSession.admit` checks the size again.

Re-authentication (KIP-368): when authentication completes, the session lifetime is
``connections.max.reauth.ms`` (0 = none), capped by the credential's own expiry (an
OAUTHBEARER token's ``exp``); SaslAuthenticate v1+ reports it as ``session_lifetime_ms``.
Once it has passed, any request other than a re-authentication SaslHandshake closes the
connection. A re-authentication must keep the mechanism and the principal.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..protocol.errors import ErrorCode
from .errors import SaslFailure
from .oauthbearer import OAuthBearerServer, UnsecuredValidator
from .sasl_plain import PlainServer
from .scram import ScramCredential, ScramMechanism, ScramServer

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
ANONYMOUS = "User:ANONYMOUS"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""The mechanisms hightide implements (``sasl.enabled.mechanisms`` may list these)."""

SERVE, SASL, REJECT, CLOSE = "serve", "sasl", "reject", "close"


class State(enum.Enum):
    INITIAL = "initial"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    REAUTH_BAD_MECHANISM = "reauth_bad_mechanism"
    COMPLETE = "complete"
    FAILED = "failed"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.INITIAL: frozenset({State.HANDSHAKE, State.AUTHENTICATE, State.FAILED}),
    State.HANDSHAKE: frozenset({State.AUTHENTICATE, State.FAILED}),
    State.AUTHENTICATE: frozenset({State.COMPLETE, State.FAILED}),
    State.COMPLETE: frozenset({State.AUTHENTICATE, State.REAUTH_BAD_MECHANISM, State.FAILED}),
    State.REAUTH_BAD_MECHANISM: frozenset({State.FAILED}),
    State.FAILED: frozenset(),
}


class IllegalTransition(Exception):
    """A move the state table does not allow (a bug in the caller or here)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with a request (see the module doc): ``action`` is SERVE, SASL, REJECT
    or CLOSE; ``error_code`` is the error to answer with for REJECT; ``reason`` is for
    the log; ``delay_ms`` delays a CLOSE."""
    action: str
    reason: str = ""
    error_code: ErrorCode = ErrorCode.none
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class SaslReply:
    """A SaslHandshake/SaslAuthenticate response body; when ``close``, send it after
    ``delay_ms`` and then close the connection."""
    body: dict
    close: bool = False
    delay_ms: int = 0


class MechanismServer(Protocol):
    """What a mechanism exchange offers the session (PlainServer, ScramServer and
    OAuthBearerServer all have this shape): ``step`` raises :class:`SaslFailure`."""

    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None: ...

    def step(self, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class SaslServerConfig:
    """The broker settings a session needs, by Kafka config name:
    ``sasl.enabled.mechanisms`` (``enabled``), the PLAIN users of the listener's
    ``plain.sasl.jaas.config``, SCRAM credentials (``scram_lookup(mechanism, user)``
    reads the current metadata image), the OAUTHBEARER unsecured validator options,
    ``connections.max.reauth.ms`` (and its per-mechanism overrides),
    ``connection.failed.authentication.delay.ms`` and
    ``sasl.server.max.receive.size``."""
    enabled: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    scram_lookup: Callable[[ScramMechanism, str], ScramCredential | None] = lambda m, u: None
    oauth_validator: UnsecuredValidator = field(default_factory=UnsecuredValidator)
    max_reauth_ms: int = 0
    max_reauth_ms_by_mechanism: Mapping[str, int] = field(default_factory=dict)
    failed_auth_delay_ms: int = 100
    max_receive_size: int = 524288

    def __post_init__(self) -> None:
        unknown = [m for m in self.enabled if m not in MECHANISMS]
        if not self.enabled or unknown:
            raise ValueError(f"sasl.enabled.mechanisms must list some of {', '.join(MECHANISMS)}"
                             + (f"; unsupported: {', '.join(unknown)}" if unknown else ""))

    def new_server(self, mechanism: str, now_ms: int) -> MechanismServer:
        """A fresh exchange for an enabled ``mechanism``."""
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        if mechanism == "OAUTHBEARER":
            return OAuthBearerServer(self.oauth_validator, now_ms)
        scram = ScramMechanism.from_name(mechanism)
        assert scram is not None, mechanism
        return ScramServer(scram, lambda user: self.scram_lookup(scram, user))


def _api_name(api_key: int) -> str:
    from kio.schema.index import api_key_map
    return api_key_map.get(api_key, str(api_key)).upper()


class AuthenticatedSession:
    """A connection on a listener without SASL: authenticated from the start as
    ``principal`` (``User:ANONYMOUS`` on PLAINTEXT, the certificate's principal on SSL).
    SaslHandshake/SaslAuthenticate are SERVEd: their handlers answer ILLEGAL_SASL_STATE,
    as Kafka's ``KafkaApis`` does."""

    def __init__(self, principal: str = ANONYMOUS) -> None:
        self.principal = principal

    @property
    def authenticated(self) -> bool:
        return True

    def admit(self, api_key: int, frame_size: int, now_ms: int) -> Admission:
        return Admission(SERVE)


class SaslSession:
    """One connection's SASL authentication (see the module doc)."""

    def __init__(self, config: SaslServerConfig) -> None:
        self.config = config
        self.state = State.INITIAL
        self.principal = ANONYMOUS
        self.mechanism: str | None = None
        self.session_expiry_ms: int | None = None
        self._server: MechanismServer | None = None
        self._supports_reauth = False
        self._reauth_from: tuple[str, str] | None = None  # (mechanism, principal) being re-authenticated
        self._bad_mechanism = ""

    @property
    def authenticated(self) -> bool:
        return self.state == State.COMPLETE

    def _to(self, state: State) -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"{self.state.name} -> {state.name}")
        self.state = state

    def _fail(self) -> None:
        self._server = None
        if self.state != State.FAILED:
            self._to(State.FAILED)

    def admit(self, api_key: int, frame_size: int, now_ms: int) -> Admission:
        """Decide what to do with a request of ``api_key`` whose frame is ``frame_size``
        bytes, arriving at ``now_ms``. A CLOSE or REJECT leaves the session FAILED."""
        delay = self.config.failed_auth_delay_ms
        if self.state == State.FAILED:
            return Admission(CLOSE, "authentication failed earlier on this connection")
        if self.state == State.COMPLETE:
            return self._admit_authenticated(api_key, now_ms)
        if frame_size > self.config.max_receive_size:
            self._fail()
            return Admission(CLOSE, "Failing SASL authentication due to invalid receive size", delay_ms=delay)
        if self.state in (State.INITIAL, State.HANDSHAKE):
            if api_key == API_VERSIONS:
                if self.state == State.INITIAL:
                    self._to(State.HANDSHAKE)
                return Admission(SERVE)
            if api_key == SASL_HANDSHAKE:
                return Admission(SASL)
            self._fail()
            return Admission(CLOSE, f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake.",
                             delay_ms=delay)
        if api_key == SASL_AUTHENTICATE:
            return Admission(SASL)
        self._fail()
        return Admission(REJECT, f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication.",
                         ErrorCode.illegal_sasl_state, delay)

    def _admit_authenticated(self, api_key: int, now_ms: int) -> Admission:
        if api_key == SASL_HANDSHAKE and self._supports_reauth:
            return Admission(SASL)
        if self.session_expiry_ms is not None and now_ms > self.session_expiry_ms:
            self._fail()
            return Admission(CLOSE, f"session of {self.principal} expired (connections.max.reauth.ms)")
        return Admission(SERVE)

    def handshake(self, version: int, mechanism: str, now_ms: int) -> SaslReply:
        """Answer a SaslHandshake admitted with SASL (v1; v0 is refused, as in Kafka 4)."""
        enabled = list(self.config.enabled)
        delay = self.config.failed_auth_delay_ms
        if version < 1:
            self._fail()
            return SaslReply({"error_code": ErrorCode.unsupported_version, "mechanisms": enabled}, True, delay)
        if mechanism not in self.config.enabled:
            self._fail()
            return SaslReply({"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}, True, delay)
        if self.state == State.COMPLETE:
            assert self.mechanism is not None
            self._reauth_from = (self.mechanism, self.principal)
            if mechanism != self.mechanism:
                self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                       f"re-authentication of mechanism '{self.mechanism}'")
                self._to(State.REAUTH_BAD_MECHANISM)
                return SaslReply({"error_code": ErrorCode.none, "mechanisms": enabled})
        self.mechanism = mechanism
        self._server = self.config.new_server(mechanism, now_ms)
        self._to(State.AUTHENTICATE)
        return SaslReply({"error_code": ErrorCode.none, "mechanisms": enabled})

    def authenticate(self, version: int, auth_bytes: bytes, now_ms: int) -> SaslReply:
        """Answer a SaslAuthenticate admitted with SASL: feed ``auth_bytes`` to the
        mechanism; a failure answers SASL_AUTHENTICATION_FAILED and closes after the delay."""
        self._supports_reauth = self._supports_reauth or version > 0
        if self.state == State.REAUTH_BAD_MECHANISM:
            return self._failure(self._bad_mechanism)
        server = self._server
        assert server is not None and self.state == State.AUTHENTICATE
        try:
            challenge = server.step(auth_bytes)
            if not server.complete:
                return SaslReply({"error_code": ErrorCode.none, "error_message": None, "auth_bytes": challenge,
                                  "session_lifetime": 0})
            principal = f"User:{server.username}"
            if self._reauth_from is not None and principal != self._reauth_from[1]:
                old = self._reauth_from[1].split(":", 1)
                new = principal.split(":", 1)
                raise SaslFailure(f"Cannot change principals during re-authentication from {old[0]}.{old[1]}: "
                                  f"{new[0]}.{new[1]}", public=True)
        except SaslFailure as exc:
            text = "re-authentication" if self._reauth_from else "authentication"
            return self._failure(str(exc) if exc.public else
                                 f"Authentication failed during {text} due to invalid credentials with SASL "
                                 f"mechanism {self.mechanism}")
        lifetime = self._lifetime(getattr(server, "credential_expiry_ms", None), now_ms)
        self.session_expiry_ms = now_ms + lifetime if lifetime is not None else None
        self.principal = principal
        self._server, self._reauth_from = None, None
        self._to(State.COMPLETE)
        return SaslReply({"error_code": ErrorCode.none, "error_message": None, "auth_bytes": challenge,
                          "session_lifetime": lifetime or 0})

    def _lifetime(self, credential_expiry_ms: int | None, now_ms: int) -> int | None:
        """Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``: None when the
        session never expires."""
        assert self.mechanism is not None
        max_reauth = self.config.max_reauth_ms_by_mechanism.get(self.mechanism, self.config.max_reauth_ms)
        if credential_expiry_ms is None and max_reauth <= 0:
            return None
        if credential_expiry_ms is None:
            return max_reauth
        remaining = max(0, credential_expiry_ms - now_ms)
        return remaining if max_reauth <= 0 else min(remaining, max_reauth)

    def _failure(self, message: str) -> SaslReply:
        self._fail()
        return SaslReply({"error_code": ErrorCode.sasl_authentication_failed, "error_message": message,
                          "auth_bytes": b"", "session_lifetime": 0}, True, self.config.failed_auth_delay_ms)
