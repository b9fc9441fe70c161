"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, sans-IO.

Theory of operation
-------------------
A :class:`ScramServer` is fed the client's messages one at a time (the ``auth_bytes`` of
successive SaslAuthenticate requests) and answers the bytes to send back::

    client-first  "n,,n=user,r=<cnonce>[,ext=...]"    -> server-first "r=<cnonce><snonce>,s=<salt>,i=<n>"
    client-final  "c=biws,r=<cnonce><snonce>,p=<proof>" -> server-final "v=<server signature>"

Credentials are kept the way Kafka keeps them (``UserScramCredentialRecord``): the salt,
the iteration count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` — never the password nor the salted
password. The proof is checked by recomputing ``H(ClientProof XOR ClientSignature)`` and
comparing it with StoredKey in constant time.

Parsing is strict and bounded: a message longer than :data:`MAX_MESSAGE_BYTES`, not
UTF-8, or not matching the RFC grammar fails with :class:`ScramError` carrying the RFC
``server-error-value`` (``e=...``); nothing here loops over attacker-controlled counts
beyond the message length, and PBKDF2 runs only in :func:`salted_password` (clients and
admin tools), never on the server's authentication path. A server that failed stays
failed; every later call raises.

Kafka specifics kept: an unknown user fails at once (no simulated exchange, as Kafka's
``ScramSaslServer``); an authorization id must equal the user name; the
``tokenauth=true`` extension (delegation tokens, not supported by hightide) fails like an
unknown user; other extensions are ignored; stored credentials with fewer than 4096
iterations are refused.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from .errors import SaslFailure

MAX_MESSAGE_BYTES = 8192
"""Longest SCRAM message accepted (Kafka bounds the whole SaslAuthenticate request by
``sasl.server.max.receive.size``; a SCRAM message is far smaller)."""
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramMechanism(enum.Enum):
    """The SCRAM mechanisms with Kafka's type codes (AlterUserScramCredentials)."""
    SCRAM_SHA_256 = (1, "SCRAM-SHA-256", "sha256")
    SCRAM_SHA_512 = (2, "SCRAM-SHA-512", "sha512")

    @property
    def type(self) -> int:
        return self.value[0]

    @property
    def mechanism_name(self) -> str:
        return self.value[1]

    @property
    def hash_name(self) -> str:
        return self.value[2]

    @classmethod
    def from_type(cls, code: int) -> ScramMechanism | None:
        """The mechanism with Kafka type ``code``, None for UNKNOWN (0) or any other."""
        return next((m for m in cls if m.type == code), None)

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)


class ScramError(SaslFailure):
    """The exchange failed. ``error`` is the RFC 5802 server-error-value
    (``invalid-proof``, ``unknown-user``, ...); ``reason`` says why, for the server log
    (it never contains a secret); ``public`` is True when Kafka shows ``reason`` to the
    client, False when the client only gets the generic authentication-failed text."""

    def __init__(self, error: str, reason: str, *, public: bool = False) -> None:
        super().__init__(reason, public=public)
        self.error = error
        self.reason = reason

    def server_error_message(self) -> bytes:
        """RFC 5802's server-final-message for this error: ``e=<value>``."""
        return f"e={self.error}".encode()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``Hi(Normalize(password), salt, i)`` = PBKDF2-HMAC (the password is used
    as UTF-8 without SASLprep, as Kafka does)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def credential_from_salted(hash_name: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """StoredKey and ServerKey from a salted password (what AlterUserScramCredentials
    carries): Kafka's ``ScramControlManager.finishUpsertion``."""
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(hash_name, client_key).digest(),
                           _hmac(hash_name, salted, b"Server Key"), iterations)


def credential_from_password(mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password`` (random 32-byte salt unless given)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password(mechanism.hash_name, password, salt, iterations)
    return credential_from_salted(mechanism.hash_name, salt, salted, iterations)


def _decode_saslname(value: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` (or a
    ``,``) is an invalid username encoding."""
    if "," in value or not value:
        raise ScramError("invalid-username-encoding", "invalid user name encoding")
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "=":
            esc = value[i:i + 3]
            if esc not in ("=2C", "=3D"):
                raise ScramError("invalid-username-encoding", "invalid '=' escape in user name")
            out.append("," if esc == "=2C" else "=")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    """The inverse of the saslname decoding (``=`` first, then ``,``)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _text(data: bytes) -> str:
    if len(data) > MAX_MESSAGE_BYTES:
        raise ScramError("other-error", f"SCRAM message of {len(data)} bytes is too long")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("invalid-encoding", "SCRAM message is not UTF-8") from None


def _printable_nonce(value: str) -> str:
    if not value or any(not ("\x21" <= c <= "\x7e") or c == "," for c in value):
        raise ScramError("invalid-encoding", "invalid nonce")
    return value


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError("invalid-encoding", "invalid base64") from None


def _attributes(parts: list[str]) -> list[tuple[str, str]]:
    """``k=v`` attributes: RFC 5802's one-letter attributes, or an extension (Kafka's
    ``tokenauth=true``) whose name is several ASCII letters."""
    out = []
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key or not key.isascii() or not key.isalpha():
            raise ScramError("invalid-encoding", "malformed attribute")
        out.append((key, value))
    return out


def _rfc_attribute(attr: tuple[str, str], name: str) -> str:
    if attr[0] != name:
        raise ScramError("invalid-encoding", f"expected attribute {name}=")
    return attr[1]


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """A parsed client-first-message."""
    gs2_header: str
    authzid: str
    username: str
    nonce: str
    bare: str
    extensions: dict[str, str]


