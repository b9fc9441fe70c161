"""Loading a partition directory's segments at start-up (recovery included)."""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from .cleaner_files import complete_swaps
from .config import LogConfig
from .index import IndexCorrupt
from .segment import LogSegment, SegmentCorrupt
from .storage import Storage, make_dirs_durable, read_small_file

__all__ = [
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "PRODUCER_SNAPSHOT_FILE",
    "LoadedSegments",
    "load_segments",
    "read_int_file",
]

log = logging.getLogger("hightide.log")

LOG_START_OFFSET_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
PRODUCER_SNAPSHOT_FILE = "producer-state.snapshot"


def read_int_file(storage: Storage, path: str) -> int | None:
    """The integer in a small text file, None if missing or unreadable."""
    try:
        return int(read_small_file(storage, path).decode("ascii").strip())
    except (FileNotFoundError, ValueError):
        return None


class LoadedSegments(NamedTuple):
    segments: list[LogSegment]
    log_start_checkpoint: int | None
    recovery_point: int
    recovered_any: bool
    created: bool  # the partition directory did not exist (its parent was fsynced)


def load_segments(storage: Storage, path: str, config: LogConfig, *, clean_shutdown: bool) -> LoadedSegments:
    """Open every segment of the partition directory ``path`` (created if missing).

    First completes log-cleaner swaps interrupted by a crash (``<base>.log.<end>.swap``,
    see :mod:`.cleaner_files`), then removes stray ``.deleted``/``.cleaned``/``.swap``/
    ``.tmp`` files and orphan index files. After an unclean shutdown the last segment,
    and every segment that ends past the recovery point, is recovered (CRC scan, torn
    tail truncated, indexes rebuilt); after a clean one none is. Other segments are
    loaded from their index files, rebuilt when those are missing or inconsistent. A truncated segment that is not the last one
    causes all later segments to be deleted. Truncations are logged as WARNINGs.
    There is always at least one segment.
    """
    created = not storage.is_dir(path)
    if created:  # the new entry in the parent is made durable by the log's first flush
        make_dirs_durable(storage, os.path.dirname(os.path.abspath(path)))
        storage.mkdir(path)
        # nothing to read, complete, clean up or recover in a new directory
        return LoadedSegments([LogSegment(storage, path, 0, config.index_interval_bytes, new=True)], None, 0, False,
                              True)
    start_ckpt = read_int_file(storage, os.path.join(path, LOG_START_OFFSET_FILE))
    recovery_point = read_int_file(storage, os.path.join(path, RECOVERY_POINT_FILE)) or 0
    complete_swaps(storage, path)
    bases: list[int] = []
    for name in storage.listdir(path):
        stem, _, ext = name.partition(".")
        if name.endswith((".deleted", ".cleaned", ".swap", ".tmp")):
            storage.unlink(os.path.join(path, name))
        elif ext == "log" and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    bases.sort()
    for name in storage.listdir(path):  # orphan index files
        stem, _, ext = name.partition(".")
        if ext in ("index", "timeindex") and stem.isdigit() and int(stem) not in bases:
            storage.unlink(os.path.join(path, name))
    interval = config.index_interval_bytes
    if not bases:
        bases = [start_ckpt or 0]
    segments: list[LogSegment] = []
    recovered_any = False
    for i, base in enumerate(bases):
        seg = LogSegment(storage, path, base, interval)
        segments.append(seg)
        is_last = i == len(bases) - 1
        next_base = bases[i + 1] if not is_last else None
        # after a clean shutdown nothing is recovered (Kafka's LogLoader): every segment,
        # the active one too, loads from its indexes (rebuilt if missing or inconsistent)
        must_recover = not clean_shutdown and (is_last or next_base is None or next_base > recovery_point)
        if not must_recover:
            try:
                seg.load()
                continue
            except (IndexCorrupt, SegmentCorrupt) as e:
                log.info("rebuilding indexes of %s: %s", seg.log_path, e)
        truncated, reason = seg.recover()
        recovered_any = True
        if truncated:
            log.warning(
                "truncated %d invalid bytes (%s) at offset %d of %s",
                truncated,
                reason,
                seg.next_offset,
                seg.log_path,
            )
            if not is_last:
                for later in bases[i + 1 :]:
                    dropped = LogSegment(storage, path, later, interval)
                    log.warning("deleting segment %s after the corrupt one", dropped.log_path)
                    dropped.delete()
                break
    return LoadedSegments(segments, start_ckpt, recovery_point, recovered_any, created)
