"""Sparse offset and time indexes of one segment (Kafka's ``.index`` / ``.timeindex``).

Both are kept in memory (``array``) and mirrored to files by appending fixed-size
big-endian entries; pending entries are written in :meth:`write_pending` (called on
flush, roll and close). Files carry no header, so they are exactly Kafka's layout
without preallocation:

* ``.index``: int32 relative offset, int32 physical position — the last offset of a
  batch and the position where that batch starts.
* ``.timeindex``: int64 timestamp, int32 relative offset — the segment's max timestamp
  so far and the (last) offset of the batch that first reached it.

Index files are disposable: when missing or inconsistent, the segment rebuilds them.
A file is created lazily (as Kafka's ``LazyIndex``): when the first entry is written,
or when its segment rolls (:meth:`_IndexFile.create`) — a new partition's empty segment
has only its ``.log``.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right

from .storage import Storage, StorageFile

__all__ = ["OffsetIndex", "TimeIndex", "IndexCorrupt"]

_OFF_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorrupt(Exception):
    """An index file does not match the expectations; it must be rebuilt."""


class _IndexFile:
    entry: struct.Struct

    def __init__(self, storage: Storage, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._storage = storage
        self._pending = bytearray()
        self._written_entries = 0
        self._file: StorageFile | None = None  # opened (created) on first use
        self._closed = False
        self._dirty = False

    @property
    def _f(self) -> StorageFile:
        f = self._file
        if f is None:
            if self._closed:
                raise ValueError(f"index {self.path} is closed")
            f = self._file = self._storage.open(self.path)
        return f

    def create(self) -> None:
        """Make sure the file exists (a rolled segment keeps its index files, so the next
        start loads instead of rebuilding them)."""
        if self._file is None and not self._closed:
            self._f
            self._dirty = True  # its directory entry and (empty) contents go with the next flush

    def _read_raw(self) -> list[tuple[int, int]]:
        size = self._f.size()
        if size % self.entry.size:
            raise IndexCorrupt(f"{self.path}: size {size} is not a multiple of {self.entry.size}")
        data = self._f.pread(size, 0) if size else b""
        if len(data) != size:
            raise IndexCorrupt(f"{self.path}: short read")
        return list(self.entry.iter_unpack(data))

    def write_pending(self) -> None:
        """Append buffered entries to the file (no fsync)."""
        if self._pending:
            # on an error (disk full) the entries stay pending and are retried next time
            self._f.pwrite(self._pending, self._written_entries * self.entry.size)
            self._written_entries += len(self._pending) // self.entry.size
            self._pending.clear()
            self._dirty = True

    def take_dirty_file(self) -> StorageFile | None:
        """Write pending entries; if the file needs an fsync, return a dup of its handle
        (the caller fsyncs and closes it, possibly on another thread) and mark it clean."""
        self.write_pending()
        if not self._dirty:
            return None
        dup = self._f.dup()
        self._dirty = False
        return dup

    def mark_dirty(self) -> None:
        if self._file is not None:  # a file never opened holds nothing to fsync
            self._dirty = True

    def fsync(self) -> None:
        self.write_pending()
        if self._dirty:
            self._f.fsync()
            self._dirty = False

    def _rewrite(self, n_entries: int, data: bytes) -> None:
        if not data and self._file is None and not self._storage.exists(self.path):
            self._written_entries = 0  # nothing to write: the file stays uncreated
            self._pending.clear()
            return
        self._f.truncate(0)
        if data:
            self._f.pwrite(data, 0)
        self._written_entries = n_entries
        self._pending.clear()
        self._dirty = True

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.write_pending()
        finally:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None


class OffsetIndex(_IndexFile):
    """Sparse map offset -> file position of a batch start (largest entry <= target)."""

    entry = _OFF_ENTRY

    def __init__(self, storage: Storage, path: str, base_offset: int) -> None:
        super().__init__(storage, path, base_offset)
        self.offsets = array("q")
        self.positions = array("q")

    def load(self, log_size: int) -> None:
        """Load entries from the file; raise IndexCorrupt if they are inconsistent
        (non-increasing offsets/positions, negative relative offsets, positions >= log_size)."""
        entries = self._read_raw()
        offsets, positions = array("q"), array("q")
        last_off, last_pos = -1, -1
        for rel, pos in entries:
            if rel < 0 or rel <= last_off or pos <= last_pos or pos >= log_size:
                raise IndexCorrupt(f"{self.path}: inconsistent entry ({rel}, {pos})")
            offsets.append(self.base_offset + rel)
            positions.append(pos)
            last_off, last_pos = rel, pos
        self.offsets, self.positions = offsets, positions
        self._written_entries = len(entries)

    def append(self, offset: int, position: int) -> None:
        """Add an entry (offset must exceed the last one)."""
        self.offsets.append(offset)
        self.positions.append(position)
        self._pending += _OFF_ENTRY.pack(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of the largest indexed entry with offset <= ``offset`` (0 if none)."""
        i = bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def offset_from_position(self, position: int) -> int | None:
        """Offset of the first indexed entry whose batch starts at/after ``position``
        (the last offset of that batch), None if none: every offset of the batches
        before ``position`` is below it (an upper bound for a read ending there)."""
        i = bisect_left(self.positions, position)
        return self.offsets[i] if i < len(self.offsets) else None

    def floor_position(self, position: int) -> int:
        """Largest indexed batch position <= ``position`` (0 if none)."""
        i = bisect_right(self.positions, position) - 1
        return self.positions[i] if i >= 0 else 0

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries (absolute offset, position) and rewrite the file."""
        self.offsets = array("q", [o for o, _ in entries])
        self.positions = array("q", [p for _, p in entries])
        data = b"".join(_OFF_ENTRY.pack(o - self.base_offset, p) for o, p in entries)
        self._rewrite(len(entries), data)

    def __len__(self) -> int:
        return len(self.offsets)


class TimeIndex(_IndexFile):
    """Sparse map max-timestamp-so-far -> offset of the batch that first reached it."""

    entry = _TIME_ENTRY

    def __init__(self, storage: Storage, path: str, base_offset: int) -> None:
        super().__init__(storage, path, base_offset)
        self.timestamps = array("q")
        self.offsets = array("q")

    def load(self) -> None:
        """Load entries; raise IndexCorrupt unless timestamps and offsets strictly increase
        and offsets are >= the base offset (each entry marks a new maximum)."""
        entries = self._read_raw()
        ts_arr, off_arr = array("q"), array("q")
        last_ts, last_rel = None, -1
        for ts, rel in entries:
            if rel < 0 or rel <= last_rel or (last_ts is not None and ts <= last_ts):
                raise IndexCorrupt(f"{self.path}: inconsistent entry ({ts}, {rel})")
            ts_arr.append(ts)
            off_arr.append(self.base_offset + rel)
            last_ts, last_rel = ts, rel
        self.timestamps, self.offsets = ts_arr, off_arr
        self._written_entries = len(entries)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append (timestamp, offset) if timestamp exceeds the last entry's timestamp."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self._pending += _TIME_ENTRY.pack(timestamp, offset - self.base_offset)

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, or None."""
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.offsets[-1]

    def lookup_before(self, timestamp: int) -> int | None:
        """Offset of the last entry whose timestamp is < ``timestamp`` (None if none).

        Every record at or below that offset has a timestamp < ``timestamp``.
        """
        lo, hi = 0, len(self.timestamps)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.timestamps[mid] < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return self.offsets[lo - 1] if lo > 0 else None

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries (timestamp, absolute offset) and rewrite the file."""
        self.timestamps = array("q", [t for t, _ in entries])
        self.offsets = array("q", [o for _, o in entries])
        data = b"".join(_TIME_ENTRY.pack(t, o - self.base_offset) for t, o in entries)
        self._rewrite(len(entries), data)

    def __len__(self) -> int:
        return len(self.timestamps)
