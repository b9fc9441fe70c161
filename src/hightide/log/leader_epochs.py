"""The leader-epoch cache of a partition log (Kafka's ``LeaderEpochFileCache``).

Theory of operation. Every record batch carries the leader epoch of the leader that
appended it (PartitionLeaderEpoch). The cache maps each epoch that has batches in the log
(or that a leader started at its log end) to the first offset of that epoch, ascending in
both. It answers Kafka's OffsetForLeaderEpoch question -- where does epoch E end here? --
which is how a follower finds the point where its log and the leader's diverge (KIP-101,
KIP-279; Fetch v12+ asks it on every fetch through LastFetchedEpoch / DivergingEpoch).

Rules (Kafka's):

* :meth:`LeaderEpochCache.assign` adds (epoch, start) when it is a new epoch or the latest
  epoch starting earlier; entries that would break monotonicity (an epoch >= the new one,
  or a start >= the new start) are removed first. Assigning the latest epoch again at a
  later offset changes nothing.
* :meth:`~LeaderEpochCache.end_offset_for` answers (the largest epoch <= the requested
  one, the start offset of the next epoch or the log end offset), (-1, -1) for an
  undefined or too-new epoch, and (requested, first known start) for an epoch older than
  every entry.
* The cache follows the log: :meth:`~LeaderEpochCache.truncate_from_end` when the log is
  truncated (entries starting at or after the new end go), and
  :meth:`~LeaderEpochCache.truncate_from_start` when the log start offset rises (the
  entry covering it is moved up to it).

The file ``leader-epoch-checkpoint`` in the partition directory holds the cache in Kafka's
checkpoint text format: the version (0), the number of entries, then one ``epoch
startOffset`` line per entry. Writing it is not this module's business: the partition
log writes :meth:`LeaderEpochCache.checkpoint_text` atomically (temporary file, fsync,
rename) with its next flush, off the event loop (``dirty`` says one is due). After a
crash the log reconciles what it reads (:func:`parse_checkpoint`) with its batches.
Pure: no IO here except :func:`read_checkpoint`, which reads through a Storage engine.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import NamedTuple

from .storage import Storage, read_small_file

__all__ = [
    "EpochEntry",
    "LeaderEpochCache",
    "CheckpointCorrupt",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "parse_checkpoint",
    "read_checkpoint",
    "truncation_point",
]

log = logging.getLogger("hightide.log")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    """One leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class CheckpointCorrupt(ValueError):
    """The checkpoint file does not hold Kafka's format (the message says where)."""


