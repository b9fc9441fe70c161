"""Two-phase flush: capture on the owning thread, fsync elsewhere, complete."""

import os

import pytest

from hightide.log.config import LogConfig
from hightide.log.flush import FlushJob, run_flush
from hightide.log.partition_log import PartitionLog
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


def test_failed_fsync_marks_everything_dirty(tmp_path):
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
    retry = plog.begin_flush(2)
    assert len(retry.fds) >= 3  # log and both indexes are fsynced again
    run_flush(retry)
    plog.end_flush(retry, ok=True)
    assert plog.recovery_point == 2
    plog.close()
