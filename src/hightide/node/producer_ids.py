"""New producer ids for this node, handed out from blocks (Kafka's ``ProducerIdManager``).

Theory of operation. Producer ids are unique in the cluster: the controller hands them
out in blocks recorded in the metadata log (``ProducerIdsRecord``). This node keeps one
block and gives out its ids one by one; when it is used up, :meth:`ProducerIdManager.next_producer_id`
asks ``allocate`` for the next one (a metadata write on a voter, AllocateProducerIds to
the controller on a broker-only node: :meth:`~.metadata_writer.MetadataWriter.allocate_producer_ids`).
Concurrent callers that find the block used up may each ask for one; only the first
block to arrive is kept while it lasts (the others are left unused).

Built from ``allocate``: an async callable returning a new block as (first id, end).
It satisfies :class:`~hightide.services.ProducerIdSource`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable


class ProducerIdManager:
    """Producer ids from blocks given by ``allocate`` (see the module doc)."""

    def __init__(self, allocate: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._allocate = allocate
        self._block: tuple[int, int] = (0, 0)  # next, end of the reserved block

    async def next_producer_id(self) -> int:
        """A new producer id (may reserve a new block first). Raises what ``allocate``
        raises (CoordinatorUnavailable) when no block can be had."""
        while self._block[0] >= self._block[1]:
            first, end = await self._allocate()
            if self._block[0] >= self._block[1]:  # not refilled by a concurrent call
                self._block = (first, end)
        nxt, end = self._block
        self._block = (nxt + 1, end)
        return nxt
