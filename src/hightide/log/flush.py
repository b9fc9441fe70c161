"""Flushing a partition log off the owning thread.

:meth:`PartitionLog.begin_flush` (owner thread) captures dup'd file descriptors and the
offset they cover; :func:`run_flush` (any thread) fsyncs them; :meth:`PartitionLog.end_flush`
(owner thread) advances the recovery point.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from .faults import FAULTS
from .loader import write_small_file

# Test hook for power-loss simulation: when set, every completed flush appends
# "<log file> <bytes known durable>" lines to this file, so a test can cut every segment
# back to what an fsync covered (as a power cut would) and check nothing acknowledged
# is lost. Never set in production.
FSYNC_JOURNAL = os.environ.get("HIGHTIDE_FSYNC_JOURNAL")

log = logging.getLogger("hightide.log")


class FlushJob(NamedTuple):
    """What :func:`run_flush` must make durable."""

    fds: list[int]
    dir_path: str | None
    offset: int
    recovery_file: str | None
    durable_sizes: tuple[tuple[str, int], ...] = ()  # only with FSYNC_JOURNAL
    error: OSError | None = None  # capturing the job failed (e.g. EMFILE); nothing to fsync
    # producer-state snapshots written since the last flush: fsynced after the segments,
    # a failure is only logged (a lost snapshot costs replay work at start-up, nothing else)
    snapshot_fds: tuple[int, ...] = ()


def run_flush(job: FlushJob) -> None:
    """fsync the job's files (releases the GIL while blocked), then record the recovery
    point. Always closes the job's fds. Raises OSError if an fsync fails (or the job
    carries the error that prevented capturing it)."""
    pending = list(job.snapshot_fds)
    try:
        _run_flush(job, pending)
    finally:
        for fd in pending:  # not reached: the segments' fsync failed
            os.close(fd)


def _sync_snapshots(fds: list[int]) -> None:
    while fds:
        fd = fds.pop()
        try:
            if FAULTS is not None:
                FAULTS.on_fsync(fd)
            os.fsync(fd)
        except OSError as exc:
            log.warning("could not fsync a producer state snapshot: %s", exc)
        finally:
            os.close(fd)


def _run_flush(job: FlushJob, snapshot_fds: list[int]) -> None:
    if job.error is not None:
        raise job.error
    error: OSError | None = None
    for fd in job.fds:
        try:
            if FAULTS is not None:
                FAULTS.on_fsync(fd)
            os.fsync(fd)
        except OSError as exc:
            error = error or exc
        finally:
            os.close(fd)
    if error is not None:
        raise error
    _sync_snapshots(snapshot_fds)  # after the batches they describe, before their dir entries
    if FSYNC_JOURNAL and job.durable_sizes:
        with open(FSYNC_JOURNAL, "a") as journal:
            journal.write("".join(f"{path} {size}\n" for path, size in job.durable_sizes))
    if job.dir_path is not None:
        try:
            dfd = os.open(job.dir_path, os.O_RDONLY)
        except FileNotFoundError:
            return  # the partition was deleted meanwhile
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    if job.recovery_file is not None:
        # Not fsynced: a stale or missing recovery point only means more recovery work.
        try:
            write_small_file(job.recovery_file, f"{job.offset}\n", sync=False)
        except OSError:
            pass  # deleted partition, or no space for the temp file: a stale point is safe
