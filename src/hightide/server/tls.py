"""TLS for listeners: an ``ssl.SSLContext`` per TLS listener from its
:class:`~hightide.security.listeners.TlsSettings`, and the principal of a TLS peer.

Theory of operation: the context is built once, when the listener starts, and handed to
the node's transport (``transport.listen(ssl=...)``, ``loop.create_server`` in
production); asyncio does the handshake before the connection's ``connection_made``,
bounded by the listener's authentication timeout. A client certificate is requested
(``ssl.client.auth=requested``, ``CERT_OPTIONAL``) or required (``required``,
``CERT_REQUIRED``) and verified against the listener's truststore; its
subject DN, read from the certificate's DER bytes and printed as Java's
``X500Principal.getName()`` (:mod:`hightide.security.x500`), mapped by
``ssl.principal.mapping.rules``, is the connection's principal on an SSL listener
(``User:<mapped DN>``), as Kafka's ``DefaultKafkaPrincipalBuilder``. Without a
certificate the principal is ``User:ANONYMOUS``; a DN no rule applies to fails the
authentication (:class:`~hightide.security.listeners.NoMatchingRule`).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any

from ..security.listeners import ListenerConfigError, TlsSettings, map_principal
from ..security.x500 import certificate_subject_dn
from .context import ANONYMOUS

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _load_chain(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    password = settings.key_password or None
    if settings.cert_file:
        ctx.load_cert_chain(settings.cert_file, password=password)
        return
    # Inline PEM (ssl.keystore.certificate.chain + ssl.keystore.key): the ssl module loads
    # chains from files only, so write them to a private temporary file and remove it.
    fd, path = tempfile.mkstemp(prefix="hightide-keystore-", suffix=".pem")
    try:
        os.write(fd, (settings.cert_chain.strip() + "\n" + settings.key.strip() + "\n").encode())
        os.close(fd)
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def server_context(listener: str, settings: TlsSettings) -> ssl.SSLContext:
    """The server-side context of a TLS listener. Raises ListenerConfigError naming the
    listener when the certificate, key or CA cannot be loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_VERSIONS[p] for p in settings.protocols if p in _VERSIONS]
    if not versions:
        raise ListenerConfigError(f"ssl.enabled.protocols on listener {listener}: none of "
                                  f"{', '.join(settings.protocols)} is supported (TLSv1.2, TLSv1.3)")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    try:
        _load_chain(ctx, settings)
        if settings.ciphers:
            ctx.set_ciphers(settings.ciphers)
        if settings.ca_file or settings.ca_certs:
            ctx.load_verify_locations(cafile=settings.ca_file or None, cadata=settings.ca_certs or None)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ListenerConfigError(f"TLS material of listener {listener} cannot be loaded: {exc}") from None
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}.get(settings.client_auth,
                                                                                          ssl.CERT_NONE)
    return ctx


class PrincipalFailure(Exception):
    """The client certificate gives no principal: no mapping rule applies to its DN
    (Kafka: "Failed to map name for '<DN>' based on SSL principal mapping rules.") or
    its subject cannot be read. The connection must be closed."""


def peer_principal(transport: Any, settings: TlsSettings) -> str:
    """The principal of a TLS connection: ``User:`` + the client certificate's mapped DN,
    or ``User:ANONYMOUS`` when the client sent none. Raises :class:`PrincipalFailure`."""
    ssl_object = transport.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return ANONYMOUS
    try:
        dn = certificate_subject_dn(der)
    except ValueError as exc:
        raise PrincipalFailure(f"the client certificate's subject cannot be read: {exc}") from None
    try:
        return "User:" + map_principal(dn, settings.principal_rules)
    except ValueError as exc:  # NoMatchingRule
        raise PrincipalFailure(f"Failed to map name for '{dn}' based on SSL principal mapping rules "
                               f"(ssl.principal.mapping.rules): {exc}") from None
