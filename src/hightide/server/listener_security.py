"""What a listener's connections need to authenticate: built once per listener from the
broker config (see :mod:`hightide.security.listeners` for the config names).

:class:`ListenerSecurity` holds the listener's security protocol, its ``ssl.SSLContext``
(SSL, SASL_SSL), its SASL settings (SASL_PLAINTEXT, SASL_SSL) and the authentication
timeout, and makes each new connection's session
(:class:`~hightide.security.session.SaslSession` on a SASL listener, an
:class:`~hightide.security.session.AuthenticatedSession` otherwise, whose principal is the
client certificate's on SSL). SCRAM credentials are read from the metadata image current
when a client authenticates, so a credential changed with AlterUserScramCredentials
applies to the next authentication.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..client.properties import ClientConfigError, ClientSecurity
from ..security.listeners import TlsSettings, listener_protocol, tls_settings
from ..security.scram import ScramCredential, ScramMechanism
from ..security.session import AuthenticatedSession, SaslServerConfig, SaslSession
from ..security.settings import sasl_server_config
from .context import ANONYMOUS
from .tls import peer_principal, server_context

if TYPE_CHECKING:
    from ..cluster.image import MetadataImage
    from ..cluster.settings import ClusterSettings, Listener
    from ..services import BrokerIdentity

#: hightide's bound on authentication: a connection on a SASL listener that has not
#: authenticated this long after connecting is closed, and a TLS handshake must finish
#: within it (slow clients that never finish cannot hold connections open).
AUTH_TIMEOUT_CONFIG = "connections.authentication.timeout.ms"
DEFAULT_AUTH_TIMEOUT_MS = 10000

Session = AuthenticatedSession | SaslSession


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener's security (see the module doc)."""
    name: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    tls: TlsSettings | None = None
    sasl: SaslServerConfig | None = None
    auth_timeout_ms: int = DEFAULT_AUTH_TIMEOUT_MS

    @property
    def plaintext(self) -> bool:
        return self.protocol == "PLAINTEXT"

    def new_session(self, transport: Any) -> Session:
        """The session of a new connection on this listener (after its TLS handshake).
        Raises :class:`~.tls.PrincipalFailure` when the client certificate gives no
        principal (no mapping rule applies to its DN)."""
        if self.sasl is not None:
            return SaslSession(self.sasl)
        if self.tls is not None:
            return AuthenticatedSession(peer_principal(transport, self.tls))
        return AuthenticatedSession(ANONYMOUS)


PLAINTEXT = ListenerSecurity("PLAINTEXT")


def listener_security(name: str, configs: Mapping[str, Any], image: Callable[[], MetadataImage],
                      controller_names: tuple[str, ...] = ()) -> ListenerSecurity:
    """The security of listener ``name`` from the broker's security configs. Raises
    ValueError (ListenerConfigError) naming the setting at fault: the protocol map does
    not name the listener, TLS material is missing or unreadable, SASL mechanisms or JAAS
    configs are invalid."""
    protocol = listener_protocol(configs, name, controller_names)
    if protocol == "PLAINTEXT":
        return ListenerSecurity(name)
    tls = ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        tls = tls_settings(configs, name)
        ctx = server_context(name, tls)
    sasl = None
    if protocol.startswith("SASL"):
        def lookup(mechanism: ScramMechanism, user: str) -> ScramCredential | None:
            return image().security.scram_credential(user, mechanism.type)
        sasl = sasl_server_config(name, configs, lookup)
    scoped = f"listener.name.{name.lower()}.{AUTH_TIMEOUT_CONFIG}"
    raw = configs.get(scoped, configs.get(AUTH_TIMEOUT_CONFIG, DEFAULT_AUTH_TIMEOUT_MS))
    try:
        timeout = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{AUTH_TIMEOUT_CONFIG} must be a number of milliseconds, got {raw!r}") from None
    if timeout <= 0:
        raise ValueError(f"{AUTH_TIMEOUT_CONFIG} must be > 0, got {timeout}")
    return ListenerSecurity(name, protocol, ctx, tls, sasl, timeout)


