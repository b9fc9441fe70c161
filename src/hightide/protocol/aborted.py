"""Kafka's read_committed consumer rule for skipping aborted transactions, on batch
headers: a Fetch with ``isolation_level=1`` returns the batches below the LSO together
with the ``(producer id, first offset)`` of every aborted transaction overlapping them;
a transactional data batch of a producer whose aborted transaction began at or before
the batch's last offset is skipped, until that producer's next control batch (the
transaction's ABORT marker). Pure; one instance per Fetch answer, fed its batches in
order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from .records import BatchHeader

__all__ = ["AbortedFilter"]


class AbortedFilter:
    """Feed every batch header of one partition's Fetch answer, in order, to
    :meth:`aborted`; it answers True for the data batches a read_committed consumer
    skips (control batches answer False: callers skip those anyway)."""

    __slots__ = ("_aborting", "_queue")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._queue = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._queue)
        self._aborting: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self._queue or self._aborting)

    def aborted(self, h: BatchHeader) -> bool:
        """True if ``h`` is a data batch of an aborted transaction. Guarantees: the
        answer for a batch depends only on the batches fed before it and the list."""
        if h.producer_id < 0:
            return False
        queue = self._queue
        while queue and queue[0][0] <= h.last_offset:
            self._aborting.add(heapq.heappop(queue)[1])
        if h.is_control:
            self._aborting.discard(h.producer_id)
            return False
        return h.is_transactional and h.producer_id in self._aborting
