"""On-disk state of the log cleaner: the per-partition checkpoint and swap files.

Kept apart from :mod:`.cleaner` so the loader and :class:`PartitionLog` can use it
without importing the cleaner.

``cleaner-offset-checkpoint`` (text, in the partition directory)::

    <first dirty offset>
    <segment base offset> <first-cleaned ms> <has tombstones 0|1>
    ...

The first line is the offset below which the log has been cleaned (Kafka's cleaner
checkpoint, but per partition). Each further line describes one segment of the clean
section: the time (on the cleaner's clock) its records were first cleaned — the start of
the ``delete.retention.ms`` period of the tombstones in it — and whether it still holds
tombstones. A missing or unreadable file means "nothing cleaned yet".

Swap files: a cleaned group of segments ``[base, end)`` is written as
``<base>.log.cleaned`` (with ``<base>.index.cleaned`` and ``<base>.timeindex.cleaned``),
fsynced, then renamed to ``<base>.log.<end>.swap`` (20-digit numbers). That rename is
the commit point: :func:`complete_swap` (run by the cleaner and, after a crash, by the
loader) deletes every segment whose base offset lies in ``[base, end)`` and renames the
swap file to ``<base>.log``. A leftover ``.cleaned`` file is simply deleted (the clean
never happened). The directory is fsynced after the commit rename and before the old
segments are unlinked (on a worker thread: see :mod:`.cleaner`), so a power cut can
never keep the unlinks without the commit.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from .storage import Storage, read_small_file, write_small_file

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CleanerCheckpoint",
    "SegmentCleanInfo",
    "cleaned_path",
    "complete_swap",
    "complete_swaps",
    "encode_cleaner_checkpoint",
    "read_cleaner_checkpoint",
    "swap_path",
    "truncate_cleaner_checkpoint",
    "write_cleaner_checkpoint",
]

log = logging.getLogger("hightide.log")

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_SWAP_RE = re.compile(r"^(\d{20})\.log\.(\d{20})\.swap$")
_SEGMENT_EXTS = ("index", "timeindex", "log")  # indexes first: never a new .log with stale indexes


class SegmentCleanInfo(NamedTuple):
    """What the cleaner remembers about one segment of the clean section."""

    cleaned_ms: int
    tombstones: bool


@dataclass
class CleanerCheckpoint:
    """``dirty_offset``: first offset not yet cleaned. ``segments``: base offset → info."""

    dirty_offset: int = 0
    segments: dict[int, SegmentCleanInfo] = field(default_factory=dict)


def read_cleaner_checkpoint(storage: Storage, path: str) -> CleanerCheckpoint:
    """The checkpoint of partition directory ``path``; empty if missing or unreadable."""
    try:
        lines = read_small_file(storage, os.path.join(path, CLEANER_CHECKPOINT_FILE)).decode("ascii").split("\n")
        ckpt = CleanerCheckpoint(int(lines[0].strip()))
        for line in lines[1:]:
            if line.strip():
                base, ms, tomb = line.split()
                ckpt.segments[int(base)] = SegmentCleanInfo(int(ms), tomb == "1")
        return ckpt
    except FileNotFoundError:
        return CleanerCheckpoint()
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        log.warning("ignoring unreadable cleaner checkpoint in %s: %s", path, e)
        return CleanerCheckpoint()


def encode_cleaner_checkpoint(ckpt: CleanerCheckpoint) -> str:
    """The file content for ``ckpt``."""
    lines = [str(ckpt.dirty_offset)]
    for base in sorted(ckpt.segments):
        info = ckpt.segments[base]
        lines.append(f"{base} {info.cleaned_ms} {1 if info.tombstones else 0}")
    return "\n".join(lines) + "\n"


def write_cleaner_checkpoint(storage: Storage, path: str, ckpt: CleanerCheckpoint) -> None:
    """Atomically replace the checkpoint of partition directory ``path`` (fsynced; the
    rename is durable with the next fsync of the directory)."""
    write_small_file(storage, os.path.join(path, CLEANER_CHECKPOINT_FILE), encode_cleaner_checkpoint(ckpt))


def truncate_cleaner_checkpoint(storage: Storage, path: str, offset: int) -> None:
    """After the log was truncated to ``offset``: nothing at/after it counts as cleaned.
    No-op when there is no checkpoint or it is already at/below ``offset``."""
    if not storage.exists(os.path.join(path, CLEANER_CHECKPOINT_FILE)):
        return
    ckpt = read_cleaner_checkpoint(storage, path)
    if ckpt.dirty_offset <= offset and all(b < offset for b in ckpt.segments):
        return
    ckpt.dirty_offset = min(ckpt.dirty_offset, offset)
    ckpt.segments = {b: i for b, i in ckpt.segments.items() if b < offset}
    write_cleaner_checkpoint(storage, path, ckpt)


def cleaned_path(path: str, base: int) -> str:
    """Where the cleaner writes the new segment starting at ``base``."""
    return os.path.join(path, f"{base:020d}.log.cleaned")


def swap_path(path: str, base: int, end: int) -> str:
    """The committed form of a cleaned segment replacing the segments in [base, end)."""
    return os.path.join(path, f"{base:020d}.log.{end:020d}.swap")


def complete_swap(storage: Storage, path: str, base: int, end: int, *, sync: bool = True) -> None:
    """Install the swap file for [base, end): unlink the files of every segment whose base
    offset lies in [base, end) (index files first), rename the swap file to
    ``<base>.log``; with ``sync`` fsync the directory after the unlinks and after the
    rename. Idempotent up to the rename, so a crash at any point is completed by running
    it again. Without ``sync`` the caller must have made the swap rename durable first;
    the unlinks and the rename then become durable, in that order, with the next
    directory fsync, and a crash before it leaves either the old files (then the swap
    file is still there and is completed at start-up) or the new one."""
    victims: list[tuple[int, str]] = []
    for name in storage.listdir(path):
        stem, _, ext = name.partition(".")
        if ext in _SEGMENT_EXTS and len(stem) == 20 and stem.isdigit() and base <= int(stem) < end:
            victims.append((_SEGMENT_EXTS.index(ext), name))
    for _, name in sorted(victims):
        try:
            storage.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
    if sync:
        storage.fsync_dir(path)
    storage.replace(swap_path(path, base, end), os.path.join(path, f"{base:020d}.log"))
    if sync:
        storage.fsync_dir(path)


def complete_swaps(storage: Storage, path: str) -> int:
    """Loader step: finish every committed swap left by a crash (in offset order).
    Returns how many were completed. Other ``.swap`` files are left to the loader,
    which deletes them."""
    found = []
    for name in storage.listdir(path):
        m = _SWAP_RE.match(name)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
    for base, end in sorted(found):
        log.warning("%s: completing the interrupted log cleaning of offsets [%d, %d)", path, base, end)
        complete_swap(storage, path, base, end)
    return len(found)
