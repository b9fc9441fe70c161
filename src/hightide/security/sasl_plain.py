"""SASL/PLAIN (RFC 4616), server side, sans-IO, with users from Kafka's JAAS config.

Users come from the same place Kafka reads them: the ``sasl.jaas.config`` of the
listener and mechanism (``listener.name.<listener>.plain.sasl.jaas.config``), whose
``PlainLoginModule`` options name each user as ``user_<name>="<password>"``::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

(``username``/``password`` are the broker's own client credentials for inter-broker
connections; only the ``user_`` options are users.) :func:`parse_jaas_config` reads that
string; :func:`plain_users` picks the users out of it.

Passwords are compared with :func:`hmac.compare_digest` (constant time for equal
lengths); the failure messages are Kafka's ``PlainSaslServer`` messages, which never
contain the password.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import SaslFailure

MAX_MESSAGE_BYTES = 65536
"""Longest PLAIN message accepted (RFC 4616 requires at least 255 octets per field)."""
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")


class PlainError(SaslFailure):
    """PLAIN authentication failed; ``str()`` is Kafka's message (shown to the client)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, public=True)


class JaasConfigError(ValueError):
    """A ``sasl.jaas.config`` value that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class JaasModule:
    """One login module of a JAAS config: class name, control flag, options."""
    login_module: str
    flag: str
    options: Mapping[str, str]


def parse_jaas_config(text: str) -> JaasModule:
    """Parse a Kafka ``sasl.jaas.config`` value: exactly one
    ``<LoginModule> <flag> key=value ... ;`` entry, values bare or double-quoted (with
    ``\\"`` and ``\\\\`` escapes). Raises :class:`JaasConfigError` (Kafka also requires
    exactly one login module)."""
    tokens = _jaas_tokens(text)
    if len(tokens) < 3 or tokens[-1] != (";", False):
        raise JaasConfigError("JAAS config entry not terminated by semi-colon")
    if tokens.count((";", False)) != 1:
        raise JaasConfigError("JAAS config property contains more than one login module")
    (module, _), (flag, _), *rest = tokens[:-1]
    if flag.lower() not in _FLAGS:
        raise JaasConfigError(f"Invalid control flag {flag!r} in JAAS config")
    if len(rest) % 3:
        raise JaasConfigError("Invalid JAAS config: expected key=value options")
    options: dict[str, str] = {}
    for i in range(0, len(rest), 3):
        (key, key_quoted), eq, (value, _) = rest[i:i + 3]
        if eq != ("=", False) or key_quoted or key == "=":
            raise JaasConfigError(f"Invalid JAAS config: expected key=value near {key!r}")
        options[key] = value
    return JaasModule(module, flag.lower(), options)


def _jaas_tokens(text: str) -> list[tuple[str, bool]]:
    """(text, quoted) tokens; ``=`` and ``;`` are unquoted one-character tokens."""
    tokens: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            tokens.append((ch, False))
            i += 1
        elif ch == '"':
            out, i = [], i + 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(text[i])
                i += 1
            if i >= n:
                raise JaasConfigError("Invalid JAAS config: unterminated quoted value")
            tokens.append(("".join(out), True))
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            tokens.append((text[start:i], False))
    return tokens


def plain_users(jaas: JaasModule) -> dict[str, str]:
    """The ``user_<name>`` options of a PlainLoginModule config as {name: password}."""
    if jaas.login_module != PLAIN_LOGIN_MODULE:
        raise JaasConfigError(f"expected {PLAIN_LOGIN_MODULE} for PLAIN, got {jaas.login_module}")
    return {k[len("user_"):]: v for k, v in jaas.options.items() if k.startswith("user_")}


class PlainServer:
    """One PLAIN exchange: a single client message ``[authzid] NUL authcid NUL passwd``.
    ``users`` maps user name to password."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self.username is not None

    def step(self, data: bytes) -> bytes:
        """Check the client's message; returns ``b""`` on success, raises
        :class:`PlainError` with Kafka's message otherwise."""
        if self.username is not None:
            raise PlainError("Authentication failed: unexpected message after completion")
        if len(data) > MAX_MESSAGE_BYTES:
            raise PlainError("Invalid SASL/PLAIN response: message too long")
        try:
            tokens = data.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(tokens) != 3:
            raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise PlainError("Authentication failed: username not specified")
        if not password:
            raise PlainError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compare against something even for an unknown user, so timing does not tell.
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00" + password).encode())
        if expected is None or not ok:
            raise PlainError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise PlainError("Authentication failed: Client requested an authorization id that is different from "
                             "username")
        self.username = username
        return b""
