"""Writes waiting for the high watermark (Kafka's produce purgatory, sans-IO).

An acks=all produce (or a coordinator write) appended on the leader ends at offset ``e``
(its last offset + 1); it is acknowledged once the partition's high watermark reaches
``e``. :class:`AckWaits` keeps those waits ordered by ``e`` so that each HW advance pops
exactly the ones it satisfies (O(log n) each), whatever the token is (the shell uses a
future).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")


class AckWaits(Generic[T]):
    """Tokens waiting for a high watermark, by required offset."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._seq = itertools.count()  # ties keep insertion order; tokens are never compared

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, required_offset: int, token: T) -> None:
        """Wait until the HW is at least ``required_offset``."""
        heapq.heappush(self._heap, (required_offset, next(self._seq), token))

    def due(self, high_watermark: int) -> list[T]:
        """Remove and return the tokens whose required offset is at most ``high_watermark``,
        lowest first."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= high_watermark:
            out.append(heapq.heappop(heap)[2])
        return out

    def drain(self) -> list[T]:
        """Remove and return every token (leadership lost, broker stopping)."""
        out = [t for _, _, t in sorted(self._heap)]
        self._heap.clear()
        return out
