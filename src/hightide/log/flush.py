"""Flushing a partition log off the owning thread.

:meth:`PartitionLog.begin_flush` (owner thread) captures dup'd file handles, the small
files to write durably and the offset they cover; :func:`run_flush` (any thread) does
the disk work; :meth:`PartitionLog.end_flush` (owner thread) advances the recovery point.

Order inside :func:`run_flush`, and why:

1. fsync the segment and index files (a failure raises: the log goes offline);
2. fsync the producer-state snapshots written since the last flush (after the batches
   they describe; a failure is only logged);
3. write the small files (``log-start-offset``, ``leader-epoch-checkpoint``, a lowered
   ``recovery-point``): temp file, fsync, rename (a failure is logged and retried by
   the next flush; see :attr:`FlushJob.small_files_ok`);
4. fsync the directories: the partition directory (new, renamed, unlinked files, the
   renames of step 3) and, for a partition created since the last flush, its parent;
5. write ``recovery-point`` without fsync (a stale one only costs recovery work), unless
   a small file failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .storage import Storage, StorageFile, write_small_file

log = logging.getLogger("hightide.log")

__all__ = ["FlushJob", "run_flush"]


@dataclass
class FlushJob:
    """What :func:`run_flush` must make durable (see the module docstring)."""

    storage: Storage
    files: list[StorageFile]
    dir_paths: tuple[str, ...]
    offset: int  # the recovery point once the job succeeds
    recovery_file: str | None
    error: OSError | None = None  # capturing the job failed (e.g. EMFILE); nothing to fsync
    # producer-state snapshots written since the last flush: fsynced after the segments,
    # a failure is only logged (a lost snapshot costs replay work at start-up, nothing else)
    snapshot_files: tuple[StorageFile, ...] = ()
    small_files: tuple[tuple[str, str], ...] = ()  # (path, content) written durably
    log_start: int | None = None  # the log start offset among ``small_files``
    small_files_ok: bool = True  # set by run_flush: every small file was written


def run_flush(job: FlushJob) -> None:
    """Do the job's disk work (see the module docstring); blocking, releases the GIL
    while the kernel works. Always closes the job's handles. Raises OSError if an fsync
    of the segments or directories fails (or the job carries the error that prevented
    capturing it)."""
    pending = list(job.snapshot_files)
    try:
        _run_flush(job, pending)
    finally:
        for f in pending:  # not reached: the segments' fsync failed
            f.close()


def _sync_snapshots(files: list[StorageFile]) -> None:
    while files:
        f = files.pop()
        try:
            f.fsync()
        except OSError as exc:
            log.warning("could not fsync a producer state snapshot: %s", exc)
        finally:
            f.close()


def _write_small_files(job: FlushJob) -> None:
    for path, content in job.small_files:
        try:
            write_small_file(job.storage, path, content)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile
        except OSError as exc:
            job.small_files_ok = False
            log.warning("could not write %s (retried by the next flush): %s", path, exc)


def _run_flush(job: FlushJob, snapshot_files: list[StorageFile]) -> None:
    if job.error is not None:
        raise job.error
    error: OSError | None = None
    for f in job.files:
        try:
            f.fsync()
        except OSError as exc:
            error = error or exc
        finally:
            f.close()
    if error is not None:
        raise error
    _sync_snapshots(snapshot_files)  # after the batches they describe, before their dir entries
    _write_small_files(job)
    for path in job.dir_paths:
        try:
            job.storage.fsync_dir(path)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile
    if job.recovery_file is not None and job.small_files_ok:
        # Not fsynced: a stale or missing recovery point only means more recovery work.
        # Not written past small files that failed: the leader-epoch checkpoint must
        # cover every batch below the recovery point on disk.
        try:
            write_small_file(job.storage, job.recovery_file, f"{job.offset}\n", sync=False)
        except OSError:
            pass  # deleted partition, or no space for the temp file: a stale point is safe
