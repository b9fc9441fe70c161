"""PartitionLog: append/read, offsets, timestamps, retention, DeleteRecords, config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hightide.log import LogConfig, OffsetOutOfRange, PartitionLog, ProducerStateError
from hightide.log.flush import run_flush
from hightide.protocol import records as R
from hightide.protocol.records import build_batch, decode_records, parse_header, scan_batches, validate_batches

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=300)


def batch(timestamps: list[int], *, size: int = 40, codec: int = 0, **kw: object) -> bytes:
    return build_batch(
        [(None, bytes([i % 256]) * size, [], ts) for i, ts in enumerate(timestamps)],
        compression=codec,
        **kw,  # type: ignore[arg-type]
    )


def append(lg: PartitionLog, b: bytes, now: int = 0) -> tuple[int, int]:
    r = lg.append(b, validate_batches(b), now)
    return r.base_offset, r.last_offset


def open_log(tmp_path: Path, cfg: LogConfig = SMALL, now: int = 0, clean: bool = True) -> PartitionLog:
    return PartitionLog.open(str(tmp_path / "t-0"), cfg, now, clean_shutdown=clean)


def all_records(lg: PartitionLog) -> list[R.Record]:
    out: list[R.Record] = []
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        res = lg.read(off, 1)
        for h in scan_batches(res.data).headers:
            out.extend(r for r in decode_records(memoryview(res.data)[h.position : h.position + h.size]) if r.offset >= off)
            off = h.last_offset + 1
    return out


def test_empty_log(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    assert (lg.log_start_offset, lg.high_watermark, lg.log_end_offset, lg.size_bytes) == (0, 0, 0, 0)
    assert lg.read(0, 100).data == b""
    assert lg.offset_for_timestamp(0) is None and lg.max_timestamp_offset() is None
    with pytest.raises(OffsetOutOfRange):
        lg.read(1, 100)
    # index files are created lazily (at the first entry or the roll), as Kafka's LazyIndex
    assert sorted(os.listdir(tmp_path / "t-0")) == ["00000000000000000000.log"]


def test_append_read_round_trip_over_segments(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    expected = []
    for i in range(60):
        n = 1 + i % 4
        b = batch([1000 + i] * n)
        base, last = append(lg, b)
        assert last - base == n - 1
        expected.extend(range(base, last + 1))
        assert lg.log_end_offset == last + 1 == lg.high_watermark == lg.last_stable_offset
    assert len(lg.segments) > 3
    assert all(s.size <= SMALL.segment_bytes for s in lg.segments)
    names = sorted(p for p in os.listdir(tmp_path / "t-0") if p.endswith(".log"))
    assert names == [f"{s.base_offset:020d}.log" for s in lg.segments]
    assert [r.offset for r in all_records(lg)] == expected
    assert lg.size_bytes == sum(os.path.getsize(tmp_path / "t-0" / n) for n in names)
    # every stored batch has its assigned base offset and epoch, and a valid CRC
    for seg in lg.segments:
        data = open(seg.log_path, "rb").read()
        res = scan_batches(data)
        assert res.error is None and res.valid_bytes == len(data)
        assert all(h.partition_leader_epoch == 0 for h in res.headers)


def test_leader_epoch_and_offsets_patched_without_touching_crc(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, batch([1, 2]))
    b = batch([5, 6, 7])
    lg.append(b, validate_batches(b), 0, leader_epoch=9)
    data = lg.read(2, 10_000).data
    h = parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (2, 9, parse_header(b).crc)
    assert data[16:] == b[16:]


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, batch([1, 2, 3]))
    b2 = batch([4, 5, 6, 7])
    append(lg, b2)
    res = lg.read(5, 1)
    assert res.first_offset == 3 and len(res.data) == len(b2)
    assert [r.offset for r in decode_records(res.data)] == [3, 4, 5, 6]


def test_max_bytes_and_min_one_batch(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(index_interval_bytes=100))
    sizes = []
    for i in range(20):
        b = batch([i] * 3, size=30 + i)
        sizes.append(len(b))
        append(lg, b)
    assert len(lg.read(0, 1).data) == sizes[0]  # min one batch
    assert len(lg.read(0, sizes[0] + sizes[1] - 1).data) == sizes[0]
    assert len(lg.read(0, sizes[0] + sizes[1]).data) == sizes[0] + sizes[1]
    total = sum(sizes)
    assert len(lg.read(0, 10**6).data) == total
    mid = lg.read(30, 3 * max(sizes))
    hs = scan_batches(mid.data).headers
    assert mid.first_offset == 30 and scan_batches(mid.data).error is None and len(hs) >= 2
    assert lg.read(60, 100).data == b""  # offset == LEO


def test_read_respects_max_offset(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(5):
        append(lg, batch([i, i]))
    res = lg.read(0, 10**6, max_offset=6)
    assert [h.base_offset for h in scan_batches(res.data).headers] == [0, 2, 4]
    assert lg.read(6, 10**6, max_offset=6).data == b""
    assert lg.read(0, 1, max_offset=0).data == b""


def test_read_out_of_range(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, batch([1, 2]))
    with pytest.raises(OffsetOutOfRange):
        lg.read(3, 100)
    with pytest.raises(OffsetOutOfRange):
        lg.read(-1, 100)


def test_offset_for_timestamp_out_of_order_across_segments(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(segment_bytes=400, index_interval_bytes=100))
    model: list[tuple[int, int]] = []
    tss = [50, 10, 30, 100, 20, 100, 70, 5, 200, 150, 90, 300, 1, 60]
    for i, ts in enumerate(tss):
        group = [ts, ts - 3, ts + 1]
        base, _ = append(lg, batch(group, codec=i % 5))
        model.extend((base + j, t) for j, t in enumerate(group))
    assert len(lg.segments) > 1
    for target in range(-5, 310, 3):
        exp = next(((o, t) for o, t in model if t >= target), None)
        assert lg.offset_for_timestamp(target) == exp, target


def test_max_timestamp_offset_ties_and_compressed(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, batch([1, 2, 3]))
    append(lg, batch([10, 500, 20, 500, 7], codec=R.COMPRESSION_ZSTD))  # offsets 3..7
    append(lg, batch([500, 500]))  # tie, later: loses
    assert lg.max_timestamp_offset() == (4, 500)
    for i in range(30):  # push more segments with smaller timestamps
        append(lg, batch([100 + i] * 4))
    assert len(lg.segments) > 2
    assert lg.max_timestamp_offset() == (4, 500)
    base, _ = append(lg, batch([3, 501, 501], codec=R.COMPRESSION_LZ4))
    assert lg.max_timestamp_offset() == (base + 1, 501)
    assert lg.max_timestamp_offset(max_offset=base) is None


def test_log_append_time(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    b = batch([1, 2, 3], codec=R.COMPRESSION_GZIP)
    r = lg.append(b, validate_batches(b), 77_000)
    assert r.log_append_time_ms == 77_000
    data = lg.read(0, 10_000).data
    (h,) = validate_batches(data, client_origin=False)  # CRC recomputed
    assert h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == 77_000
    assert [r.timestamp for r in decode_records(data)] == [77_000] * 3
    assert lg.offset_for_timestamp(70_000) == (0, 77_000)
    assert lg.max_timestamp_offset() == (0, 77_000)


def test_roll_by_time(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(segment_ms=1000))
    lg.append(b := batch([1]), validate_batches(b), 0)
    lg.append(b, validate_batches(b), 1000)
    assert len(lg.segments) == 1
    lg.append(b, validate_batches(b), 1001)
    assert [s.base_offset for s in lg.segments] == [0, 2]
    assert not lg.maybe_roll_by_time(1500)
    assert lg.maybe_roll_by_time(2002)
    assert [s.base_offset for s in lg.segments] == [0, 2, 3]
    assert lg.roll(3000) is lg.segments[-1]  # empty active: no new segment


def test_record_list_too_large(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(segment_bytes=100))
    b = batch([1, 2, 3])
    with pytest.raises(R.InvalidRecords) as e:
        lg.append(b, validate_batches(b), 0)
    assert e.value.error_code == R.RECORD_LIST_TOO_LARGE


def test_retention_by_time(tmp_path: Path) -> None:
    cfg = SMALL.replace(retention_ms=1000)
    lg = open_log(tmp_path, cfg)
    for i in range(40):
        append(lg, batch([i * 100] * 3))
    segs = lg.segments
    assert len(segs) >= 4
    now = segs[1].max_timestamp + 1001  # segments 0 and 1 expired
    freed = lg.apply_retention(now)
    assert freed == segs[0].size + segs[1].size
    assert lg.log_start_offset == segs[2].base_offset == lg.segments[0].base_offset
    assert not os.path.exists(segs[0].log_path)
    # the new log start offset is written by the next flush, never on the caller's thread
    assert lg.needs_flush(now)
    job = lg.begin_due_flush(now)
    assert job.log_start == lg.log_start_offset
    run_flush(job)
    lg.end_flush(job, ok=True)
    assert not lg.needs_flush(now)
    assert open(tmp_path / "t-0" / "log-start-offset").read().strip() == str(lg.log_start_offset)
    with pytest.raises(OffsetOutOfRange):
        lg.read(0, 100)
    # everything expired: the active segment goes too, after a roll
    leo = lg.log_end_offset
    lg.apply_retention(10**9)
    assert lg.log_start_offset == leo == lg.log_end_offset and len(lg.segments) == 1
    assert lg.segments[0].size == 0 and lg.read(leo, 100).data == b""
    assert append(lg, batch([5]))[0] == leo


def test_retention_by_size(tmp_path: Path) -> None:
    lg = open_log(tmp_path, SMALL.replace(retention_bytes=3000, retention_ms=-1))
    for i in range(60):
        append(lg, batch([i] * 3))
    total = lg.size_bytes
    sizes = [s.size for s in lg.segments]
    lg.apply_retention(10**12)
    # delete oldest while size - seg.size >= retention.bytes
    n, diff = 0, total - 3000
    while diff - sizes[n] >= 0:
        diff -= sizes[n]
        n += 1
    assert lg.size_bytes == total - sum(sizes[:n]) and lg.size_bytes >= 3000
    assert lg.log_start_offset == lg.segments[0].base_offset


def test_delete_records_before(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(40):
        append(lg, batch([i] * 3))
    first_segs = lg.segments
    target = first_segs[2].base_offset + 1
    assert lg.delete_records_before(target) == target
    assert lg.log_start_offset == target
    assert lg.segments[0].base_offset == first_segs[2].base_offset  # segment containing it kept
    res = lg.read(target, 1)
    assert res.log_start_offset == target and res.first_offset <= target
    assert lg.delete_records_before(5) == target  # never moves backwards
    assert lg.offset_for_timestamp(0) == (target, target // 3)
    with pytest.raises(OffsetOutOfRange):
        lg.delete_records_before(lg.high_watermark + 1)
    assert lg.delete_records_before(-1) == lg.high_watermark == lg.log_end_offset
    assert len(lg.segments) == 1  # the active segment is never deleted
    lg.close()
    lg2 = open_log(tmp_path)
    assert lg2.log_start_offset == lg2.log_end_offset == 120


def test_truncate_to(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(40):
        append(lg, batch([i] * 3))
    lg.truncate_to(61)  # middle of batch 60..62: the whole batch goes
    assert lg.log_end_offset == 60 == lg.high_watermark
    assert [r.offset for r in all_records(lg)] == list(range(60))
    assert append(lg, batch([1]))[0] == 60
    lg.truncate_to(0)
    assert (lg.log_start_offset, lg.log_end_offset, len(lg.segments)) == (0, 0, 1)


def test_flush_and_needs_flush(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(flush_interval_messages=5, flush_interval_ms=1000))
    # a new, empty partition: nothing to make durable yet (lost in a crash, it is created
    # again when its partition opens); its log start, the first segment's base, needs no file
    assert not lg.needs_flush(0)
    append(lg, batch([1, 2]))
    assert lg.needs_flush(10)  # once it holds something: its new directory's entry
    job = lg.begin_due_flush(10)
    assert job.files == [] and job.log_start is None and str(tmp_path) in job.dir_paths
    run_flush(job)
    lg.end_flush(job, ok=True)
    assert lg.unflushed_messages == 2 and not lg.needs_flush(10)
    assert lg.needs_flush(1000)
    append(lg, batch([1, 2, 3]))
    assert lg.needs_flush(10)
    assert lg.flush(20) == 5 and lg.unflushed_messages == 0 and not lg.needs_flush(500)
    assert open(tmp_path / "t-0" / "recovery-point").read().strip() == "5"


def test_delete(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, batch([1]))
    lg.delete()
    assert not (tmp_path / "t-0").exists()


def test_idempotent_producer_through_append(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    kw = {"producer_id": 42, "producer_epoch": 0}
    b0 = batch([1, 2], base_sequence=0, **kw)
    assert lg.append(b0, validate_batches(b0), 5).base_offset == 0
    b1 = batch([3], base_sequence=2, **kw)
    assert lg.append(b1, validate_batches(b1), 5).base_offset == 2
    dup = lg.append(b0, validate_batches(b0), 6)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (0, 1) and lg.log_end_offset == 3
    bad = batch([4], base_sequence=7, **kw)
    with pytest.raises(ProducerStateError) as e:
        lg.append(bad, validate_batches(bad), 7)
    assert e.value.error_code == 45 and lg.log_end_offset == 3
    lg.close()
    lg = open_log(tmp_path)  # snapshot
    assert lg.append(b1, validate_batches(b1), 8).duplicate
    lg.close()
    snaps = [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".snapshot")]
    assert snaps == ["00000000000000000003.snapshot"]
    os.unlink(tmp_path / "t-0" / snaps[0])
    lg = open_log(tmp_path)  # replay from batch headers
    assert lg.producer_state_replayed == 2
    assert lg.append(b1, validate_batches(b1), 8).duplicate
    b2 = batch([4], base_sequence=3, **kw)
    assert not lg.append(b2, validate_batches(b2), 9).duplicate


def test_config_from_kafka() -> None:
    c = LogConfig.from_kafka(
        {
            "segment.bytes": "1048576",
            "segment.ms": "60000",
            "retention.ms": "-1",
            "retention.bytes": "10",
            "index.interval.bytes": "128",
            "max.message.bytes": "2000",
            "flush.messages": str(2**63 - 1),
            "flush.ms": "50",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "delete",
        }
    )
    assert c == LogConfig(
        segment_bytes=1048576,
        segment_ms=60000,
        retention_ms=-1,
        retention_bytes=10,
        index_interval_bytes=128,
        max_message_bytes=2000,
        flush_interval_messages=None,
        flush_interval_ms=50,
        message_timestamp_type="LogAppendTime",
    )
    assert c.log_append_time
    for bad in ({"segment.bytes": "abc"}, {"segment.bytes": "1"}, {"retention.ms": "-2"}, {"message.timestamp.type": "x"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            LogConfig.from_kafka(bad)
