"""Listener security settings from Kafka's broker config names (sans-IO: no sockets, no
``ssl`` contexts; :mod:`hightide.server.tls` builds those from :class:`TlsSettings`).

Theory of operation
-------------------
A listener ``NAME://host:port`` speaks the security protocol
``listener.security.protocol.map`` gives its name: ``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT`` or ``SASL_SSL``. The map's default is Kafka's (each protocol's own
name maps to itself); as in Kafka's KRaft mode, a controller listener the map does not
name is PLAINTEXT. Any other listener the map does not name is a configuration error.

Every setting can be scoped to one listener with Kafka's prefix
``listener.name.<listener lower case>.`` (``listener.name.sasl_ssl.ssl.client.auth``);
the prefixed value wins over the plain one. TLS material is PEM, as Kafka's
``ssl.keystore.type=PEM`` (the only keystore type hightide reads):

* ``ssl.keystore.location``: a PEM file with the certificate chain and the private key,
  or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (PEM text inline);
  ``ssl.key.password`` decrypts an encrypted key;
* ``ssl.truststore.location`` (PEM CA certificates; ``ssl.truststore.certificates``
  inline) verifies client certificates;
* ``ssl.client.auth``: ``required``, ``requested`` or ``none`` (default);
* ``ssl.principal.mapping.rules``: Kafka's ``SslPrincipalMapper`` rules (see
  :func:`map_principal`), default ``DEFAULT`` (the full RFC 2253 DN, as Java prints it:
  :mod:`hightide.security.x500`); a DN no rule applies to fails the authentication.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .settings import SECURITY_CONFIGS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}

#: The listener-level broker configs read here (Kafka's names and defaults).
LISTENER_CONFIGS: dict[str, tuple[Any, str]] = {
    "listener.security.protocol.map": ("", "LISTENER:PROTOCOL pairs, e.g. INTERNAL:SASL_SSL,EXTERNAL:SSL "
                                           "(default: each protocol's own name, and controller listeners PLAINTEXT)."),
    "inter.broker.listener.name": ("", "Listener brokers use to reach each other (default: the first broker "
                                       "listener)."),
    "sasl.mechanism.controller.protocol": ("GSSAPI", "SASL mechanism a broker uses towards the controller."),
    "sasl.mechanism.inter.broker.protocol": ("GSSAPI", "SASL mechanism a broker uses towards other brokers."),
    "ssl.keystore.type": ("PEM", "Only PEM is read."),
    "ssl.keystore.location": ("", "PEM file with the certificate chain and the private key."),
    "ssl.keystore.certificate.chain": ("", "PEM certificate chain (inline), with ssl.keystore.key."),
    "ssl.keystore.key": ("", "PEM private key (inline)."),
    "ssl.key.password": ("", "Password of an encrypted private key."),
    "ssl.keystore.password": ("", "Accepted for Kafka configs; PEM keys use ssl.key.password."),
    "ssl.truststore.type": ("PEM", "Only PEM is read."),
    "ssl.truststore.location": ("", "PEM file of CA certificates that client certificates must chain to."),
    "ssl.truststore.certificates": ("", "PEM CA certificates (inline)."),
    "ssl.truststore.password": ("", "Accepted for Kafka configs; not needed for PEM."),
    "ssl.client.auth": ("none", "required, requested or none: whether clients must present a certificate."),
    "ssl.principal.mapping.rules": ("DEFAULT", "Rules mapping a client certificate's DN to a principal name."),
    "ssl.enabled.protocols": ("TLSv1.2,TLSv1.3", "TLS versions accepted."),
    "ssl.protocol": ("TLSv1.3", "Accepted for Kafka configs."),
    "ssl.cipher.suites": ("", "OpenSSL cipher list for TLS 1.2 (empty: the ssl module's default)."),
    "ssl.endpoint.identification.algorithm": ("https", "Client side only; accepted for Kafka configs."),
    "connections.authentication.timeout.ms": (10000, "hightide: a connection on a SASL listener must authenticate "
                                                     "within this long of connecting, and a TLS handshake must "
                                                     "finish within it; else it is closed."),
}

_CLIENT_AUTH = ("required", "requested", "none")


class ListenerConfigError(ValueError):
    """A listener security setting is missing, unknown or inconsistent (the message names it)."""


def is_security_config(name: str) -> bool:
    """Whether ``name`` is a broker config this package reads (including every
    ``listener.name.<listener>.*`` override)."""
    return name in LISTENER_CONFIGS or name in SECURITY_CONFIGS or name.startswith("listener.name.")


def sensitive(name: str) -> bool:
    """Whether a config's value is secret (passwords, keys, JAAS configs): never logged
    or described."""
    return name.endswith(("password", "jaas.config", "keystore.key"))


def _scoped(configs: Mapping[str, Any], listener: str, name: str) -> Any:
    """``listener.name.<listener>.<name>``, else ``<name>``, else the default."""
    prefixed = f"listener.name.{listener.lower()}.{name}"
    if prefixed in configs:
        return configs[prefixed]
    if name in configs:
        return configs[name]
    return LISTENER_CONFIGS[name][0] if name in LISTENER_CONFIGS else None


def protocol_map(configs: Mapping[str, Any], controller_names: tuple[str, ...] = ()) -> dict[str, str]:
    """``listener.security.protocol.map`` parsed (names upper-cased as Kafka compares
    them). Raises ListenerConfigError for a malformed pair or an unknown protocol."""
    raw = str(configs.get("listener.security.protocol.map") or "").strip()
    if not raw:
        out = dict(DEFAULT_PROTOCOL_MAP)
        for name in controller_names:
            out.setdefault(name.upper(), "PLAINTEXT")
        return out
    out = {}
    for pair in raw.split(","):
        name, sep, protocol = pair.strip().partition(":")
        if not sep or not name or protocol.strip().upper() not in PROTOCOLS:
            raise ListenerConfigError(f"listener.security.protocol.map: invalid entry {pair.strip()!r} "
                                      f"(expected LISTENER:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)})")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def listener_protocol(configs: Mapping[str, Any], listener: str, controller_names: tuple[str, ...] = ()) -> str:
    """The security protocol of ``listener``. Raises ListenerConfigError when the map
    does not name it."""
    mapping = protocol_map(configs, controller_names)
    protocol = mapping.get(listener.upper())
    if protocol is None:
        raise ListenerConfigError(f"No security protocol defined for listener {listener} "
                                  "(add it to listener.security.protocol.map)")
    return protocol


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One TLS listener's (or client's) material and policy, PEM."""
    cert_file: str = ""
    cert_chain: str = ""
    key: str = ""
    key_password: str = ""
    ca_file: str = ""
    ca_certs: str = ""
    client_auth: str = "none"
    principal_rules: tuple[tuple[str, str, str, str], ...] = ()  # (kind, pattern, replacement, case)
    protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    ciphers: str = ""