class ListenerIdentity:
    """The broker's identity as one listener of a single node with several listeners
    advertises it (``BrokerIdentity``): clients are told the address of the listener they
    connected to (its advertised listener, else its bound address), so a client on the
    SASL_SSL port is not sent to the PLAINTEXT one. Built from the node's ``identity``,
    the ``listener``, ``bound_port`` (listener name -> the port bound, or None) and the
    ``cluster`` settings (the advertised listeners)."""

    def __init__(self, identity: BrokerIdentity, listener: Listener, bound_port: Callable[[str], int | None],
                 cluster: ClusterSettings) -> None:
        self._identity = identity
        self._listener = listener
        self._bound_port = bound_port
        self._cluster = cluster

    @property
    def node_id(self) -> int:
        return self._identity.node_id

    @property
    def cluster_id(self) -> str | None:
        return self._identity.cluster_id

    @property
    def stopping(self) -> bool:
        return self._identity.stopping

    @property
    def advertised(self) -> tuple[str, int]:
        listener = self._listener
        port = self._bound_port(listener.name) or listener.port
        host, port = self._cluster.advertised_for(listener, port)
        return ("127.0.0.1" if host == "localhost" else host), port


def check_listeners(config: Any) -> None:
    """Build every listener's security once from a BrokerConfig, to report a bad setting
    before anything starts. Raises ValueError naming the setting."""
    cluster = config.cluster_settings()
    explicit = "listeners" in config.cluster_values or not cluster.single_node
    names = [x.name for x in cluster.listeners] if explicit else ["PLAINTEXT"]
    def no_image() -> MetadataImage:
        raise RuntimeError("no metadata image while checking configs")

    for name in names:
        listener_security(name, config.security_values, no_image, cluster.controller_listener_names)
    if not cluster.single_node and cluster.is_broker:  # how this broker reaches the controller and other brokers
        controller_client_security(config.security_values, cluster.controller_listener_names)
        inter_broker_client(config.security_values, tuple(x.name for x in cluster.broker_listeners),
                            cluster.controller_listener_names)


#: Kafka's SecurityProtocol ids (BrokerRegistration's listener endpoints).
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def _client_security_for(configs: Mapping[str, Any], name: str, controller_names: tuple[str, ...],
                         mechanism_config: str, what: str) -> ClientSecurity | None:
    """How this node connects as a client to listener ``name`` of another node: the
    listener's protocol from the map, the mechanism of ``mechanism_config``, and the client
    settings scoped to that listener (``listener.name.<l>.ssl.truststore.location``,
    ``listener.name.<l>.<mechanism>.sasl.jaas.config`` with ``username``/``password``; as in
    Kafka, the same JAAS entry serves both sides). None for PLAINTEXT. Raises ValueError."""
    protocol = listener_protocol(configs, name, controller_names)
    if protocol == "PLAINTEXT":
        return None
    prefix = f"listener.name.{name.lower()}."

    def get(key: str) -> str:
        value = configs.get(prefix + key, configs.get(key))
        return "" if value is None else str(value)

    props = {"security.protocol": protocol}
    for key in ("ssl.truststore.location", "ssl.truststore.certificates", "ssl.keystore.location",
                "ssl.key.password", "ssl.endpoint.identification.algorithm"):
        if get(key):
            props[key] = get(key)
    if protocol.startswith("SASL"):
        mechanism = str(configs.get(mechanism_config, "GSSAPI")).strip().upper()
        props["sasl.mechanism"] = mechanism
        jaas = get(f"{mechanism.lower()}.sasl.jaas.config") or get("sasl.jaas.config")
        if jaas:
            props["sasl.jaas.config"] = jaas
    try:
        return ClientSecurity.from_properties(props)
    except ClientConfigError as exc:
        raise ValueError(f"{what} (listener {name}): {exc}") from None


def controller_client_security(configs: Mapping[str, Any], controller_names: tuple[str, ...]) -> ClientSecurity | None:
    """How a broker connects to the controller, as Kafka's brokers do: the first
    ``controller.listener.names`` listener, ``sasl.mechanism.controller.protocol``."""
    if not controller_names:
        return None
    return _client_security_for(configs, controller_names[0], controller_names, "sasl.mechanism.controller.protocol",
                                "the broker's connection to the controller")


def inter_broker_client(configs: Mapping[str, Any], broker_listeners: tuple[str, ...],
                        controller_names: tuple[str, ...]) -> tuple[str, ClientSecurity | None]:
    """(listener name, security) a broker uses to reach other brokers (share-state RPCs):
    ``inter.broker.listener.name``, else the first broker listener, with
    ``sasl.mechanism.inter.broker.protocol``. Raises ValueError naming the setting."""
    name = str(configs.get("inter.broker.listener.name") or "").strip() or \
        (broker_listeners[0] if broker_listeners else "PLAINTEXT")
    if broker_listeners and name not in broker_listeners:
        raise ValueError(f"inter.broker.listener.name={name} is not one of this broker's listeners "
                         f"({', '.join(broker_listeners)})")
    return name, _client_security_for(configs, name, controller_names, "sasl.mechanism.inter.broker.protocol",
                                      "the broker's connection to other brokers")
