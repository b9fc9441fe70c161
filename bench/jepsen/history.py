"""The history of a Jepsen-style run: every operation the clients invoked, and how it ended.

An event is a JSON-ready dict. Keys every event has: ``f`` (what), ``type`` (``"ok"``:
it happened; ``"info"``: unknown — it may or may not have happened, e.g. a produce that
timed out; ``"fail"``: it did not happen), ``process`` (which client), ``t`` (seconds
since the run started, when the operation completed) and, for operations that took time,
``t0`` (when it was invoked). The operations (``f``):

- ``send``: ``producer``, ``seq`` (the producer's n-th value), ``value``,
  ``partition``, and for ``ok`` the ``offset`` the broker acknowledged.
- ``poll``: a consumer-group member's poll: ``group``, ``records`` ``[[partition,
  offset, value], ...]`` in the order received.
- ``assign`` / ``revoke``: the member's assignment changed: ``group``, ``partitions``.
- ``commit``: ``group``, ``offsets`` ``{partition: next offset}`` (``t0`` and ``t``).
- ``committed``: a read of a group's committed offsets: ``group``, ``offsets``
  ``{partition: offset}`` (-1: none) (``t0`` and ``t``).
- ``share-poll``: a share-group member's poll: ``group``, ``records`` as for ``poll``.
- ``final-read``: the read of a whole partition after the faults: ``partition``,
  ``records`` ``[[offset, value], ...]``, ``end`` (the high watermark read).
- ``nemesis``: a fault started or healed: ``fault``, ``node``, ``phase``.

JSON object keys are strings, so partitions in ``offsets`` maps are strings once a
history went through a file; the checker accepts both.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]

__all__ = ["Event", "History"]


class History:
    """A thread-safe, append-only list of events with one clock for every client."""

    def __init__(self, events: list[Event] | None = None) -> None:
        self._events: list[Event] = list(events or [])
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def now(self) -> float:
        """Seconds since the history began (the ``t`` and ``t0`` of events)."""
        return round(time.monotonic() - self._start, 6)

    def add(self, f: str, type_: str, process: str, **fields: Any) -> Event:
        """Append one event completed now (``t``); returns it."""
        ev: Event = {"f": f, "type": type_, "process": process, "t": self.now(), **fields}
        with self._lock:
            self._events.append(ev)
        return ev

    def __iter__(self) -> Iterator[Event]:
        with self._lock:
            return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def events(self) -> list[Event]:
        """A copy of every event so far, in the order they were added."""
        with self._lock:
            return list(self._events)

    def dump(self, path: Path) -> None:
        """Write the history as JSON lines (one event per line)."""
        with open(path, "w") as out:
            for ev in self.events():
                out.write(json.dumps(ev, separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        """A history written by :meth:`dump`."""
        with open(path) as src:
            return cls([json.loads(line) for line in src if line.strip()])
