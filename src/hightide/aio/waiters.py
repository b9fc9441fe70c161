"""Long-poll support: Fetch requests park here until data is appended to one of their
partitions (or the partition goes away), or their max wait runs out."""

from __future__ import annotations

import asyncio
from typing import Hashable, Iterable


class AppendWaiters:
    """Waiters per key, woken in the order they registered (first come, first answered;
    and a run of the whole-cluster simulation wakes them in the same order every time,
    which a set, ordered by object address, would not)."""

    def __init__(self) -> None:
        self._by_key: dict[Hashable, dict[asyncio.Future, None]] = {}

    def register(self, keys: Iterable[Hashable]) -> asyncio.Future:
        """A future resolved on the next append to any of ``keys``."""
        fut = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for k in keys:
            self._by_key.setdefault(k, {})[fut] = None
        fut.add_done_callback(lambda f: self._remove(f, keys))
        return fut

    def _remove(self, fut: asyncio.Future, keys: list[Hashable]) -> None:
        for k in keys:
            s = self._by_key.get(k)
            if s is not None:
                s.pop(fut, None)
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
