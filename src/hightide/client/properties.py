"""Kafka client properties (``--command-config FILE``, Spark's ``kafka.*`` options) and
the security settings hightide's client takes from them.

One loader for every hightide client tool: the file uses Kafka's properties syntax and
client config names, as ``kafka-consumer-groups.sh --command-config`` reads it
(``key=value`` or ``key: value``, ``#``/``!`` comments). :class:`ClientSecurity` holds
what :class:`~hightide.client.connection.BrokerConnection` needs to connect:

* ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL;
* ``ssl.truststore.location`` (PEM CA certificates; also ``ssl.ca.location``, librdkafka's
  name), ``ssl.keystore.location`` (PEM certificate chain and key; or librdkafka's
  ``ssl.certificate.location`` + ``ssl.key.location``), ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``https``, the default: check the broker's
  host name; empty: do not);
* ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; default GSSAPI is
  refused) with ``sasl.jaas.config`` (``username="..." password="..."``; for OAUTHBEARER
  ``unsecuredLoginStringClaim_sub="..."``) or librdkafka's ``sasl.username`` and
  ``sasl.password``.

A setting the client cannot honour (a JKS store, GSSAPI, an unknown protocol) raises
:class:`ClientConfigError` instead of connecting without the security it asks for.
Passwords are never part of a message or a ``repr``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ClientConfigError", "ClientSecurity", "admin_options_from", "load_properties", "parse_properties"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: The security properties :meth:`ClientSecurity.from_properties` reads.
SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.ca.location", "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password", "ssl.certificate.location",
    "ssl.key.location", "ssl.endpoint.identification.algorithm", "sasl.oauthbearer.sub"})


class ClientConfigError(ValueError):
    """The properties cannot be used; the message names the setting (never a secret)."""


def parse_properties(text: str) -> dict[str, str]:
    """Kafka/Java properties as a dict (no line continuations or escapes beyond ``\\=``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not seps:
            out[line] = ""
            continue
        i = min(seps)
        out[line[:i].strip()] = line[i + 1:].strip()
    return out


def load_properties(path: str) -> dict[str, str]:
    """The properties file at ``path``. Raises ClientConfigError naming the file."""
    try:
        return parse_properties(Path(path).read_text())
    except OSError as exc:
        raise ClientConfigError(f"cannot read --command-config {path}: {exc.strerror}") from None


def _jaas_options(text: str) -> dict[str, str]:
    from ..security.sasl_plain import JaasConfigError, parse_jaas_config
    try:
        return dict(parse_jaas_config(text).options)
    except JaasConfigError as exc:
        raise ClientConfigError(f"sasl.jaas.config: {exc}") from None


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connection authenticates (see the module doc)."""
    protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""
    ca_certs: str = ""
    cert_file: str = ""
    key_file: str = ""
    key_password: str = field(default="", repr=False)
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """The security settings of Kafka client ``props``. Raises ClientConfigError."""
        protocol = str(props.get("security.protocol", "PLAINTEXT")).strip().upper()
        if protocol not in PROTOCOLS:
            raise ClientConfigError(f"security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
        for kind in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(kind, "PEM").upper() != "PEM":
                raise ClientConfigError(f"{kind}={props[kind]}: hightide's client reads PEM files only")
        mechanism, username, password = "", "", ""
        if protocol.startswith("SASL"):
            mechanism = str(props.get("sasl.mechanism", "GSSAPI")).strip().upper()
            if mechanism not in MECHANISMS:
                raise ClientConfigError(f"sasl.mechanism={mechanism} is not supported by hightide's client "
                                        f"(use one of {', '.join(MECHANISMS)})")
            jaas = _jaas_options(props["sasl.jaas.config"]) if props.get("sasl.jaas.config") else {}
            if mechanism == "OAUTHBEARER":
                username = jaas.get("unsecuredLoginStringClaim_sub") or props.get("sasl.oauthbearer.sub", "") \
                    or props.get("sasl.username", "")
            else:
                username = jaas.get("username") or props.get("sasl.username", "")
                password = jaas.get("password") or props.get("sasl.password", "")
            if not username:
                raise ClientConfigError(f"sasl.mechanism={mechanism} needs a user: sasl.jaas.config with "
                                        + ('unsecuredLoginStringClaim_sub="..."' if mechanism == "OAUTHBEARER"
                                           else 'username="..." password="..."') + " (or sasl.username)")
        keystore = props.get("ssl.keystore.location", "")
        cert = props.get("ssl.certificate.location", "") or keystore
        key = props.get("ssl.key.location", "") or keystore
        return cls(protocol=protocol, mechanism=mechanism, username=username, password=password,
                   ca_file=props.get("ssl.truststore.location", "") or props.get("ssl.ca.location", ""),
                   ca_certs=props.get("ssl.truststore.certificates", ""), cert_file=cert, key_file=key,
                   key_password=props.get("ssl.key.password", ""),
                   check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
                   == "https")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL/SASL_SSL (None otherwise): the broker's certificate is
        verified against the truststore (the system's CAs without one), its host name
        checked unless ``ssl.endpoint.identification.algorithm`` is empty; the keystore
        is presented for mTLS. Raises ClientConfigError when a file cannot be loaded."""
        if not self.tls:
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file or None, cadata=self.ca_certs or None)
            ctx.check_hostname = self.check_hostname
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file or None, password=self.key_password or None)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ClientConfigError(f"TLS settings cannot be loaded: {exc}") from None
        return ctx


KNOWN = {"client.id", "request.timeout.ms", "default.api.timeout.ms", "bootstrap.servers",
         "retry.backoff.ms", "retry.backoff.max.ms", *SECURITY_KEYS}


def admin_options_from(path: str | None) -> tuple[dict[str, Any], str | None, list[str]]:
    """(AdminClient keyword arguments, bootstrap.servers if the file sets it, warnings)
    from the properties file at ``path`` (None: no file). Raises ClientConfigError for an
    unreadable file, a bad number or a security setting the client cannot honour."""
    if path is None:
        return {}, None, []
    props = load_properties(path)
    opts: dict[str, Any] = {}
    try:
        security = ClientSecurity.from_properties(props)
        if security.protocol != "PLAINTEXT":
            security.ssl_context()  # the TLS files load (raises ClientConfigError)
            opts["security"] = security
        if "client.id" in props:
            opts["client_id"] = props["client.id"]
        timeout = props.get("default.api.timeout.ms") or props.get("request.timeout.ms")
        if timeout:
            opts["request_timeout_s"] = int(timeout) / 1000
        if "retry.backoff.ms" in props:
            opts["retry_backoff_s"] = int(props["retry.backoff.ms"]) / 1000
        if "retry.backoff.max.ms" in props:
            opts["max_backoff_s"] = int(props["retry.backoff.max.ms"]) / 1000
    except ClientConfigError as exc:
        raise ClientConfigError(f"{path}: {exc}") from None
    except ValueError as exc:
        raise ClientConfigError(f"{path}: {exc}") from None
    warnings = [f"{path}: the configuration '{k}' was supplied but isn't a known config." for k in props
                if k not in KNOWN]
    return opts, props.get("bootstrap.servers"), warnings
