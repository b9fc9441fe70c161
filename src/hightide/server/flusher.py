"""The flush policy: fsync partition logs on ``log.flush.interval.ms`` (and
``flush.ms`` per topic), when ``log.flush.interval.messages`` is reached, and on demand
for acks that must wait for durability. Requests for durability that arrive together
share one fsync per log (group commit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..log.partition_log import PartitionLog
    from .broker import Broker

log = logging.getLogger("hightide.flush")
TICK_S = 0.05


class Flusher:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self._requested: dict[int, tuple["PartitionLog", list[asyncio.Future]]] = {}
        self._wakeup: asyncio.Event | None = None

    def durable(self, plog: "PartitionLog") -> asyncio.Future:
        """A future resolved once everything appended to ``plog`` so far is fsynced."""
        fut = asyncio.get_running_loop().create_future()
        entry = self._requested.setdefault(id(plog), (plog, []))
        entry[1].append(fut)
        if self._wakeup is not None:
            self._wakeup.set()
        return fut

    async def run(self) -> None:
        self._wakeup = asyncio.Event()
        while True:
            try:
                await asyncio.wait_for(self._wakeup.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            self._wakeup.clear()
            self.flush_due()

    def flush_due(self) -> None:
        requested, self._requested = self._requested, {}
        logs = self.broker.logs
        now = int(time.time() * 1000)
        targets = {id(p): p for p, _ in requested.values()}
        if logs is not None:
            for _, plog in logs:
                if plog.needs_flush(now):
                    targets[id(plog)] = plog
        for key, plog in targets.items():
            err: BaseException | None = None
            try:
                plog.flush(now)
            except OSError as exc:
                log.error("fsync failed for %s: %s", getattr(plog, "path", plog), exc)
                err = exc
            for fut in requested.get(key, (None, []))[1]:
                if not fut.done():
                    if err is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(err)
