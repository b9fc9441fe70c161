"""Configs half of :class:`hightide.client.AdminClient` (a mixin): DescribeConfigs (32),
IncrementalAlterConfigs (44), DescribeClientQuotas (48) and AlterClientQuotas (49), as
Kafka's ``Admin.describeConfigs`` / ``incrementalAlterConfigs`` /
``describeClientQuotas`` / ``alterClientQuotas`` and ``kafka-configs.sh`` use them.

A client quota entity is a tuple of (entity type, name) pairs sorted by type: types
``user`` and ``client-id``, a ``None`` name being the default entity.

Routing follows Kafka's admin client: a broker resource with a node id goes to that
broker; topic, group and cluster-default broker resources go to any broker (a topic
or group alter is forwarded to the controller by the broker that receives it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from .errors import ErrorCode, KafkaError, error_for

if TYPE_CHECKING:
    from .connection import BrokerConnection

__all__ = ["AlterOp", "ConfigEntry", "ConfigResource", "ConfigSource", "ConfigsMixin", "QuotaEntity",
           "QuotaFilterComponent", "ResourceType"]

#: A client quota entity: ((entity type, name or None for the default), ...) sorted by type.
QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class QuotaFilterComponent:
    """One component of a DescribeClientQuotas filter (Kafka's ``ClientQuotaFilterComponent``):
    match type 0 = the entity named ``match``, 1 = the default entity, 2 = any entity of the type."""
    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> QuotaFilterComponent:
        return cls(entity_type, 0, name)

    @classmethod
    def of_default(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, 1)

    @classmethod
    def of_type(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, 2)


def quota_entity(pairs: Any) -> QuotaEntity:
    """(type, name) pairs (or a {type: name} dict) as a :data:`QuotaEntity`."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    return tuple(sorted(((str(t), n) for t, n in items), key=lambda e: e[0]))


class ResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` codes."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, code: int) -> ConfigSource:
        return cls(code) if code in cls._value2member_map_ else cls.UNKNOWN

    @property
    def dynamic(self) -> bool:
        """Set on the cluster for this entity (what ``kafka-configs.sh --describe`` lists
        without ``--all``), as opposed to a static broker file or a default."""
        return self not in (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG, ConfigSource.UNKNOWN)


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: ResourceType
    name: str
    """Topic or group name, broker id as a string, or '' for the cluster-wide broker default."""


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a resource. ``value`` is None for sensitive configs (never sent)
    and for configs without a value; ``synonyms`` are (name, value, source) from the most
    to the least specific, filled when asked for."""

    name: str
    value: str | None
    source: ConfigSource
    sensitive: bool = False
    read_only: bool = False
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()


class ConfigsMixin:
    """DescribeConfigs and IncrementalAlterConfigs for :class:`~hightide.client.AdminClient`."""

    async def describe_configs(self, resources: list[ConfigResource], *, include_synonyms: bool = True,
                               raise_on_error: bool = True
                               ) -> dict[ConfigResource, list[ConfigEntry] | KafkaError]:
        """Every config of each resource (sorted by name). A resource the broker refuses
        (unknown topic: UNKNOWN_TOPIC_OR_PARTITION, ...) raises its :class:`KafkaError`,
        or with ``raise_on_error=False`` is returned as that resource's value."""
        out: dict[ConfigResource, list[ConfigEntry] | KafkaError] = {}
        for node, group in _by_node(resources).items():
            async def attempt(node: int | None = node, group: list[ConfigResource] = group) -> Any:
                conn = await self._node_or_any(node)  # type: ignore[attr-defined]
                v = conn.pick_version(32, 4, 1)
                return await conn.request(32, v, {
                    "resources": [{"resource_type": int(r.type), "resource_name": r.name, "configuration_keys": None}
                                  for r in group],
                    "include_synonyms": include_synonyms, "include_documentation": False})
            resp = await self._with_retries(attempt)  # type: ignore[attr-defined]
            for res in resp.results:
                key = ConfigResource(ResourceType(res.resource_type), res.resource_name)
                if res.error_code != ErrorCode.none:
                    out[key] = error_for(res.error_code, res.error_message or f"{key.type.name} {key.name!r}")
                    continue
                out[key] = sorted((_entry(c) for c in res.configs), key=lambda e: e.name)
        if raise_on_error:
            for v in out.values():
                if isinstance(v, KafkaError):
                    raise v
        return out

    async def incremental_alter_configs(self, resource: ConfigResource,
                                        ops: list[tuple[str, AlterOp, str | None]], *,
                                        validate_only: bool = False) -> None:
        """Apply ``(name, op, value)`` operations to one resource atomically. Raises the
        broker's :class:`KafkaError` (INVALID_CONFIG naming the bad config,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, ...)."""
        async def attempt() -> Any:
            conn = await self._node_or_any(_node_of(resource))  # type: ignore[attr-defined]
            v = conn.pick_version(44, 1, 0)
            return await conn.request(44, v, {"resources": [{
                "resource_type": int(resource.type), "resource_name": resource.name,
                "configs": [{"name": n, "config_operation": int(op), "value": val} for n, op, val in ops]}],
                "validate_only": validate_only})
        resp = await self._with_retries(attempt)  # type: ignore[attr-defined]
        for r in resp.responses:
            if r.error_code != ErrorCode.none:
                raise error_for(r.error_code, r.error_message or f"{resource.type.name} {resource.name!r}")

    async def describe_client_quotas(self, components: Sequence[QuotaFilterComponent] = (), *, strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
        """The client quotas the filter matches (all of them without components): by
        entity, {key: value}. ``strict``: only entities with exactly the filtered types
        (Kafka's ``ClientQuotaFilter.containsOnly``). Raises the broker's KafkaError
        (CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST for a bad filter, ...)."""
        async def attempt() -> Any:
            conn = await self._any_conn()  # type: ignore[attr-defined]
            v = conn.pick_version(48, 1, 0)
            return await conn.request(48, v, {"components": [
                {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match} for c in components],
                "strict": strict})
        resp = await self._with_retries(attempt)  # type: ignore[attr-defined]
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, resp.error_message or "DescribeClientQuotas failed")
        return {quota_entity((e.entity_type, e.entity_name) for e in entry.entity):
                {v.key: float(v.value) for v in entry.values} for entry in resp.entries or ()}

    async def alter_client_quotas(self, alterations: list[tuple[Any, dict[str, float | None]]], *,
                                  validate_only: bool = False, raise_on_error: bool = True
                                  ) -> dict[QuotaEntity, KafkaError | None]:
        """Set (a value) or remove (None) quota keys of entities: ``alterations`` are
        (entity as (type, name) pairs or a {type: name} dict, {key: value or None}). Per
        entity, None or the broker's KafkaError (INVALID_REQUEST with Kafka's message for an
        unknown key, a value <= 0, ...); with ``raise_on_error`` the first error raises."""
        entries = [(quota_entity(e), ops) for e, ops in alterations]

        async def attempt() -> Any:
            conn = await self._any_conn()  # type: ignore[attr-defined]
            v = conn.pick_version(49, 1, 0)
            return await conn.request(49, v, {"entries": [
                {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                 "ops": [{"key": k, "value": 0.0 if val is None else float(val), "remove": val is None}
                         for k, val in ops.items()]} for entity, ops in entries],
                "validate_only": validate_only})
        resp = await self._with_retries(attempt)  # type: ignore[attr-defined]
        out: dict[QuotaEntity, KafkaError | None] = {}
        for r in resp.entries:
            entity = quota_entity((e.entity_type, e.entity_name) for e in r.entity)
            out[entity] = None if r.error_code == ErrorCode.none else error_for(
                r.error_code, r.error_message or f"client quota entity {dict(entity)}")
        if raise_on_error:
            for err in out.values():
                if err is not None:
                    raise err
        return out

    async def _node_or_any(self, node: int | None) -> BrokerConnection:
        if node is None:
            return await self._any_conn()  # type: ignore[attr-defined]
        return await self._conn_for_node(node)  # type: ignore[attr-defined]


def _node_of(r: ConfigResource) -> int | None:
    """The broker a resource must be sent to (a broker id), or None for any broker."""
    if r.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) and r.name.isdigit():
        return int(r.name)
    return None


def _by_node(resources: list[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
    out: dict[int | None, list[ConfigResource]] = {}
    for r in resources:
        out.setdefault(_node_of(r), []).append(r)
    return out


def _entry(c: Any) -> ConfigEntry:
    return ConfigEntry(c.name, c.value, ConfigSource.of(c.config_source), bool(c.is_sensitive), bool(c.read_only),
                       tuple((s.name, s.value, ConfigSource.of(s.source)) for s in (c.synonyms or ())))
