"""Client quotas in the metadata image (Kafka's ``ClientQuotasImage``) and
DescribeClientQuotas' matching (``ClientQuotasImage.describe``).

:meth:`ClientQuotasImage.apply` is the only mutator, called by
:meth:`hightide.cluster.image.MetadataImage.apply` for each
:class:`~hightide.cluster.quota_records.ClientQuotaRecord` in log order (Kafka's
``ClientQuotaControlManager.replay``): a value replaces the entity's value for that key;
a removal drops the key, and the entity once it has no key left.

Filters (Kafka's rules and messages): each component names an entity type at most once;
match type 0 = the exact name (``match`` required), 1 = the default entity (``match``
null), 2 = any entity of that type (``match`` null); an unknown type is
UNSUPPORTED_VERSION "Unsupported entity type X", the other defects INVALID_REQUEST. A
strict filter matches only entities with exactly the filtered types; a non-strict one
also entities with more. hightide does not serve ``ip`` entities (connection-rate quotas):
a filter on ``ip`` is refused as an unsupported entity type.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..protocol.errors import ErrorCode
from .quota_records import CLIENT_ID, USER, ClientQuotaRecord, QuotaEntity

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2
#: The entity types hightide serves (Kafka also has ``ip``).
ENTITY_TYPES = (USER, CLIENT_ID)


class QuotaFilterError(Exception):
    """A DescribeClientQuotas filter Kafka refuses: ``code`` and the message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None


@dataclass
class ClientQuotasImage:
    """``entities``: the quota values by entity and key; ``keys_in_use``: how many
    entities set each key (enforcement skips a key nobody set, at no cost)."""
    entities: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    keys_in_use: dict[str, int] = field(default_factory=dict)

    def apply(self, record: ClientQuotaRecord) -> None:
        values = self.entities.get(record.entity)
        if record.remove:
            if values is not None and values.pop(record.key, None) is not None:
                self._count(record.key, -1)
                if not values:
                    del self.entities[record.entity]
            return
        if values is None:
            values = self.entities[record.entity] = {}
        if record.key not in values:
            self._count(record.key, 1)
        values[record.key] = record.value

    def _count(self, key: str, delta: int) -> None:
        n = self.keys_in_use.get(key, 0) + delta
        if n > 0:
            self.keys_in_use[key] = n
        else:
            self.keys_in_use.pop(key, None)

    def value(self, entity: QuotaEntity, key: str) -> float | None:
        values = self.entities.get(entity)
        return None if values is None else values.get(key)

    def copy(self) -> ClientQuotasImage:
        return ClientQuotasImage({e: dict(v) for e, v in self.entities.items()}, dict(self.keys_in_use))

    def describe(self, components: Sequence[FilterComponent], strict: bool
                 ) -> list[tuple[QuotaEntity, dict[str, float]]]:
        """The entities the filter matches with their values, sorted by entity. Raises
        :class:`QuotaFilterError` for a filter Kafka refuses (see the module docstring)."""
        exact, typed = _parse_filter(components)
        wanted = len(exact) + len(typed)
        out = []
        for entity, values in sorted(self.entities.items(), key=lambda kv: _sort_key(kv[0])):
            names = dict(entity)
            if strict and len(names) != wanted:
                continue
            if all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in typed):
                out.append((entity, dict(values)))
        return out


def _sort_key(entity: QuotaEntity) -> tuple:
    return tuple((t, n is not None, n or "") for t, n in entity)


def _parse_filter(components: Iterable[FilterComponent]) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise QuotaFilterError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in typed:
            raise QuotaFilterError(ErrorCode.invalid_request,
                                   f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in ENTITY_TYPES:
            raise QuotaFilterError(ErrorCode.unsupported_version, f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaFilterError(ErrorCode.invalid_request,
                                       "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise QuotaFilterError(ErrorCode.invalid_request,
                                       "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise QuotaFilterError(ErrorCode.invalid_request,
                                       "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(c.entity_type)
        else:
            raise QuotaFilterError(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
    return exact, typed
