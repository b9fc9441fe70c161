"""Kafka's ``ClientQuotaRecord``: one client quota value set or removed, stored like every
other hightide metadata record (see :mod:`hightide.cluster.records`).

A quota entity is a set of (entity type, entity name) pairs: types ``user``,
``client-id`` (and ``ip``, which hightide refuses), a ``None`` name being the type's
default entity (Kafka's ``<default>``). It is kept as a tuple of pairs sorted by type, so
equal entities compare and hash equal however a request ordered them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

#: A quota entity: ((entity type, entity name or None for the default), ...) sorted by type.
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(pairs: object) -> QuotaEntity:
    """The normalized entity of (type, name) pairs (any iterable of 2-sequences, as the
    JSON decoder gives lists)."""
    return tuple(sorted(((str(t), None if n is None else str(n)) for t, n in pairs),  # type: ignore[attr-defined]
                        key=lambda e: e[0]))


@dataclass(frozen=True)
class ClientQuotaRecord:
    """Set ``key`` of ``entity`` to ``value``, or remove it (``remove``; value ignored)."""
    type: ClassVar[str] = "client_quota"
    entity: QuotaEntity
    key: str
    value: float = 0.0
    remove: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "entity", quota_entity(self.entity))
        object.__setattr__(self, "value", float(self.value))


QUOTA_RECORD_TYPES = (ClientQuotaRecord,)
