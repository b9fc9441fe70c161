"""Long-poll support: Fetch requests park here until data is appended to one of their
partitions (or the partition goes away), or their max wait runs out."""

from __future__ import annotations

import asyncio
from typing import Hashable, Iterable


class AppendWaiters:
    def __init__(self) -> None:
        self._by_key: dict[Hashable, set[asyncio.Future]] = {}

    def register(self, keys: Iterable[Hashable]) -> asyncio.Future:
        """A future resolved on the next append to any of ``keys``."""
        fut = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for k in keys:
            self._by_key.setdefault(k, set()).add(fut)
        fut.add_done_callback(lambda f: self._remove(f, keys))
        return fut

    def _remove(self, fut: asyncio.Future, keys: list[Hashable]) -> None:
        for k in keys:
            s = self._by_key.get(k)
            if s is not None:
                s.discard(fut)
                if not s:
                    del self._by_key[k]

    def wake(self, key: Hashable) -> None:
        s = self._by_key.get(key)
        if s:
            for fut in list(s):
                if not fut.done():
                    fut.set_result(None)

    def wake_all(self) -> None:
        for s in list(self._by_key.values()):
            for fut in list(s):
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> None:
        """Return on the next append to any of ``keys`` or after ``timeout_s``.

        A cancellation of the caller always propagates: ``asyncio.wait_for`` (3.11) returns
        the result instead when the future was resolved in the same loop iteration as the
        cancel (``wake_all`` then ``cancel`` at shutdown), and a task looping on this wait
        then never ends."""
        fut = self.register(keys)
        try:
            await asyncio.wait((fut,), timeout=timeout_s)
        finally:
            fut.cancel()  # no-op when resolved; unregisters it otherwise
