"""Two-phase flush: capture on the owning thread, fsync elsewhere, complete."""

import dataclasses

import pytest

from hightide.log.config import LogConfig
from hightide.log.flush import run_flush
from hightide.log.partition_log import LogOffline, PartitionLog
from hightide.log.storage import POSIX
from hightide.log.storage_faulty import Fault, FaultyStorage
from hightide.protocol.records import build_batch, validate_batches


def _append(plog, n=1, ts=1000):
    batch = build_batch([(None, b"x" * 10, [], ts)] * n)
    plog.append(batch, validate_batches(batch), ts)


def test_job_covers_offset_at_begin(tmp_path):
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False)
    _append(plog, 3)
    job = plog.begin_flush(10)
    assert job.offset == 3 and job.files and plog.unflushed_messages == 0
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
    disk = FaultyStorage(POSIX)
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False, storage=disk)
    _append(plog)
    plog.flush(0)
    _append(plog)
    job = plog.begin_flush(1)
    disk.set_rules(Fault("fsync", "EIO", path="t-0/", count=1))
    with pytest.raises(OSError):
        run_flush(job)
    plog.end_flush(job, ok=False)
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
    captured = len(job.files)
    for f in job.files:
        f.close()
    bad = dataclasses.replace(job, files=[], error=OSError(24, "Too many open files"))
    with pytest.raises(OSError):
        run_flush(bad)
    plog.end_flush(bad, ok=False)
    assert plog.offline_reason is None
    retry = plog.begin_flush(2)
    assert len(retry.files) == captured >= 1  # the log (and the indexes that have a file) fsynced again
    run_flush(retry)
    plog.end_flush(retry, ok=True)
    assert plog.recovery_point == 2
    plog.close()


def test_a_failed_log_start_offset_write_is_retried_not_fatal(tmp_path):
    """The log start offset file is written by the flush (never on the owner's thread);
    a full disk there only delays it: the log stays online and the next flush writes it."""
    disk = FaultyStorage(POSIX)
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=200), 0, clean_shutdown=False,
                             storage=disk)
    for _ in range(6):
        _append(plog, 3)
    plog.flush(0)
    assert plog.delete_records_before(7) == 7
    assert plog.needs_flush(0)
    disk.set_rules(Fault("write", "ENOSPC", path="log-start-offset"))
    plog.flush(1)
    assert plog.offline_reason is None and plog.needs_flush(1)
    # the old value stays: none (a log that starts at its first segment's base, 0, never
    # wrote one: a reload starts there without it)
    assert not (tmp_path / "t-0" / "log-start-offset").exists()
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".tmp")]
    disk.clear()
    plog.flush(2)
    assert not plog.needs_flush(2)
    assert (tmp_path / "t-0" / "log-start-offset").read_text().strip() == "7"
    plog.close()


def test_the_recovery_point_file_is_checkpointed_once_per_interval(tmp_path):
    """Flushes advance the recovery point in memory every time, but its file is written
    at most once per ``RECOVERY_POINT_CHECKPOINT_MS`` (Kafka's
    ``log.flush.offset.checkpoint.interval.ms``, 60 s) and at close: a temp file and a
    rename after every fsync cost a commit of the metadata log as much as a tenth of its
    time (issue 33). A stale file only means more recovery work after a crash."""
    from hightide.log.partition_log import RECOVERY_POINT_CHECKPOINT_MS
    rp_file = tmp_path / "t-0" / "recovery-point"
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False)
    t = 1_000
    _append(plog, 2)
    plog.flush(t)
    assert plog.recovery_point == 2 and rp_file.read_text().strip() == "2"  # the first one is written
    for i in range(5):
        _append(plog)
        t += 1_000
        plog.flush(t)
    assert plog.recovery_point == 7 and rp_file.read_text().strip() == "2"
    _append(plog)
    plog.flush(1_000 + RECOVERY_POINT_CHECKPOINT_MS)
    assert rp_file.read_text().strip() == "8"
    _append(plog)
    plog.close()  # a clean close writes it
    assert rp_file.read_text().strip() == "9"


def test_a_stale_recovery_point_file_costs_only_recovery(tmp_path):
    """A crash with the file behind the flushed data: the next open recovers from the
    older point and loses nothing that was flushed."""
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=False)
    _append(plog, 2)
    plog.flush(1_000)
    _append(plog, 3)
    plog.flush(2_000)
    assert (tmp_path / "t-0" / "recovery-point").read_text().strip() == "2"
    plog.abandon()  # a kill
    again = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 3_000, clean_shutdown=False)
    try:
        assert again.log_end_offset == 5
    finally:
        again.close()