class LeaderEpochCache:
    """Epoch -> start offset, ascending in both (see the module docstring).

    ``dirty`` is True when the in-memory entries differ from what was last handed out by
    :meth:`take_checkpoint` (the log then writes the file with its next flush).
    """

    def __init__(self, entries: Iterable[EpochEntry | tuple[int, int]] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.dirty = False
        for epoch, start in entries:
            self.assign(epoch, start)
        self.dirty = False

    # ------------------------------------------------------------------ reading

    def entries(self) -> list[EpochEntry]:
        """Every entry, oldest first."""
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts)]

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch, None when the cache is empty."""
        return self._epochs[-1] if self._epochs else None

    def latest_entry(self) -> EpochEntry | None:
        """The newest entry, None when the cache is empty."""
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the batch at ``offset`` belongs to (the newest entry starting at or
        before it), None when ``offset`` is before every entry."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer for ``requested_epoch``: (epoch, end offset).

        * undefined (-1) or empty cache: (-1, -1);
        * the latest epoch: (it, ``log_end_offset``);
        * newer than every entry: (-1, -1) (a leader's latest epoch is its newest);
        * older than every entry: (``requested_epoch``, the first entry's start) -- the
          data before it is gone, the follower restarts from there;
        * otherwise: (the largest epoch <= requested, the start of the next epoch).
        """
        epochs = self._epochs
        if requested_epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return epochs[higher - 1], self._starts[higher]

    # ------------------------------------------------------------------ changing

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        A no-op when ``epoch`` is the latest epoch and starts at or before
        ``start_offset``. Otherwise every entry with an epoch >= ``epoch`` or a start >=
        ``start_offset`` is removed first (WARNING when that drops data-bearing entries,
        as Kafka logs it). Raises ValueError for a negative epoch or offset.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs, starts = self._epochs, self._starts
        if epochs and epochs[-1] == epoch and starts[-1] <= start_offset:
            return False
        removed: list[EpochEntry] = []
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            removed.append(EpochEntry(epochs.pop(), starts.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("new leader epoch entry (%d, %d) removed conflicting entries %s", epoch, start_offset,
                        removed[::-1])
        epochs.append(epoch)
        starts.append(start_offset)
        self.dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Remove the entries starting at or after ``end_offset`` (the log was truncated
        to end there); returns them, oldest first."""
        i = bisect_left(self._starts, end_offset)
        if end_offset < 0 or i == len(self._starts):
            return []
        removed = [EpochEntry(e, s) for e, s in zip(self._epochs[i:], self._starts[i:])]
        del self._epochs[i:], self._starts[i:]
        self.dirty = True
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """The log now starts at ``start_offset``: remove the entries starting at or
        before it and put back the newest of them starting at ``start_offset`` (so an
        entry at exactly ``start_offset`` stays). Returns the removed entries."""
        i = bisect_right(self._starts, start_offset)
        if i == 0:
            return []
        removed = [EpochEntry(e, s) for e, s in zip(self._epochs[:i], self._starts[:i])]
        keep = removed[-1].epoch
        del self._epochs[:i], self._starts[:i]
        self._epochs.insert(0, keep)
        self._starts.insert(0, start_offset)
        if len(removed) > 1 or removed[0].start_offset != start_offset:
            self.dirty = True
        return removed

    def clear(self) -> None:
        """Remove every entry (the log was emptied)."""
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self.dirty = True

    # ------------------------------------------------------------------ the file

    def checkpoint_text(self) -> str:
        """The entries in Kafka's checkpoint format (version, count, ``epoch offset`` lines)."""
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines.extend(f"{e} {s}" for e, s in zip(self._epochs, self._starts))
        return "\n".join(lines) + "\n"

    def take_checkpoint(self) -> str | None:
        """The checkpoint text to write if the cache changed since the last one taken
        (clears ``dirty``), else None. A caller whose write fails sets ``dirty`` again."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.checkpoint_text()

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries()})"


def truncation_point(leader_epoch: int, leader_end_offset: int, local: LeaderEpochCache, log_end_offset: int,
                     high_watermark: int) -> tuple[int, bool]:
    """Where a follower truncates given the leader's (epoch, end offset) for the epoch it
    asked about (a DivergingEpoch in a Fetch answer, or an OffsetForLeaderEpoch answer):
    Kafka's ``AbstractFetcherThread.getOffsetTruncationState``. Returns (offset, done);
    not done means the follower must ask again with its (now older) latest epoch.

    * the leader does not know the end (-1 offset): the follower's high watermark;
    * no epoch from the leader: min(leader's end, our LEO);
    * our largest epoch <= the leader's is the leader's epoch: min(where it ends here,
      where it ends on the leader, our LEO), done;
    * it is an older epoch: where that one ends here (capped at our LEO), not done;
    * we have none: min(leader's end, our LEO).
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(high_watermark, log_end_offset), True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    epoch, end = local.end_offset_for(leader_epoch, log_end_offset)
    if end == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end_offset, log_end_offset), True
    if epoch != leader_epoch:
        return min(end, log_end_offset), False
    return min(end, leader_end_offset, log_end_offset), True


def parse_checkpoint(text: str) -> list[EpochEntry]:
    """The entries of a checkpoint file's text. Raises CheckpointCorrupt: an unknown
    version, a count that does not match the lines, a malformed line, or entries that
    are not ascending in both epoch and offset."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointCorrupt("fewer than 2 header lines")
    try:
        version, count = int(lines[0]), int(lines[1])
    except ValueError:
        raise CheckpointCorrupt(f"malformed header {lines[:2]!r}") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointCorrupt(f"unrecognized version {version}")
    body = [ln for ln in lines[2:] if ln.strip()]
    if len(body) != count:
        raise CheckpointCorrupt(f"expected {count} entries but found {len(body)}")
    out: list[EpochEntry] = []
    for ln in body:
        parts = ln.split()
        try:
            if len(parts) != 2:
                raise ValueError
            entry = EpochEntry(int(parts[0]), int(parts[1]))
        except ValueError:
            raise CheckpointCorrupt(f"malformed entry {ln!r}") from None
        if entry.epoch < 0 or entry.start_offset < 0 or (
                out and (entry.epoch <= out[-1].epoch or entry.start_offset <= out[-1].start_offset)):
            raise CheckpointCorrupt(f"entry {ln!r} is not ascending or is negative")
        out.append(entry)
    return out


def read_checkpoint(storage: Storage, directory: str) -> list[EpochEntry] | None:
    """The entries of ``directory``'s checkpoint file; None when it is missing or
    unreadable (logged at WARNING; the log then rebuilds the cache from its batches)."""
    path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT_FILE)
    try:
        return parse_checkpoint(read_small_file(storage, path).decode("ascii", "replace"))
    except FileNotFoundError:
        return None
    except (OSError, CheckpointCorrupt) as exc:
        log.warning("%s: unreadable leader epoch checkpoint (%s); rebuilding it from the log", path, exc)
        return None
