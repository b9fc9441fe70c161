"""Security settings from Kafka's broker config names, for the listener wiring.

:data:`SECURITY_CONFIGS` lists the broker configs this package reads, with Kafka's
defaults; :func:`sasl_server_config` builds a listener's
:class:`~hightide.security.session.SaslServerConfig` and :func:`authorizer_settings` the
authorizer's, from a mapping of config name to value (strings as in a properties file,
or already-typed values). Listener-scoped names are Kafka's:

* ``listener.name.<listener>.sasl.enabled.mechanisms`` (else ``sasl.enabled.mechanisms``);
* ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` — PLAIN users
  (``user_<name>="<password>"``) and OAUTHBEARER unsecured-validator options
  (``unsecuredValidatorRequiredScope`` ...); ``<mechanism>`` is lower case
  (``plain``, ``scram-sha-512``, ``oauthbearer``);
* ``listener.name.<listener>.<mechanism>.connections.max.reauth.ms`` (else
  ``connections.max.reauth.ms``);
* ``listener.name.<listener>.sasl.server.max.receive.size`` (else
  ``sasl.server.max.receive.size``).

Listener names are lower-cased in these keys, as Kafka's ``ListenerName.configPrefix``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .oauthbearer import UnsecuredValidator
from .sasl_plain import JaasConfigError, parse_jaas_config, plain_users
from .scram import ScramCredential, ScramMechanism
from .session import MECHANISMS, SaslServerConfig


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    name: str
    type: str
    default: Any
    doc: str


SECURITY_CONFIGS = {c.name: c for c in (
    SecurityConfig("sasl.enabled.mechanisms", "list", "GSSAPI",
                   "SASL mechanisms enabled on SASL listeners (hightide: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
                   "OAUTHBEARER; Kafka's default GSSAPI is not available and must be replaced)."),
    SecurityConfig("connections.max.reauth.ms", "long", 0,
                   "Session lifetime for KIP-368 re-authentication; 0 = sessions never expire."),
    SecurityConfig("connection.failed.authentication.delay.ms", "int", 100,
                   "Delay before answering a failed authentication and closing the connection."),
    SecurityConfig("sasl.server.max.receive.size", "int", 524288,
                   "Largest request frame accepted before authentication (checked at its size field)."),
    SecurityConfig("super.users", "string", "",
                   "Principals allowed everything, separated by ';' (e.g. User:admin;User:ops)."),
    SecurityConfig("allow.everyone.if.no.acl.found", "bool", False,
                   "Allow an action on a resource that has no ACL at all."),
)}


def _get(configs: Mapping[str, Any], name: str) -> Any:
    return configs.get(name, SECURITY_CONFIGS[name].default if name in SECURITY_CONFIGS else None)


def _as_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(value)


def _as_int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return text == "true"


def sasl_server_config(listener: str, configs: Mapping[str, Any],
                       scram_lookup: Callable[[ScramMechanism, str], ScramCredential | None]) -> SaslServerConfig:
    """The SASL settings of ``listener``. Raises ValueError naming the config at fault: a
    mechanism hightide does not implement, PLAIN enabled without a PlainLoginModule JAAS
    config for the listener, a malformed JAAS config, a bad number."""
    prefix = f"listener.name.{listener.lower()}."
    enabled = _as_list(configs.get(prefix + "sasl.enabled.mechanisms", _get(configs, "sasl.enabled.mechanisms")))
    unknown = [m for m in enabled if m not in MECHANISMS]
    if unknown or not enabled:
        raise ValueError(f"sasl.enabled.mechanisms for listener {listener}: {', '.join(unknown) or 'none'} "
                         f"not supported (hightide offers {', '.join(MECHANISMS)})")
    users: dict[str, str] = {}
    validator = UnsecuredValidator()
    reauth = _as_int("connections.max.reauth.ms", _get(configs, "connections.max.reauth.ms"))
    reauth_by_mechanism: dict[str, int] = {}
    for mechanism in enabled:
        mprefix = f"{prefix}{mechanism.lower()}."
        if mprefix + "connections.max.reauth.ms" in configs:
            reauth_by_mechanism[mechanism] = _as_int(mprefix + "connections.max.reauth.ms",
                                                     configs[mprefix + "connections.max.reauth.ms"])
        jaas_text = configs.get(mprefix + "sasl.jaas.config")
        if mechanism == "PLAIN":
            if jaas_text is None:
                raise ValueError(f"PLAIN is enabled on listener {listener} but {mprefix}sasl.jaas.config "
                                 "(PlainLoginModule with user_<name>=\"<password>\" options) is not set")
            try:
                users = plain_users(parse_jaas_config(str(jaas_text)))
            except JaasConfigError as exc:
                raise ValueError(f"{mprefix}sasl.jaas.config: {exc}") from None
        elif mechanism == "OAUTHBEARER" and jaas_text is not None:
            validator = _oauth_validator(mprefix + "sasl.jaas.config", str(jaas_text))
    return SaslServerConfig(
        enabled=enabled, plain_users=users, scram_lookup=scram_lookup, oauth_validator=validator,
        max_reauth_ms=reauth, max_reauth_ms_by_mechanism=reauth_by_mechanism,
        failed_auth_delay_ms=_as_int("connection.failed.authentication.delay.ms",
                                     _get(configs, "connection.failed.authentication.delay.ms")),
        max_receive_size=_as_int("sasl.server.max.receive.size",
                                 configs.get(prefix + "sasl.server.max.receive.size",
                                             _get(configs, "sasl.server.max.receive.size"))))


def _oauth_validator(name: str, text: str) -> UnsecuredValidator:
    try:
        options = parse_jaas_config(text).options
    except JaasConfigError as exc:
        raise ValueError(f"{name}: {exc}") from None
    scope = options.get("unsecuredValidatorRequiredScope", "")
    return UnsecuredValidator(
        principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "sub"),
        scope_claim=options.get("unsecuredValidatorScopeClaimName", "scope"),
        required_scope=tuple(scope.split()),
        allowable_clock_skew_ms=_as_int(f"{name} unsecuredValidatorAllowableClockSkewMs",
                                        options.get("unsecuredValidatorAllowableClockSkewMs", "0")))


def authorizer_settings(configs: Mapping[str, Any]) -> tuple[frozenset[str], bool]:
    """(``super.users`` as a set of ``Type:name``, ``allow.everyone.if.no.acl.found``).
    Raises ValueError for a super user without a ``Type:`` prefix or a bad boolean."""
    raw = str(_get(configs, "super.users") or "")
    supers = frozenset(s.strip() for s in raw.split(";") if s.strip())
    bad = [s for s in supers if ":" not in s]
    if bad:
        raise ValueError(f"super.users entries must be Type:name (e.g. User:admin), got {', '.join(sorted(bad))}")
    return supers, _as_bool("allow.everyone.if.no.acl.found", _get(configs, "allow.everyone.if.no.acl.found"))
