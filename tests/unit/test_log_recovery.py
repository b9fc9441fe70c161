"""PartitionLog recovery: torn tails, corrupt CRCs, missing/broken index files."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from hightide.log import LogConfig, PartitionLog
from hightide.protocol.records import build_batch, decode_records, scan_batches, validate_batches

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=200)


def batch(ts: int, n: int = 3, codec: int = 0) -> bytes:
    return build_batch([(None, b"x" * 60, [], ts + i) for i in range(n)], compression=codec)


def fill(tmp_path: Path, n_batches: int = 40) -> tuple[PartitionLog, list[int]]:
    lg = PartitionLog.open(str(tmp_path / "t-0"), CFG, 0, clean_shutdown=True)
    ends = []
    for i in range(n_batches):
        b = batch(1000 + (i * 37) % 101)
        r = lg.append(b, validate_batches(b), 0)
        ends.append(r.last_offset + 1)
    return lg, ends


def reopen(tmp_path: Path, clean: bool) -> PartitionLog:
    return PartitionLog.open(str(tmp_path / "t-0"), CFG, 0, clean_shutdown=clean)


def index_bytes(lg: PartitionLog) -> list[tuple[bytes, bytes]]:
    return [
        (open(s.offset_index.path, "rb").read(), open(s.time_index.path, "rb").read()) for s in lg.segments
    ]


def offsets(lg: PartitionLog) -> list[int]:
    out = []
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        res = lg.read(off, 10**6)
        for r in decode_records(res.data[: scan_batches(res.data).headers[0].size]):
            out.append(r.offset)
        off = out[-1] + 1
    return out


def test_clean_reopen_keeps_everything(tmp_path: Path) -> None:
    lg, ends = fill(tmp_path)
    ts_answers = [lg.offset_for_timestamp(t) for t in range(990, 1110, 7)]
    mx = lg.max_timestamp_offset()
    lg.close()
    before = index_bytes(lg)
    lg = reopen(tmp_path, clean=True)
    assert lg.log_end_offset == ends[-1] and len(lg.segments) > 3
    assert [b[0] for b in index_bytes(lg)] == [b[0] for b in before]
    assert index_bytes(lg)[:-1] == before[:-1]
    assert [lg.offset_for_timestamp(t) for t in range(990, 1110, 7)] == ts_answers
    assert lg.max_timestamp_offset() == mx
    assert offsets(lg) == list(range(ends[-1]))


def test_torn_tail_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lg, ends = fill(tmp_path)
    last = lg.segments[-1]
    path, size = last.log_path, last.size
    lg.flush()
    lg.close()
    os.truncate(path, size - 10)  # cut into the last batch
    with caplog.at_level(logging.WARNING, logger="hightide.log"):
        lg = reopen(tmp_path, clean=False)
    assert lg.log_end_offset == ends[-2] == lg.high_watermark
    assert any(path in r.getMessage() and "truncated" in r.getMessage() for r in caplog.records)
    assert os.path.getsize(path) == lg.segments[-1].size
    assert offsets(lg) == list(range(ends[-2]))
    b = batch(5)
    assert lg.append(b, validate_batches(b), 0).base_offset == ends[-2]


def test_torn_tail_with_clean_flag_still_recovers_last_segment(tmp_path: Path) -> None:
    lg, ends = fill(tmp_path)
    path = lg.segments[-1].log_path
    lg.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x01")  # half a header
    lg = reopen(tmp_path, clean=True)
    assert lg.log_end_offset == ends[-1]


def test_corrupt_crc_in_tail(tmp_path: Path) -> None:
    lg, ends = fill(tmp_path)
    seg = lg.segments[-1]
    path = seg.log_path
    hs = scan_batches(open(path, "rb").read()).headers
    assert len(hs) >= 3
    lg.close()
    with open(path, "r+b") as f:  # flip a byte inside the second-to-last batch's records
        f.seek(hs[-2].position + 70)
        c = f.read(1)
        f.seek(hs[-2].position + 70)
        f.write(bytes([c[0] ^ 0xFF]))
    lg = reopen(tmp_path, clean=False)
    assert lg.log_end_offset == hs[-2].base_offset
    assert os.path.getsize(path) == hs[-2].position


def test_missing_index_files_are_rebuilt(tmp_path: Path) -> None:
    lg, ends = fill(tmp_path)
    ts_answers = [lg.offset_for_timestamp(t) for t in range(990, 1110, 5)]
    mx = lg.max_timestamp_offset()
    lg.close()
    before = index_bytes(lg)
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith((".index", ".timeindex")):
            os.unlink(tmp_path / "t-0" / name)
    lg = reopen(tmp_path, clean=True)
    after = index_bytes(lg)
    # rebuilt offset indexes are identical; time indexes may lack the final roll entry
    assert [a[0] for a in after] == [b[0] for b in before]
    assert all(a[1] == b[1][: len(a[1])] for a, b in zip(after, before))
    assert [lg.offset_for_timestamp(t) for t in range(990, 1110, 5)] == ts_answers
    assert lg.max_timestamp_offset() == mx
    assert offsets(lg) == list(range(ends[-1]))


def test_inconsistent_index_is_rebuilt(tmp_path: Path) -> None:
    lg, ends = fill(tmp_path)
    first = lg.segments[0]
    lg.close()
    before = index_bytes(lg)[0]
    with open(first.offset_index.path, "ab") as f:
        f.write(b"\x01\x02\x03")  # not a multiple of 8
    with open(first.time_index.path, "r+b") as f:
        f.write(b"\x7f" * 12)  # huge timestamp at the start: not increasing
    lg = reopen(tmp_path, clean=True)
    assert index_bytes(lg)[0][0] == before[0]
    assert offsets(lg) == list(range(ends[-1]))


def test_unclean_recovers_from_recovery_point_and_drops_later_segments(tmp_path: Path) -> None:
    lg, ends = fill(tmp_path, 30)
    lg.flush()
    rp = lg.log_end_offset
    for i in range(30):
        b = batch(2000 + i)
        lg.append(b, validate_batches(b), 0)
    segs = lg.segments
    after_rp = [s for s in segs if s.base_offset >= rp]
    assert len(after_rp) >= 2
    victim = after_rp[0]
    hs = scan_batches(open(victim.log_path, "rb").read()).headers
    lg.close()
    # close() flushed: simulate a crash that left recovery-point at rp and a corrupt batch
    (tmp_path / "t-0" / "recovery-point").write_text(f"{rp}\n")
    with open(victim.log_path, "r+b") as f:
        f.seek(hs[1].position + 65)
        f.write(b"\xff\xfe")
    lg = reopen(tmp_path, clean=False)
    assert lg.log_end_offset == hs[1].base_offset
    assert lg.segments[-1].base_offset == victim.base_offset
    assert not os.path.exists(after_rp[1].log_path)
    assert lg.recovery_point == lg.log_end_offset  # flushed after recovery


def test_stray_files_removed(tmp_path: Path) -> None:
    lg, _ = fill(tmp_path, 5)
    lg.close()
    d = tmp_path / "t-0"
    (d / "00000000000000099999.index").write_bytes(b"")
    (d / "00000000000000000000.log.deleted").write_bytes(b"x")
    lg = reopen(tmp_path, clean=True)
    names = os.listdir(d)
    assert "00000000000000099999.index" not in names and not any(n.endswith(".deleted") for n in names)
