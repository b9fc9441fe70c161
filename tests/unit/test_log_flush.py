"""Two-phase flush: capture on the owning thread, fsync elsewhere, complete."""

import os

import pytest

from hightide.log.config import LogConfig
from hightide.log.flush import FlushJob, run_flush
from hightide.log.partition_log import LogOffline, PartitionLog
from hightide.protocol.records import build_batch, validate_batches


def _append(plog, n=1, ts=1000):
    batch = build_batch([(None, b"x" * 10, [], ts)] * n)
    plog.append(batch, validate_batches(batch), ts)


def test_job_covers_offset_at_begin(tmp_path):
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False)
    _append(plog, 3)
    job = plog.begin_flush(10)
    assert job.offset == 3 and job.fds and plog.unflushed_messages == 0
    _append(plog, 2)  # arrives while the fsync runs elsewhere
    run_flush(job)
    plog.end_flush(job, ok=True)
    assert plog.recovery_point == 3
    assert open(tmp_path / "t-0" / "recovery-point").read().strip() == "3"
    assert plog.needs_flush(10 + plog.config.flush_interval_ms)
    plog.flush(20)
    assert plog.recovery_point == 5
    plog.close()


def test_failed_fsync_takes_the_log_offline_for_appends(tmp_path):
    """A failed fsync is never retried (the kernel may have dropped the pages and
    reports the error once): appends are refused, reads continue, the recovery point
    stays, and close() refuses to vouch for the log (no clean-shutdown marker)."""
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False)
    _append(plog)
    plog.flush(0)
    _append(plog)
    job = plog.begin_flush(1)
    for fd in job.fds:
        os.close(fd)
    r, w = os.pipe()  # fsync on a pipe fails with EINVAL
    bad = FlushJob([r], None, job.offset, None)
    with pytest.raises(OSError):
        run_flush(bad)
    os.close(w)
    plog.end_flush(bad, ok=False)
    assert plog.recovery_point == 1
    assert plog.offline_reason is not None
    with pytest.raises(LogOffline):
        _append(plog)
    assert plog.log_end_offset == 2 and plog.read(0, 1 << 20).data  # reads keep working
    assert not plog.needs_flush(10**12)
    with pytest.raises(LogOffline):
        plog.close()


def test_failed_capture_is_retried_without_going_offline(tmp_path):
    """If the flush cannot even be captured (e.g. EMFILE on dup), nothing was fsynced
    and nothing failed: everything is flushed again next time."""
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False)
    _append(plog)
    plog.flush(0)
    _append(plog)
    job = plog.begin_flush(1)
    for fd in job.fds:
        os.close(fd)
    bad = job._replace(fds=[], error=OSError(24, "Too many open files"))
    with pytest.raises(OSError):
        run_flush(bad)
    plog.end_flush(bad, ok=False)
    assert plog.offline_reason is None
    retry = plog.begin_flush(2)
    assert len(retry.fds) >= 3  # log and both indexes are fsynced again
    run_flush(retry)
    plog.end_flush(retry, ok=True)
    assert plog.recovery_point == 2
    plog.close()
