"""Partition placement (cluster mode), sans-IO.

Placement (Kafka's ``StripedReplicaPlacer``, without racks): the brokers a new partition
may be placed on are the *usable* ones — registered, unfenced, not in controlled shutdown
(:func:`usable_brokers`). Partition ``p`` of a topic gets replicas
``brokers[(start + p + i) % n]`` for ``i < rf``, the first being the leader, where
``start`` is a stable hash of the topic name: leaders are striped round-robin over the
brokers, each topic starting somewhere else, and the outcome is deterministic (tests,
and a replayed decision is the same decision).

Leadership as brokers come and go, and every other partition change, is
:mod:`.replication_control`'s.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

from .image import MetadataImage

NO_LEADER = -1


class PlacementError(ValueError):
    """Not enough usable brokers; ``str()`` is Kafka's message (INVALID_REPLICATION_FACTOR)."""


def usable_brokers(image: MetadataImage) -> list[int]:
    """Ids of the brokers new partitions may be placed on, ascending: registered,
    unfenced and not in controlled shutdown."""
    return sorted(b.broker_id for b in image.brokers.values() if not b.fenced and not b.in_controlled_shutdown)


def start_index(topic: str, count: int) -> int:
    """Where topic ``topic``'s stripe starts among ``count`` brokers (a stable hash)."""
    return zlib.crc32(topic.encode()) % count if count else 0


def place(topic: str, partitions: Iterable[int], rf: int, brokers: Sequence[int],
          start: int | None = None) -> list[tuple[int, ...]]:
    """The replicas (leader first) of each of ``partitions`` of ``topic`` over
    ``brokers``, the stripe starting at ``start`` (default :func:`start_index`). Raises
    :class:`PlacementError` with Kafka's text when fewer than ``rf`` brokers are usable."""
    n = len(brokers)
    if rf > n:
        raise PlacementError(f"Unable to replicate the partition {rf} time(s): The target replication factor of "
                             f"{rf} cannot be reached because only {n} broker(s) are registered.")
    start = start_index(topic, n) if start is None else start
    return [tuple(brokers[(start + p + i) % n] for i in range(rf)) for p in partitions]


__all__ = ["NO_LEADER", "PlacementError", "usable_brokers", "start_index", "place"]
