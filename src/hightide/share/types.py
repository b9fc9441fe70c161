"""Types shared by the share-group pieces (KIP-932, seed 002).

Three parts meet here, each built and tested on its own:

* the **share partition** core (``share/partition.py``) and its IO shell
  (``coordinator/share_partitions.py``): in-flight records, ShareFetch / ShareAcknowledge;
* the **share coordinator** (``share/coordinator.py`` over ``__share_group_state``, run
  by ``coordinator/share_state.py``): persists each share partition's state as
  ShareSnapshot / ShareUpdate records and serves the state RPCs;
* the **share group** membership in the group coordinator (``group/share_group.py``):
  ShareGroupHeartbeat / ShareGroupDescribe, assignment, group configs.

The share partition talks to the coordinator only through :class:`SharePersister` (the
in-process form of the Initialize/Read/Write/ReadSummary/DeleteShareGroupState RPCs),
and asks the group side only through :class:`ShareGroupView`. Both are protocols, so the
core's tests use an in-memory persister.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Protocol


class ShareError(Exception):
    """A share request the core refuses; ``error_code`` is Kafka's answer, ``message``
    the text to send with it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class RecordState(enum.IntEnum):
    """Delivery state of an in-flight record (Kafka's ``RecordState`` ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """AcknowledgeTypes values of ShareFetch / ShareAcknowledge."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one persisted delivery state and count (inclusive range).

    Persisted states are AVAILABLE, ACKNOWLEDGED or ARCHIVED: an acquisition lock never
    survives a restart, so ACQUIRED records are written as AVAILABLE.
    """

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """A share partition: the group, the topic id and the partition. Equal keys are of
    the same class with equal fields; the hash is computed once (a key is looked up
    several times per share request, and a UUID hashes in Python)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.group_id, self.topic_id, self.partition)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class ShareState:
    """What ReadShareGroupState returns for one share partition.

    ``start_offset`` is the SPSO, -1 while the partition is uninitialised (no
    ``share.auto.offset.reset`` decision made yet). ``delivery_complete_count`` is the
    number of ACKNOWLEDGED/ARCHIVED records at or above the SPSO (-1 when unknown).
    """

    error_code: int = 0
    error_message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = -1
    state_batches: tuple[StateBatch, ...] = field(default_factory=tuple)


class SharePersister(Protocol):
    """The share coordinator as seen by a share partition (one call = one state RPC).

    Every method returns a Kafka error code (0 = success) or a :class:`ShareState` whose
    ``error_code`` says the same. Writes are durable when the call returns.
    """

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> int: ...

    async def read(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState: ...

    async def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, delivery_complete_count: int,
                    state_batches: tuple[StateBatch, ...]) -> int: ...

    async def read_summary(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState: ...

    async def delete(self, key: ShareStateKey) -> int: ...


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """Effective settings of one share group (group config, else the broker default)."""

    auto_offset_reset: str = "latest"  # "latest" | "earliest" | "by_duration:<ISO-8601>"
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000
    isolation_level: str = "read_uncommitted"


class ShareGroupView(Protocol):
    """What the share-partition side needs from the group coordinator."""

    def settings(self, group_id: str) -> ShareGroupSettings: ...

    def is_member(self, group_id: str, member_id: str) -> bool: ...
