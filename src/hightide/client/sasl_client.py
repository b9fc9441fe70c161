"""The client side of hightide's SASL mechanisms, as a generator of tokens (sans-IO):
:func:`sasl_exchange` yields each token to send in a SaslAuthenticate and receives the
server's answer; it returns when authentication is complete and raises
:class:`~hightide.security.errors.SaslFailure` (a SCRAM server answer that does not
verify) or ``ValueError`` (an unknown mechanism)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Generator

from ..security.scram import ScramClient, ScramMechanism
from .properties import ClientSecurity


def _b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).rstrip(b"=").decode()


def unsecured_token(subject: str, lifetime_s: int = 3600) -> str:
    """Kafka's unsecured OAUTHBEARER token (``alg: none``, no signature) for ``subject``."""
    now = int(time.time())
    return f"{_b64url({'alg': 'none'})}.{_b64url({'sub': subject, 'iat': now, 'exp': now + lifetime_s})}."


def sasl_exchange(sec: ClientSecurity) -> Generator[bytes, bytes, None]:
    """The tokens of one authentication with ``sec.mechanism`` (see the module doc)."""
    if sec.mechanism == "PLAIN":
        yield f"\0{sec.username}\0{sec.password}".encode()
        return
    if sec.mechanism == "OAUTHBEARER":
        yield f"n,,\x01auth=Bearer {unsecured_token(sec.username)}\x01\x01".encode()
        return
    mechanism = ScramMechanism.from_name(sec.mechanism)
    if mechanism is None:
        raise ValueError(f"unsupported SASL mechanism {sec.mechanism}")
    client = ScramClient(mechanism, sec.username, sec.password)
    server_first = yield client.first()
    server_final = yield client.final(server_first)
    client.verify(server_final)
