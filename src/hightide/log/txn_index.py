"""The aborted transactions index of a partition (Kafka's ``.txnindex``).

Every ABORT marker appended to the log adds one entry, in Kafka's layout: 34 bytes,
big-endian ``int16 version (0), int64 producer id, int64 first offset, int64 last
offset (the marker's offset), int64 last stable offset`` (the LSO once this transaction
is complete). An entry lives in the file of the segment that holds its marker,
``<20-digit base offset>.txnindex``, created with the first entry and deleted with the
segment.

In memory the log keeps every entry of the partition in one list in marker order (so
sorted by last offset), which makes :meth:`TxnIndex.collect` a bisection plus a walk
over the entries that overlap the fetched range: no file IO on the fetch path.

The files are disposable beyond the producer-state snapshot the log starts from: entries
for markers at or after it are dropped and rebuilt by the replay of the batches after
the snapshot (:meth:`TxnIndex.forget_from`, :meth:`TxnIndex.sync_files`). A file of a
segment that no longer exists (left by a log cleaning that merged segments, see
:mod:`.cleaner_files`) is merged into the file of the segment that now holds its
offsets. A torn last entry (a crash in the middle of its write) is ignored.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from .storage import Storage, StorageFile, write_small_file

__all__ = ["AbortedTxn", "TxnIndex", "TXN_INDEX_SUFFIX", "txn_index_path", "ENTRY_SIZE"]

log = logging.getLogger("hightide.log")

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    """One entry of the aborted transactions index (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def txn_index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")


def _decode(data: bytes, path: str) -> list[AbortedTxn]:
    whole = len(data) - len(data) % ENTRY_SIZE
    if whole != len(data):
        log.warning("%s: ignoring a torn entry (%d bytes) at its end", path, len(data) - whole)
    out = []
    for version, pid, first, last, lso in _ENTRY.iter_unpack(data[:whole]):
        if version != 0:
            log.warning("%s: ignoring an entry of unknown version %d", path, version)
            continue
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    """Aborted transactions of one partition: memory plus one file per segment.

    ``entries`` is sorted by last offset. Not thread-safe (the log's owning thread).
    """

    def __init__(self, storage: Storage, directory: str) -> None:
        self.storage = storage
        self.directory = directory
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []
        self._dirty: set[str] = set()  # files written since the last flush took them

    def __len__(self) -> int:
        return len(self.entries)

    # ------------------------------------------------------------------ loading

    def load(self, bases: Sequence[int]) -> bool:
        """Read every ``.txnindex`` file of the directory (``bases``: the segments' base
        offsets, ascending). Files of segments that no longer exist are merged into the
        segment now holding their entries' markers, or dropped when below the first
        segment. Returns True if a file was rewritten or removed (the directory needs an
        fsync). Raises OSError when the directory cannot be listed."""
        found: dict[int, list[AbortedTxn]] = {}
        for name in self.storage.listdir(self.directory):
            stem, dot, ext = name.partition(".")
            if dot and ext == "txnindex" and len(stem) == 20 and stem.isdigit():
                path = os.path.join(self.directory, name)
                try:
                    f = self.storage.open(path, create=False)
                    try:
                        data = f.pread(f.size(), 0)
                    finally:
                        f.close()
                except OSError as exc:
                    log.warning("%s: unreadable, its entries are rebuilt only from the log: %s", path, exc)
                    continue
                found[int(stem)] = _decode(data, path)
        known = set(bases)
        merged = sorted({e for entries in found.values() for e in entries}, key=lambda e: e.last_offset)
        first_base = bases[0] if bases else 0
        self.entries = [e for e in merged if e.last_offset >= first_base]
        self._lasts = [e.last_offset for e in self.entries]
        changed = False
        orphans = [b for b in found if b not in known]
        touched = {self._base_of(e.last_offset, bases) for b in orphans for e in found[b]
                   if e.last_offset >= first_base}
        for b in orphans:
            self._unlink(b)
            changed = True
        for b in sorted(touched):
            self._write_segment(b, bases)
            changed = True
        return changed

    @staticmethod
    def _base_of(offset: int, bases: Sequence[int]) -> int:
        return bases[max(bisect_right(bases, offset) - 1, 0)]

    # ------------------------------------------------------------------ changes

    def append(self, entry: AbortedTxn, segment_base: int) -> None:
        """Add the entry of an ABORT marker just appended to the segment at
        ``segment_base`` (its last offset must be past every entry's): in memory, and
        written to the end of the segment's file (page cache; fsynced by the next
        flush). Raises OSError when the file cannot be written; the entry stays in
        memory (a restart rebuilds it from the log)."""
        if self._lasts and entry.last_offset <= self._lasts[-1]:
            raise ValueError(f"aborted transaction at {entry.last_offset} is not after {self._lasts[-1]}")
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)
        path = txn_index_path(self.directory, segment_base)
        f = self.storage.open(path)
        try:
            size = f.size()
            f.pwrite(entry.encode(), size - size % ENTRY_SIZE)
        finally:
            f.close()
        self._dirty.add(path)

    def add_replayed(self, entry: AbortedTxn) -> None:
        """Add an entry rebuilt by replaying the log (memory only; see :meth:`sync_files`)."""
        if self._lasts and entry.last_offset <= self._lasts[-1]:
            return  # already known (replay of a range the files covered)
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)

    def forget_from(self, offset: int) -> None:
        """Drop the in-memory entries whose marker is at or after ``offset``."""
        i = bisect_left(self._lasts, offset)
        del self.entries[i:], self._lasts[i:]

    def drop_below(self, base: int) -> None:
        """Drop the entries of deleted segments (markers below ``base``, the first
        remaining segment's base); their files went with the segments."""
        i = bisect_left(self._lasts, base)
        if i:
            del self.entries[:i], self._lasts[:i]

    def sync_files(self, from_offset: int, bases: Sequence[int]) -> bool:
        """Make the files of the segments holding offsets at/after ``from_offset`` match
        memory (after a replay rebuilt those entries). Returns True if any file was
        written or removed. Raises OSError."""
        changed = False
        start = bisect_right(bases, from_offset) - 1
        for b in bases[max(start, 0):]:
            want = b"".join(e.encode() for e in self._segment_entries(b, bases))
            path = txn_index_path(self.directory, b)
            try:
                f = self.storage.open(path, create=False)
                try:
                    have = f.pread(f.size(), 0)
                finally:
                    f.close()
            except FileNotFoundError:
                have = b""
            if have != want:
                self._write_segment(b, bases)
                changed = True
        return changed

    def rewrite_segment(self, base: int, bases: Sequence[int]) -> None:
        """Write the file of the segment at ``base`` from memory (after segments were
        merged into it by the cleaner). Raises OSError."""
        self._write_segment(base, bases)

    def _segment_entries(self, base: int, bases: Sequence[int]) -> list[AbortedTxn]:
        i = bases.index(base)
        end = bases[i + 1] if i + 1 < len(bases) else None
        lo = bisect_left(self._lasts, base)
        hi = len(self._lasts) if end is None else bisect_left(self._lasts, end)
        return self.entries[lo:hi]

    def _write_segment(self, base: int, bases: Sequence[int]) -> None:
        entries = self._segment_entries(base, bases)
        path = txn_index_path(self.directory, base)
        if not entries:
            self._unlink(base)
            return
        write_small_file(self.storage, path, b"".join(e.encode() for e in entries), sync=False)
        self._dirty.add(path)

    def _unlink(self, base: int) -> None:
        path = txn_index_path(self.directory, base)
        try:
            self.storage.unlink(path)
        except FileNotFoundError:
            pass
        self._dirty.discard(path)

    def unlink_segment(self, base: int) -> None:
        """Remove the file of a segment that is gone (memory is left alone)."""
        self._unlink(base)

    def take_dirty_files(self) -> list[StorageFile]:
        """Handles of the files written since the last call, for the flush to fsync (a
        file removed meanwhile, or one that cannot be opened, is skipped)."""
        files: list[StorageFile] = []
        for path in sorted(self._dirty):
            try:
                files.append(self.storage.open(path, create=False))
            except OSError:
                pass
        self._dirty.clear()
        return files

    # ------------------------------------------------------------------ reads

    def collect(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions that may have batches
        in ``[fetch_offset, upper_bound)``: marker at/after ``fetch_offset`` and first
        offset below ``upper_bound``, in marker order. Stops at the first entry whose
        LSO reaches ``upper_bound`` (every later transaction starts at or after it),
        as Kafka's TransactionIndex.collectAbortedTxns does."""
        if not self._lasts:
            return []
        out = []
        entries = self.entries
        for i in range(bisect_left(self._lasts, fetch_offset), len(entries)):
            e = entries[i]
            if e.first_offset < upper_bound:
                out.append((e.producer_id, e.first_offset))
            if e.last_stable_offset >= upper_bound:
                break
        return out
