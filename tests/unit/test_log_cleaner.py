"""Log compaction (hightide.log.cleaner) against brute-force models."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.log import LogConfig, PartitionLog, clean, validate_compacted_batch
from hightide.log import cleaner as cleaner_mod
from hightide.log.cleaner_files import CLEANER_CHECKPOINT_FILE, read_cleaner_checkpoint
from hightide.log.producer_state import Duplicate, Rejected
from hightide.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_ZSTD,
    TIMESTAMP_LOG_APPEND_TIME,
    Record,
    build_batch,
    decode_records,
    iter_headers,
    scan_batches,
    validate_batches,
)

DAY = 86_400_000
Rec = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


def open_log(path: Path, segment_bytes: int = 600, **kw: object) -> PartitionLog:
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100, **kw)  # type: ignore[arg-type]
    return PartitionLog.open(str(path / "t-0"), cfg, 0, clean_shutdown=True)


def reopen(lg: PartitionLog, clean_shutdown: bool = True) -> PartitionLog:
    lg.close()
    return PartitionLog.open(lg.path, lg.config, 0, clean_shutdown=clean_shutdown)


def abandon(lg: PartitionLog) -> PartitionLog:
    """Simulate a crash: drop the object without flushing, reopen after an unclean shutdown."""
    for seg in lg.segments:
        seg.close()
    return PartitionLog.open(lg.path, lg.config, 0, clean_shutdown=False)


def append(
    lg: PartitionLog,
    recs: list[tuple[bytes | None, bytes | None, int]],
    codec: int = 0,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
) -> list[Rec]:
    b = build_batch([(k, v, [], ts) for k, v, ts in recs], compression=codec,
                    producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    r = lg.append(b, validate_batches(b), 0)
    return [(r.base_offset + i, k, v, ts) for i, (k, v, ts) in enumerate(recs)]


def read_batches(lg: PartitionLog) -> list[bytes]:
    out = []
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).data
        if not data:
            break
        for h in iter_headers(data):
            out.append(data[h.position : h.position + h.size])
            off = h.next_offset
    return out


def read_all(lg: PartitionLog) -> list[Record]:
    recs = [r for b in read_batches(lg) for r in decode_records(b)]
    offs = [r.offset for r in recs]
    assert offs == sorted(set(offs)), "offsets must strictly increase"
    return recs


def as_tuples(recs: list[Record]) -> list[Rec]:
    return [(r.offset, r.key, r.value, r.timestamp) for r in recs]


def compacted(model: list[Rec], upto: int, drop_tombstones: bool = False) -> list[Rec]:
    """Brute force: below ``upto`` keep the latest record of each key (mapped over
    records below ``upto`` only, as Kafka), everything from ``upto`` on unchanged."""
    latest = {k: o for o, k, _, _ in model if o < upto}
    return [
        r for r in model
        if r[0] >= upto or (r[0] == latest[r[1]] and not (drop_tombstones and r[2] is None))
    ]


def active_base(lg: PartitionLog) -> int:
    return lg.segments[-1].base_offset


# ---------------------------------------------------------------------- basic


@pytest.mark.parametrize("codec", [0, COMPRESSION_GZIP, COMPRESSION_ZSTD])
def test_overwrites_across_segments(tmp_path: Path, codec: int) -> None:
    lg = open_log(tmp_path)
    model: list[Rec] = []
    for i in range(300):
        k = f"k{(i * 7) % 13}".encode()
        model += append(lg, [(k, f"v{i}".encode(), 1000 + i)], codec=codec)
    assert len(lg.segments) > 5
    leo, hw, start = lg.log_end_offset, lg.high_watermark, lg.log_start_offset
    size = sum(s.size for s in lg.segments[:-1])
    upto = active_base(lg)
    res = clean(lg, 5000, force=True)
    assert res.cleaned and res.cleaned_up_to == upto
    assert res.bytes_before == size and res.bytes_after < size // 5
    assert res.records_removed == upto - len({r[1] for r in model if r[0] < upto})
    assert res.dirty_ratio == 1.0
    assert (lg.log_end_offset, lg.high_watermark, lg.log_start_offset) == (leo, hw, start)
    assert as_tuples(read_all(lg)) == compacted(model, upto)
    assert lg.segments[0].base_offset == 0
    # segments were merged while the next one (size before cleaning) still fitted
    assert len([s for s in lg.segments if s.base_offset < upto]) <= 3
    # nothing new: a second forced clean only merges what now fits together
    res2 = clean(lg, 6000, force=True)
    assert res2.records_removed == 0 and as_tuples(read_all(lg)) == compacted(model, upto)
    assert all(s.size <= lg.config.segment_bytes for s in lg.segments)
    for reopen_clean in (True, False):
        before = as_tuples(read_all(lg))
        ts_answers = [lg.offset_for_timestamp(t) for t in range(990, 1310, 9)]
        mx = lg.max_timestamp_offset()
        lg = reopen(lg, reopen_clean)
        assert as_tuples(read_all(lg)) == before
        assert [lg.offset_for_timestamp(t) for t in range(990, 1310, 9)] == ts_answers
        assert lg.max_timestamp_offset() == mx
    lg.close()


def test_timestamp_lookups_after_cleaning(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    model: list[Rec] = []
    for i in range(200):
        model += append(lg, [(f"k{i % 9}".encode(), b"v" * 20, 1000 + (i * 37) % 150)])
    clean(lg, 10**6, force=True)
    remaining = as_tuples(read_all(lg))
    assert remaining == compacted(model, active_base(lg))
    for t in range(990, 1160, 3):
        exp = next(((o, ts) for o, _, _, ts in remaining if ts >= t), None)
        assert lg.offset_for_timestamp(t) == exp, t
    mx = max(ts for *_, ts in remaining)
    assert lg.max_timestamp_offset() == (next(o for o, _, _, ts in remaining if ts == mx), mx)
    lg.close()


def test_multi_record_compressed_batches_keep_codec_and_fields(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=100_000)
    model: list[Rec] = []
    for i, codec in enumerate([COMPRESSION_GZIP, COMPRESSION_ZSTD, COMPRESSION_GZIP, COMPRESSION_ZSTD]):
        model += append(lg, [(f"k{j}".encode(), f"v{i}-{j}".encode() * 5, 2000 + 10 * i + j)
                             for j in range(i, i + 4)], codec=codec)
    lg.roll(0)
    model += append(lg, [(b"k0", b"active", 3000)])
    orig = {h.base_offset: h for b in read_batches(lg) for h in iter_headers(b)}
    os.utime(lg.segments[0].log_path, ns=(10**18, 10**18))
    res = clean(lg, 10**6, force=True)
    assert res.cleaned
    assert os.stat(lg.segments[0].log_path).st_mtime_ns == 10**18  # last-modified kept
    got = read_batches(lg)
    assert as_tuples([r for b in got for r in decode_records(b)]) == compacted(model, active_base(lg))
    for b in got:
        assert scan_batches(b).error is None  # CRC valid
        (h,) = iter_headers(b)
        o = orig[h.base_offset]
        assert (h.compression, h.last_offset_delta, h.base_timestamp, h.producer_id, h.attributes) == (
            o.compression, o.last_offset_delta, o.base_timestamp, o.producer_id, o.attributes)
        recs = decode_records(b)
        assert h.records_count == len(recs) and h.max_timestamp == max(r.timestamp for r in recs)
    # k0 lives on in the first batch because its newest version is in the active segment
    assert got[0][:8] == (0).to_bytes(8, "big")
    lg.close()


def test_log_append_time_batches(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=100_000, message_timestamp_type="LogAppendTime")
    b = build_batch([(b"a", b"1", [], 5), (b"b", b"1", [], 6)])
    lg.append(b, validate_batches(b), 777)
    b = build_batch([(b"a", b"2", [], 7)])
    lg.append(b, validate_batches(b), 888)
    lg.roll(0)
    clean(lg, 10**6, force=True)
    (b1, b2) = read_batches(lg)
    (h,) = iter_headers(b1)
    assert h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == 777
    assert [(r.offset, r.key, r.timestamp) for r in decode_records(b1)] == [(1, b"b", 777)]
    assert [(r.offset, r.key, r.timestamp) for r in decode_records(b2)] == [(2, b"a", 888)]
    lg.close()


def test_ratio_threshold_and_checkpoint(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(100):
        append(lg, [(f"k{i % 5}".encode(), b"x" * 30, i)])
    upto = active_base(lg)
    r = clean(lg, 0, min_cleanable_ratio=0.5)
    assert r.cleaned and r.cleaned_up_to == upto
    assert read_cleaner_checkpoint(lg.storage, lg.path).dirty_offset == upto
    # a little new dirty data: ratio too small, nothing happens
    while active_base(lg) == upto:
        append(lg, [(b"k1", b"y" * 30, 200)])
    r = clean(lg, 0, min_cleanable_ratio=0.9)
    assert not r.cleaned and 0 < r.dirty_ratio < 0.9 and r.cleaned_up_to == upto
    r = clean(lg, 0, min_cleanable_ratio=0.1)
    assert r.cleaned and r.cleaned_up_to == active_base(lg)
    # truncation below the checkpoint pulls it back
    lg.truncate_to(upto - 3)
    assert read_cleaner_checkpoint(lg.storage, lg.path).dirty_offset == lg.log_end_offset
    lg.close()


def test_nothing_cleanable(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, [(b"a", b"1", 0)])
    r = clean(lg, 0, force=True)
    assert not r.cleaned and r.cleaned_up_to == 0
    assert not os.path.exists(os.path.join(lg.path, CLEANER_CHECKPOINT_FILE))
    lg.close()


# ---------------------------------------------------------------------- tombstones


def test_tombstones_kept_until_delete_retention(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    model: list[Rec] = []
    for i in range(40):
        model += append(lg, [(f"k{i % 4}".encode(), b"x" * 40, i)])
    model += append(lg, [(b"k1", None, 100)])  # delete k1
    model += append(lg, [(b"k2", None, 101)])
    lg.roll(0)
    for _ in range(8):
        model += append(lg, [(b"k0", b"y" * 40, 102)])
    upto = active_base(lg)
    t0 = 10_000
    clean(lg, t0, delete_retention_ms=DAY, force=True)
    got = as_tuples(read_all(lg))
    assert got == compacted(model, upto)
    assert {k for _, k, v, _ in got if v is None} == {b"k1", b"k2"}
    # not yet expired (strictly greater is needed)
    r = clean(lg, t0 + DAY, delete_retention_ms=DAY)
    assert not r.cleaned
    clean(lg, t0 + DAY, delete_retention_ms=DAY, force=True)
    assert as_tuples(read_all(lg)) == got
    # expired: a non-forced clean runs because tombstones are due, and drops them
    r = clean(lg, t0 + DAY + 1, delete_retention_ms=DAY)
    assert r.cleaned and r.records_removed == 2
    assert as_tuples(read_all(lg)) == compacted(model, upto, drop_tombstones=True)
    lg = reopen(lg, False)
    assert as_tuples(read_all(lg)) == compacted(model, upto, drop_tombstones=True)
    lg.close()


def test_new_tombstone_gets_its_own_retention(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(30):
        append(lg, [(f"k{i % 3}".encode(), b"x" * 40, i)])
    while len(lg.segments) < 4:
        append(lg, [(b"z", b"x" * 40, 50)])
    clean(lg, 0, delete_retention_ms=100, force=True)
    append(lg, [(b"k0", None, 60)])
    while len(lg.segments) < 7:
        append(lg, [(b"z", b"x" * 40, 70)])
    clean(lg, 1000, delete_retention_ms=100, force=True)  # first sees the tombstone at t=1000
    assert any(r.key == b"k0" and r.value is None for r in read_all(lg))
    clean(lg, 1100, delete_retention_ms=100, force=True)
    assert any(r.key == b"k0" and r.value is None for r in read_all(lg))
    clean(lg, 1101, delete_retention_ms=100, force=True)
    assert not any(r.key == b"k0" for r in read_all(lg))
    lg.close()


# ---------------------------------------------------------------------- lag


def test_min_compaction_lag(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    model: list[Rec] = []
    for i in range(150):
        model += append(lg, [(f"k{i % 6}".encode(), b"x" * 30, 1000 + i)])
    segs = lg.segments
    assert len(segs) > 4
    boundary = segs[3]  # first segment too new for the lag
    now = 10_000
    lag = now - boundary.max_timestamp + 1  # boundary.max > now - lag, segs[2].max <= now - lag
    assert segs[2].max_timestamp <= now - lag
    r = clean(lg, now, min_compaction_lag_ms=lag, force=True)
    assert r.cleaned and r.cleaned_up_to == boundary.base_offset
    assert as_tuples(read_all(lg)) == compacted(model, boundary.base_offset)
    # lag passed: the rest is cleaned too
    r = clean(lg, now + 10**6, min_compaction_lag_ms=lag, force=True)
    assert r.cleaned_up_to == active_base(lg)
    assert as_tuples(read_all(lg)) == compacted(model, active_base(lg))
    lg.close()


# ---------------------------------------------------------------------- producers


def test_idempotent_producer_last_batch_retained(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for seq in range(5):
        append(lg, [(b"p", f"v{seq}".encode(), seq), (b"q", b"x", seq)], pid=7, epoch=3, seq=2 * seq)
    append(lg, [(b"p", b"w", 10)], pid=8, epoch=0, seq=0)
    for i in range(30):
        append(lg, [(b"p", b"plain", 20), (b"q", b"plain", 20)])
    lg.roll(0)
    append(lg, [(b"r", b"active", 30)])
    res = clean(lg, 10**6, force=True)
    assert res.cleaned
    batches = [next(iter_headers(b)) for b in read_batches(lg)]
    p7 = [h for h in batches if h.producer_id == 7]
    p8 = [h for h in batches if h.producer_id == 8]
    assert len(p7) == 1 and len(p8) == 1
    (h7,) = p7
    assert (h7.base_offset, h7.last_offset_delta, h7.records_count) == (8, 1, 0)
    assert (h7.producer_epoch, h7.base_sequence, h7.last_sequence) == (3, 8, 9)
    assert h7.compression == 0 and scan_batches(read_batches(lg)[0]).error is None
    assert p8[0].records_count == 0 and p8[0].base_offset == 10
    plain = [r for r in read_all(lg) if r.key in (b"p", b"q")]
    assert [r.value for r in plain] == [b"plain", b"plain"]
    # producer state survives a replay from the compacted log
    for clean_shutdown in (False, True):
        lg = reopen(lg, clean_shutdown)
        st = lg.producer_state.begin()
        dup = build_batch([(b"p", b"v", [], 0)] * 2, producer_id=7, producer_epoch=3, base_sequence=8)
        assert isinstance(st.check(validate_batches(dup)[0]), Duplicate)
        bad = build_batch([(b"p", b"v", [], 0)], producer_id=7, producer_epoch=3, base_sequence=11)
        assert isinstance(st.check(validate_batches(bad)[0]), Rejected)
    append(lg, [(b"p", b"next", 40)], pid=7, epoch=3, seq=10)
    lg.close()


def test_control_and_transactional_batches_untouched(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=100_000)
    txn = build_batch([(b"a", b"t", [], 1)], producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    ctl = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 2)], producer_id=5, producer_epoch=0,
                      is_transactional=True, is_control=True)
    lg.append(txn, validate_batches(txn, client_origin=False), 0)
    lg.append(ctl, validate_batches(ctl, client_origin=False), 0)
    append(lg, [(b"a", b"new", 3), (b"a", b"newer", 4)])
    lg.roll(0)
    clean(lg, 10**6, force=True)
    got = read_batches(lg)
    assert got[0] == txn[:8] + got[0][8:] and got[0][16:] == txn[16:]
    assert got[1][16:] == ctl[16:]
    assert [(r.offset, r.value) for r in decode_records(got[2])] == [(3, b"newer")]
    lg.close()


# ---------------------------------------------------------------------- crash safety


def _one_group_log(tmp_path: Path) -> tuple[PartitionLog, list[Rec]]:
    lg = open_log(tmp_path, segment_bytes=1_000_000)
    model: list[Rec] = []
    for i in range(60):
        model += append(lg, [(f"k{i % 5}".encode(), b"x" * 20, i)])
        if i % 12 == 11:
            lg.roll(0)
    model += append(lg, [(b"k0", None, 99)])
    return lg, model


def _after_state(lg: PartitionLog) -> list[Rec]:
    """The state a completed cleaning produces, computed on a copy of the directory."""
    lg.flush()
    copy = lg.path + "-copy"
    shutil.copytree(lg.path, copy)
    other = PartitionLog.open(copy, lg.config, 0, clean_shutdown=True)
    clean(other, 10**6, force=True)
    out = as_tuples(read_all(other))
    other.delete()
    return out


@pytest.mark.parametrize("stage", ["cleaned", "swap", "swap-half-installed"])
def test_crash_during_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    lg, model = _one_group_log(tmp_path)
    before = as_tuples(read_all(lg))
    after = _after_state(lg)
    assert before == model and after == compacted(model, active_base(lg)) and after != before

    class Crash(Exception):
        pass

    def hook(s: str) -> None:
        if stage.startswith(s):
            raise Crash

    monkeypatch.setattr(cleaner_mod, "_crash_hook", hook)
    with pytest.raises(Crash):
        clean(lg, 10**6, force=True)
    names = os.listdir(lg.path)
    assert any(n.endswith(".cleaned" if stage == "cleaned" else ".swap") for n in names)
    if stage == "swap-half-installed":  # crash inside complete_swap: some old files gone
        for n in sorted(names):
            if n.endswith((".index", ".timeindex")) or n.startswith("00000000000000000012.log"):
                os.unlink(os.path.join(lg.path, n))
    monkeypatch.setattr(cleaner_mod, "_crash_hook", lambda s: None)
    lg = abandon(lg)
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(lg.path))
    assert as_tuples(read_all(lg)) == (before if stage == "cleaned" else after)
    # the next cleaning finishes the job (the checkpoint was not advanced)
    clean(lg, 10**6, force=True)
    assert as_tuples(read_all(lg)) == after
    lg = reopen(lg, False)
    assert as_tuples(read_all(lg)) == after
    lg.close()


def test_crash_in_second_group_keeps_latest_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = open_log(tmp_path, segment_bytes=400)
    model: list[Rec] = []
    for i in range(120):
        model += append(lg, [(f"k{i // 2}".encode(), b"x" * 20, i)])
    calls = []

    def hook(s: str) -> None:
        calls.append(s)
        if calls.count("swap") == 2:
            raise RuntimeError("crash")

    monkeypatch.setattr(cleaner_mod, "_crash_hook", hook)
    with pytest.raises(RuntimeError):
        clean(lg, 10**6, force=True)
    monkeypatch.setattr(cleaner_mod, "_crash_hook", lambda s: None)
    lg = abandon(lg)
    assert read_cleaner_checkpoint(lg.storage, lg.path).dirty_offset == 0
    latest = {k: v for _, k, v, _ in model}
    got = read_all(lg)
    assert {r.key: r.value for r in got} == latest
    assert set(as_tuples(got)) <= set(model)
    lg.close()


# ---------------------------------------------------------------------- produce check


def test_validate_compacted_batch() -> None:
    assert validate_compacted_batch(build_batch([(b"k", b"v", [], 0), (b"k2", None, [], 0)])) is None
    msg = validate_compacted_batch(build_batch([(b"k", b"v", [], 0), (None, b"v", [], 0)], compression=4))
    assert msg is not None and "without key" in msg


# ---------------------------------------------------------------------- property


op = st.one_of(
    st.tuples(st.just("put"), st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=4),
              st.sampled_from([0, 0, COMPRESSION_GZIP, COMPRESSION_ZSTD])),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 3), st.booleans()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(150, 900), st.lists(op, min_size=1, max_size=50))
def test_property_latest_values_preserved(segment_bytes: int, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        lg = open_log(Path(d), segment_bytes=segment_bytes)
        model: list[Rec] = []
        now = 0
        n = 0
        for o in ops:
            if o[0] == "put":
                recs = []
                for key, delete in o[1]:
                    n += 1
                    recs.append((f"k{key}".encode(), None if delete else f"v{n}".encode() * 3, n))
                model += append(lg, recs, codec=o[2])
            elif o[0] == "roll":
                lg.roll(now)
            else:
                now += o[1] * 50
                clean(lg, now, delete_retention_ms=60, force=True)
                if o[2]:
                    lg = reopen(lg, clean_shutdown=False)
            got = as_tuples(read_all(lg))
            assert set(got) <= set(model)
            want = {k: v for _, k, v, _ in model}
            have = {k: v for _, k, v, _ in got}
            for k, v in want.items():
                assert have.get(k) == v or (v is None and k not in have), k
            assert set(have) <= set(want)
            # the active segment is never touched
            base = active_base(lg)
            assert [r for r in got if r[0] >= base] == [r for r in model if r[0] >= base]
            assert (lg.log_end_offset, lg.high_watermark) == (len(model), len(model))
        lg.close()
