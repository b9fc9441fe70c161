"""The core's in-memory view of the replicated log: entries, epochs, log start, snapshot.

The core owns this view and tells the shell to mirror every change (Append, Truncate,
TrimLog actions); on restart the shell rebuilds it from what survived on disk with
:meth:`RaftLog.restore`. Offsets are Kafka's: an entry of ``count`` records at base
offset ``b`` covers ``[b, b + count)``; the log end offset (LEO) is the next offset.
Below ``start_offset`` the log lives only in the latest snapshot, whose id is
``(start_offset, epoch of the last entry it covers)``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from .messages import Entry, OffsetAndEpoch

__all__ = ["RaftLog"]


class RaftLog:
    """Entries from ``start_offset`` to ``end_offset`` plus the epoch of every entry.

    Invariant: ``bases`` is strictly increasing, ``bases[0] == start_offset`` when
    non-empty, and epochs never decrease along the log.
    """

    __slots__ = ("start_offset", "snapshot", "_bases", "_entries", "end_offset")

    def __init__(self) -> None:
        self.start_offset = 0
        self.end_offset = 0
        self.snapshot: OffsetAndEpoch | None = None
        self._bases: list[int] = []
        self._entries: list[Entry] = []

    @classmethod
    def restore(cls, snapshot: OffsetAndEpoch | None,
                entries: Iterable[tuple[int, Entry]]) -> RaftLog:
        """Rebuild from a snapshot id and (base offset, entry) pairs past it, in order."""
        log = cls()
        if snapshot is not None:
            log.snapshot = snapshot
            log.start_offset = log.end_offset = snapshot.offset
        for base, entry in entries:
            if base != log.end_offset:
                raise ValueError(f"entry at {base} does not follow end offset {log.end_offset}")
            log.append(entry)
        return log

    # --- reading -----------------------------------------------------------------------

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry (the snapshot's epoch if the log is empty, else 0)."""
        if self._entries:
            return self._entries[-1].epoch
        return self.snapshot.epoch if self.snapshot is not None else 0

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.end_offset, self.last_epoch)

    def entries(self) -> list[tuple[int, Entry]]:
        """Every (base offset, entry) in the log, oldest first (a copy)."""
        return list(zip(self._bases, self._entries))

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the entry holding ``offset``; None if it is not in the log."""
        if offset < self.start_offset or offset >= self.end_offset:
            return None
        return self._entries[bisect_right(self._bases, offset) - 1].epoch

    def entry_at(self, offset: int) -> Entry | None:
        """The entry whose base offset is ``offset``; None otherwise."""
        i = bisect_right(self._bases, offset) - 1
        if i >= 0 and self._bases[i] == offset:
            return self._entries[i]
        return None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's ``endOffsetForEpoch``: the end offset of the largest epoch ≤ ``epoch``.

        Returns (end offset of that epoch, that epoch). When no entry in the log has an
        epoch ≤ ``epoch`` it answers from the snapshot, or (start offset, 0) without one:
        the caller compares the result with the log start to decide on a snapshot.
        """
        entries = self._entries
        # epochs are non-decreasing: find the first entry whose epoch > epoch
        lo, hi = 0, len(entries)
        while lo < hi:
            mid = (lo + hi) // 2
            if entries[mid].epoch <= epoch:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            if self.snapshot is not None and self.snapshot.epoch <= epoch:
                return OffsetAndEpoch(self.start_offset, self.snapshot.epoch)
            return OffsetAndEpoch(self.start_offset, 0 if self.snapshot is None else -1)
        end = self._bases[lo] if lo < len(entries) else self.end_offset
        return OffsetAndEpoch(end, entries[lo - 1].epoch)

    def read(self, offset: int, max_entries: int) -> tuple[Entry, ...]:
        """Up to ``max_entries`` entries from base offset ``offset`` (must be a boundary)."""
        i = bisect_right(self._bases, offset) - 1
        if i < 0 or self._bases[i] != offset:
            return ()
        return tuple(self._entries[i:i + max_entries])

    def is_boundary(self, offset: int) -> bool:
        """True if ``offset`` is the start or end of an entry (or the log's end)."""
        if offset == self.end_offset or offset == self.start_offset:
            return True
        return self.entry_at(offset) is not None

    # --- changing ----------------------------------------------------------------------

    def append(self, entry: Entry) -> int:
        """Append ``entry``; returns its base offset. Raises ValueError on a lower epoch."""
        if entry.count < 1:
            raise ValueError("an entry holds at least one offset")
        if self._entries and entry.epoch < self._entries[-1].epoch:
            raise ValueError(f"epoch {entry.epoch} after {self._entries[-1].epoch}")
        base = self.end_offset
        self._bases.append(base)
        self._entries.append(entry)
        self.end_offset = base + entry.count
        return base

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or after ``offset`` (an entry boundary ≥ start offset)."""
        if offset >= self.end_offset:
            return
        if offset < self.start_offset:
            raise ValueError(f"truncation to {offset} below log start {self.start_offset}")
        i = bisect_right(self._bases, offset - 1) if offset > self.start_offset else 0
        if i < len(self._bases) and self._bases[i] != offset:
            raise ValueError(f"truncation to {offset} inside an entry")
        del self._bases[i:]
        del self._entries[i:]
        self.end_offset = offset

    def trim_to_snapshot(self, snapshot: OffsetAndEpoch) -> None:
        """Make ``snapshot`` the latest snapshot and drop the entries it covers.

        A snapshot past the end offset (a follower installing one fetched from the
        leader) empties the log and moves both the start and end offset to it.
        """
        self.snapshot = snapshot
        if snapshot.offset >= self.end_offset:
            self._bases.clear()
            self._entries.clear()
            self.start_offset = self.end_offset = snapshot.offset
            return
        i = bisect_right(self._bases, snapshot.offset - 1)
        if self._bases[i] != snapshot.offset:
            raise ValueError(f"snapshot at {snapshot.offset} is inside an entry")
        del self._bases[:i]
        del self._entries[:i]
        self.start_offset = snapshot.offset

    def reset_to_snapshot(self, snapshot: OffsetAndEpoch) -> None:
        """Replace the whole log by ``snapshot`` (a follower installing a fetched one)."""
        self._bases.clear()
        self._entries.clear()
        self.snapshot = snapshot
        self.start_offset = self.end_offset = snapshot.offset