def parse_client_first(data: bytes) -> ClientFirst:
    """Parse ``gs2-header client-first-message-bare``; raises :class:`ScramError`."""
    text = _text(data)
    flag, sep1, rest = text.partition(",")
    authz, sep2, bare = rest.partition(",")
    if not sep1 or not sep2:
        raise ScramError("invalid-encoding", "missing GS2 header")
    if flag.startswith("p="):
        raise ScramError("channel-binding-not-supported", "channel binding is not supported")
    if flag not in ("n", "y"):
        raise ScramError("invalid-encoding", "invalid GS2 channel binding flag")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            raise ScramError("invalid-encoding", "invalid authorization id")
        authzid = _decode_saslname(authz[2:])
    parts = bare.split(",")
    if parts[0].startswith("m="):
        raise ScramError("extensions-not-supported", "mandatory extension not supported")
    attrs = _attributes(parts)
    if len(attrs) < 2:
        raise ScramError("invalid-encoding", "expected n=<user>,r=<nonce>")
    username, nonce = _rfc_attribute(attrs[0], "n"), _rfc_attribute(attrs[1], "r")
    return ClientFirst(f"{flag},{authz},", authzid, _decode_saslname(username), _printable_nonce(nonce), bare,
                       dict(attrs[2:]))


@dataclass(frozen=True, slots=True)
class ClientFinal:
    """A parsed client-final-message."""
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(data: bytes) -> ClientFinal:
    """Parse ``c=...,r=...[,ext...],p=...``; raises :class:`ScramError`."""
    text = _text(data)
    head, sep, proof = text.rpartition(",p=")
    if not sep:
        raise ScramError("invalid-encoding", "missing proof")
    attrs = _attributes(head.split(","))
    if len(attrs) < 2:
        raise ScramError("invalid-encoding", "expected c=<binding>,r=<nonce>")
    binding, nonce = _rfc_attribute(attrs[0], "c"), _rfc_attribute(attrs[1], "r")
    return ClientFinal(_b64(binding), _printable_nonce(nonce), _b64(proof), head)


class ScramServer:
    """One SCRAM exchange, server side. ``lookup(username)`` returns the stored
    credential for this mechanism or None; ``nonce()`` returns the server nonce
    (printable, no ``,``; random by default)."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None],
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self._state = "first"
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def step(self, data: bytes) -> bytes:
        """Feed one client message; return the server's answer. Raises
        :class:`ScramError` (and stays failed) on any error."""
        try:
            if self._state == "first":
                return self._on_first(data)
            if self._state == "final":
                return self._on_final(data)
            raise ScramError("other-error", f"unexpected SCRAM message in state {self._state}")
        except ScramError:
            self._state = "failed"
            self._credential = None
            raise

    def _on_first(self, data: bytes) -> bytes:
        first = parse_client_first(data)
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise ScramError("unknown-user", "delegation token authentication is not supported")
        credential = self._lookup(first.username)
        if credential is None:
            raise ScramError("unknown-user", "Authentication failed: Invalid user credentials")
        if first.authzid and first.authzid != first.username:
            raise ScramError("invalid-username-encoding", "Authentication failed: Client requested an authorization "
                             "id that is different from username", public=True)
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError("other-error", f"Iterations {credential.iterations} is less than the minimum "
                             f"{MIN_ITERATIONS} for {self.mechanism.mechanism_name}")
        self._first, self._credential = first, credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={first.nonce}{_printable_nonce(self._nonce())},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _on_final(self, data: bytes) -> bytes:
        final = parse_client_final(data)
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        # Kafka's ScramSaslServer checks endsWith, not equality: librdkafka (2.0 at least)
        # sends the client nonce again in front of the server's combined nonce.
        if not final.nonce.endswith(self._server_first[2:self._server_first.index(",")]):
            raise ScramError("other-error", "Invalid client nonce in the final client message.")
        if not hmac.compare_digest(final.channel_binding, first.gs2_header.encode()):
            raise ScramError("channel-bindings-dont-match", "channel binding does not match the GS2 header")
        h = self.mechanism.hash_name
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        signature = _hmac(h, credential.stored_key, auth_message)
        if len(final.proof) != len(signature):
            raise ScramError("invalid-proof", "Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), credential.stored_key):
            raise ScramError("invalid-proof", "Invalid client credentials")
        server_signature = _hmac(h, credential.server_key, auth_message)
        self.username = first.username
        self._credential = None
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side of one exchange (hightide's own clients and the tests).
    ``first()`` -> bytes; ``final(server_first)`` -> bytes; ``verify(server_final)``
    raises :class:`ScramError` unless the server proved it knows the credential."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str,
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self._password = password
        self._bare = f"n={encode_saslname(username)},r={nonce()}"
        self._expected: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first)
        attrs = dict(_attributes(text.split(",")))
        if not attrs.get("r", "").startswith(self._bare.split(",r=", 1)[1]) or "s" not in attrs or "i" not in attrs:
            raise ScramError("invalid-encoding", "invalid server-first-message")
        count = attrs["i"]
        if not (count.isascii() and count.isdigit() and len(count) < 10) or int(count) < MIN_ITERATIONS:
            raise ScramError("invalid-encoding", "invalid iteration count")
        h = self.mechanism.hash_name
        salted = salted_password(h, self._password, _b64(attrs["s"]), int(attrs["i"]))
        cred = credential_from_salted(h, b"", salted, 0)
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = _hmac(h, salted, b"Client Key")
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(h, cred.stored_key, auth_message)))
        self._expected = b"v=" + base64.b64encode(_hmac(h, cred.server_key, auth_message))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        if self._expected is None or not hmac.compare_digest(server_final, self._expected):
            raise ScramError("invalid-proof", "the server's signature does not match")