def tls_settings(configs: Mapping[str, Any], listener: str) -> TlsSettings:
    """The TLS settings of ``listener`` (listener-scoped values first). Raises
    ListenerConfigError when no certificate is configured, the keystore type is not
    PEM, or ``ssl.client.auth`` / the mapping rules are invalid."""
    def get(name: str) -> str:
        value = _scoped(configs, listener, name)
        return "" if value is None else str(value)

    for kind in ("ssl.keystore.type", "ssl.truststore.type"):
        if get(kind).upper() != "PEM":
            raise ListenerConfigError(f"{kind}={get(kind)} on listener {listener}: hightide reads PEM only "
                                      "(convert a JKS/PKCS12 store with keytool/openssl)")
    settings = TlsSettings(
        cert_file=get("ssl.keystore.location"), cert_chain=get("ssl.keystore.certificate.chain"),
        key=get("ssl.keystore.key"), key_password=get("ssl.key.password"),
        ca_file=get("ssl.truststore.location"), ca_certs=get("ssl.truststore.certificates"),
        client_auth=get("ssl.client.auth").strip().lower() or "none",
        principal_rules=parse_principal_rules(get("ssl.principal.mapping.rules")),
        protocols=tuple(p.strip() for p in get("ssl.enabled.protocols").split(",") if p.strip()),
        ciphers=get("ssl.cipher.suites"))
    if not settings.cert_file and not (settings.cert_chain and settings.key):
        raise ListenerConfigError(f"listener {listener} uses TLS but has no certificate: set ssl.keystore.location "
                                  "(PEM with certificate chain and key) or ssl.keystore.certificate.chain and "
                                  f"ssl.keystore.key (or their listener.name.{listener.lower()}. forms)")
    if settings.client_auth not in _CLIENT_AUTH:
        raise ListenerConfigError(f"ssl.client.auth on listener {listener} must be one of "
                                  f"{', '.join(_CLIENT_AUTH)}, got {settings.client_auth!r}")
    if settings.client_auth != "none" and not (settings.ca_file or settings.ca_certs):
        raise ListenerConfigError(f"ssl.client.auth={settings.client_auth} on listener {listener} needs "
                                  "ssl.truststore.location (PEM CA certificates) to verify client certificates")
    return settings


