"""Broker-lifecycle metadata records, with the fields of Kafka's ``__cluster_metadata``
records of the same names (``RegisterBrokerRecord``, ``UnregisterBrokerRecord``,
``FenceBrokerRecord``, ``UnfenceBrokerRecord``, ``BrokerRegistrationChangeRecord``,
``NoOpRecord``).

They are stored like every other hightide metadata record (see
:mod:`hightide.cluster.records`): one JSON object per record value with a ``type`` and a
``v``. Nested lists (endpoints, features, log dirs) are kept as tuples of tuples so the
records stay frozen, hashable and equal to themselves after a JSON round trip.

A broker's epoch is the metadata-log offset of the ``RegisterBrokerRecord`` that created
its registration (Kafka's rule); the other records name the epoch they apply to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

#: BrokerRegistrationChangeRecord.Fenced values (Kafka's BrokerRegistrationFencingChange).
FENCE, FENCING_NONE, UNFENCE = 1, 0, -1
#: BrokerRegistrationChangeRecord.InControlledShutdown values.
IN_CONTROLLED_SHUTDOWN, SHUTDOWN_NONE = 1, 0

Endpoint = tuple[str, str, int, int]
"""(listener name, host, port, security protocol id) — Kafka's BrokerEndpoint."""
Feature = tuple[str, int, int]
"""(feature name, min supported level, max supported level) — Kafka's BrokerFeature."""


def _tuples(items: object) -> tuple[tuple, ...]:
    return tuple(tuple(x) for x in items)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RegisterBrokerRecord:
    """A broker registration (new incarnation, or an amended one with the same epoch)."""
    type: ClassVar[str] = "register_broker"
    broker_id: int
    incarnation_id: str  # UUID string
    broker_epoch: int
    end_points: tuple[Endpoint, ...] = ()
    features: tuple[Feature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "end_points", _tuples(self.end_points))
        object.__setattr__(self, "features", _tuples(self.features))
        object.__setattr__(self, "log_dirs", tuple(self.log_dirs))


@dataclass(frozen=True)
class UnregisterBrokerRecord:
    type: ClassVar[str] = "unregister_broker"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class FenceBrokerRecord:
    """Kafka's pre-3.3 fencing record (field names ``id``/``epoch`` as in Kafka). The
    controller writes :class:`BrokerRegistrationChangeRecord` instead; this one is
    replayed for completeness."""
    type: ClassVar[str] = "fence_broker"
    id: int
    epoch: int


@dataclass(frozen=True)
class UnfenceBrokerRecord:
    type: ClassVar[str] = "unfence_broker"
    id: int
    epoch: int


@dataclass(frozen=True)
class BrokerRegistrationChangeRecord:
    """``fenced``: 1 fence, -1 unfence, 0 no change; ``in_controlled_shutdown``: 1 enter,
    0 no change (Kafka's encodings)."""
    type: ClassVar[str] = "broker_registration_change"
    broker_id: int
    broker_epoch: int
    fenced: int = FENCING_NONE
    in_controlled_shutdown: int = SHUTDOWN_NONE
    log_dirs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_dirs", tuple(self.log_dirs))


@dataclass(frozen=True)
class NoOpRecord:
    """Written by the controller when the log has been idle for
    ``metadata.max.idle.interval.ms``, so offsets keep moving (a broker that applied it
    proves it is following the log). Changes nothing."""
    type: ClassVar[str] = "no_op"


BROKER_RECORD_TYPES = (RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord,
                       BrokerRegistrationChangeRecord, NoOpRecord)
BrokerRecord = (RegisterBrokerRecord | UnregisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord
                | BrokerRegistrationChangeRecord | NoOpRecord)