# -- principals from certificates (Kafka's DefaultKafkaPrincipalBuilder + SslPrincipalMapper) --------

_RULE = re.compile(r"(DEFAULT)|RULE:((?:[^/\\]|\\.)*)/((?:[^/\\]|\\.)*)/([LU]?)")


def parse_principal_rules(text: str) -> tuple[tuple[str, str, str, str], ...]:
    """``ssl.principal.mapping.rules``: a comma-separated list of ``DEFAULT`` and
    ``RULE:pattern/replacement/[L|U]`` (Java regex syntax as Python's, ``$1`` groups).
    Raises ListenerConfigError for anything else."""
    rules: list[tuple[str, str, str, str]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None:
            raise ListenerConfigError(f"ssl.principal.mapping.rules: invalid rule at {text[pos:]!r}")
        if m.group(1):
            rules.append(("DEFAULT", "", "", ""))
        else:
            try:
                re.compile(m.group(2))
            except re.error as exc:
                raise ListenerConfigError(f"ssl.principal.mapping.rules: bad pattern {m.group(2)!r}: {exc}") from None
            rules.append(("RULE", m.group(2), m.group(3), m.group(4)))
        pos = m.end()
        sep = re.compile(r"\s*,\s*|\s*$").match(text, pos)
        if sep is None or (sep.end() == pos and pos < len(text)):
            raise ListenerConfigError(f"ssl.principal.mapping.rules: expected ',' at {text[pos:]!r}")
        pos = sep.end()
    return tuple(rules) or (("DEFAULT", "", "", ""),)


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a DN (Kafka's
    ``SslPrincipalMapper.NoMatchingRule``): the client's authentication fails."""


def _rule_text(rule: tuple[str, str, str, str]) -> str:
    kind, pattern, replacement, case = rule
    return "DEFAULT" if kind == "DEFAULT" else f"RULE:{pattern}/{replacement}" + (f"/{case}" if case else "")


def map_principal(dn: str, rules: tuple[tuple[str, str, str, str], ...]) -> str:
    """The principal name for a certificate DN (as :func:`hightide.security.x500.certificate_subject_dn`
    prints it): the first rule that matches (``DEFAULT`` always matches and keeps the DN;
    a RULE must match the whole DN), lower/upper-cased by its flag. Raises
    :class:`NoMatchingRule` when none applies, as Kafka's ``SslPrincipalMapper``."""
    for kind, pattern, replacement, case in rules:
        if kind == "DEFAULT":
            return dn
        m = re.fullmatch(pattern, dn)
        if m is None:
            continue
        name = re.sub(r"\$(\d)", lambda g: m.group(int(g.group(1))) or "", replacement)
        return name.lower() if case == "L" else name.upper() if case == "U" else name
    raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(map(_rule_text, rules))}]")
