"""Idempotent producer state (sans-IO) and its persistence through the log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hightide.log import ACCEPTED, Duplicate, LogConfig, PartitionLog, ProducerStateError, ProducerStateManager, Rejected
from hightide.log.producer_state import INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER
from hightide.protocol.records import BatchHeader, build_batch, parse_header, validate_batches


def hdr(pid: int, epoch: int, seq: int, n: int = 1, *, control: bool = False, txn: bool = False) -> BatchHeader:
    return parse_header(
        build_batch(
            [(None, b"v", [], 1) for _ in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_control=control,
            is_transactional=txn,
        )
    )


class Appender:
    """Drives a ProducerStateManager like the log does."""

    def __init__(self) -> None:
        self.m = ProducerStateManager()
        self.next = 0

    def send(self, h: BatchHeader) -> object:
        r = self.m.check(h)
        if r is ACCEPTED:
            first = self.next
            self.next += h.last_offset_delta + 1
            self.m.update(h, first, self.next - 1, 100)
        return r


def test_non_idempotent_is_never_checked() -> None:
    a = Appender()
    assert a.send(hdr(-1, -1, -1)) is ACCEPTED
    assert a.send(hdr(-1, -1, -1)) is ACCEPTED
    assert a.m.producers == {}


def test_in_sequence_and_duplicates() -> None:
    a = Appender()
    assert a.send(hdr(1, 0, 0, 3)) is ACCEPTED  # 0..2 -> offsets 0..2
    assert a.send(hdr(1, 0, 3, 2)) is ACCEPTED  # 3..4 -> offsets 3..4
    assert a.send(hdr(1, 0, 0, 3)) == Duplicate(0, 2, 100)
    assert a.send(hdr(1, 0, 3, 2)) == Duplicate(3, 4, 100)
    r = a.send(hdr(1, 0, 7))
    assert isinstance(r, Rejected) and r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    r = a.send(hdr(1, 0, 4))  # overlaps but is not an exact duplicate
    assert isinstance(r, Rejected) and r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert a.send(hdr(1, 0, 5)) is ACCEPTED


def test_only_last_five_batches_are_cached() -> None:
    a = Appender()
    for seq in range(7):
        assert a.send(hdr(1, 0, seq)) is ACCEPTED
    assert isinstance(a.send(hdr(1, 0, 1)), Rejected)  # evicted: out of order
    assert isinstance(a.send(hdr(1, 0, 2)), Duplicate)


def test_unknown_producer_accepts_any_sequence() -> None:
    a = Appender()
    assert a.send(hdr(9, 3, 57)) is ACCEPTED
    assert a.send(hdr(9, 3, 58)) is ACCEPTED


def test_epoch_rules() -> None:
    a = Appender()
    a.send(hdr(1, 5, 0, 2))
    r = a.send(hdr(1, 4, 2))
    assert isinstance(r, Rejected) and r.error_code == INVALID_PRODUCER_EPOCH
    r = a.send(hdr(1, 6, 3))  # new epoch must start at 0
    assert isinstance(r, Rejected) and r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert a.send(hdr(1, 6, 0)) is ACCEPTED
    assert a.m.producers[1].epoch == 6 and len(a.m.producers[1].batches) == 1
    # the old epoch's batches are forgotten
    assert isinstance(a.send(hdr(1, 5, 0, 2)), Rejected)


def test_sequence_wraps_around() -> None:
    a = Appender()
    assert a.send(hdr(1, 0, 2**31 - 2, 2)) is ACCEPTED  # last seq = 2**31-1
    assert a.send(hdr(1, 0, 0)) is ACCEPTED
    b = Appender()
    assert b.send(hdr(1, 0, 2**31 - 1, 3)) is ACCEPTED  # wraps inside the batch: last = 1
    assert b.send(hdr(1, 0, 2)) is ACCEPTED


def test_control_batches_and_transactions() -> None:
    a = Appender()
    a.send(hdr(1, 0, 0, 2, txn=True))
    assert a.m.first_unstable_offset() == 0
    assert a.send(hdr(1, 0, -1, control=True, txn=True)) is ACCEPTED
    assert a.m.first_unstable_offset() is None
    assert a.send(hdr(1, 0, 2)) is ACCEPTED  # markers do not consume sequence numbers


def test_sequential_checks_in_one_append() -> None:
    m = ProducerStateManager()
    txn = m.begin()
    h0, h1, h1dup = hdr(1, 0, 0, 2), hdr(1, 0, 2), hdr(1, 0, 5)
    assert txn.check(h0) is ACCEPTED
    txn.update(h0, 0, 1, 1)
    assert txn.check(h1) is ACCEPTED  # sees h0
    txn.update(h1, 2, 2, 1)
    assert isinstance(txn.check(h1dup), Rejected)
    assert m.producers == {}  # nothing visible before commit
    txn.commit()
    assert m.producers[1].last_seq == 2


def test_snapshot_json_round_trip() -> None:
    a = Appender()
    a.send(hdr(1, 0, 0, 2, txn=True))
    a.send(hdr(2, 3, 10))
    m2 = ProducerStateManager.from_json(a.m.to_json())
    assert m2.producers == a.m.producers


def test_multi_batch_append_checked_sequentially(tmp_path: Path) -> None:
    lg = PartitionLog.open(str(tmp_path / "p-0"), LogConfig(), 0, clean_shutdown=True)
    kw = {"producer_id": 5, "producer_epoch": 0}
    b0 = build_batch([(None, b"a", [], 1)] * 2, base_sequence=0, **kw)  # type: ignore[arg-type]
    b1 = build_batch([(None, b"b", [], 2)], base_sequence=2, **kw)  # type: ignore[arg-type]
    buf = b0 + b1
    r = lg.append(buf, validate_batches(buf, client_origin=False), 0)
    assert (r.base_offset, r.last_offset) == (0, 2)
    b2 = build_batch([(None, b"c", [], 3)], base_sequence=3, **kw)  # type: ignore[arg-type]
    b4 = build_batch([(None, b"c", [], 3)], base_sequence=5, **kw)  # type: ignore[arg-type]
    for bad in (b2 + b2, b2 + b4):  # second batch duplicates / skips the first -> nothing appended
        with pytest.raises(ProducerStateError) as e:
            lg.append(bad, validate_batches(bad, client_origin=False), 0)
        assert e.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert lg.log_end_offset == 3
    assert lg.producer_state.producers[5].last_seq == 2


def test_restart_keeps_producer_state(tmp_path: Path) -> None:
    path = str(tmp_path / "p-0")
    lg = PartitionLog.open(path, LogConfig(segment_bytes=300), 0, clean_shutdown=True)
    for seq in range(10):
        b = build_batch([(None, b"x" * 50, [], seq)], producer_id=3, producer_epoch=1, base_sequence=seq)
        lg.append(b, validate_batches(b), 0)
    assert len(lg.segments) > 2
    lg.flush()
    # crash (no close): state is rebuilt from the batch headers
    lg2 = PartitionLog.open(path, LogConfig(segment_bytes=300), 0, clean_shutdown=False)
    assert lg2.producer_state.producers == lg.producer_state.producers
    b = build_batch([(None, b"x" * 50, [], 9)], producer_id=3, producer_epoch=1, base_sequence=9)
    assert lg2.append(b, validate_batches(b), 0).duplicate
    b = build_batch([(None, b"x" * 50, [], 9)], producer_id=3, producer_epoch=0, base_sequence=10)
    with pytest.raises(ProducerStateError) as e:
        lg2.append(b, validate_batches(b), 0)
    assert e.value.error_code == INVALID_PRODUCER_EPOCH


# ---------------------------------------------------------------- snapshots per roll

SNAP_CFG = LogConfig(segment_bytes=400, index_interval_bytes=100)


def _idem(pid: int, seq: int, n: int = 1, epoch: int = 0, fill: bytes = b"y") -> bytes:
    return build_batch([(None, fill * 30, [], 1000 + seq + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def _fill(path: str, batches: int, cfg: LogConfig = SNAP_CFG, fill: bytes = b"y", **open_kw: object) -> PartitionLog:
    lg = PartitionLog.open(path, cfg, 0, clean_shutdown=True, **open_kw)  # type: ignore[arg-type]
    seqs = {1: 0, 2: 0, 3: 0}
    for i in range(batches):
        pid = 1 + i % 3
        n = 1 + i % 2
        b = _idem(pid, seqs[pid], n, fill=fill)
        lg.append(b, validate_batches(b), 0)
        seqs[pid] += n
    return lg


def _kill(lg: PartitionLog) -> None:
    """SIGKILL: the files stay as written (page cache), nothing of close() happens."""
    for s in lg.segments:
        s.close()


def _full_replay(lg: PartitionLog) -> ProducerStateManager:
    m = ProducerStateManager()
    for seg in lg.segments:
        for h in seg.iter_headers():
            m.update(h, h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp)
    return m


def _snapshot_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".snapshot"))


def _count_updates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    orig = ProducerStateManager.update

    def counting(self, h, first, last, ts):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return orig(self, h, first, last, ts)

    monkeypatch.setattr(ProducerStateManager, "update", counting)
    return calls


def test_unclean_start_replays_only_batches_after_newest_snapshot(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 200)
    assert len(lg.segments) > 20
    active = lg.segments[-1]
    assert _snapshot_files(path) == [f"{lg.segments[-2].base_offset:020d}.snapshot",
                                     f"{active.base_offset:020d}.snapshot"]  # bounded: the newest 2
    in_active = sum(1 for _ in active.iter_headers())
    total = sum(1 for s in lg.segments for _ in s.iter_headers())
    assert 0 < in_active < total // 10
    expected = {pid: e.copy() for pid, e in lg.producer_state.producers.items()}
    _kill(lg)
    calls = _count_updates(monkeypatch)
    lg2 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False)
    assert calls[0] == in_active  # only the active segment's batches were replayed
    assert lg2.producer_state_replayed == in_active
    assert lg2.producer_state.producers == expected
    # a snapshot at the recovered LEO was written: the next unclean start replays nothing
    assert lg2.snapshot_offsets[-1] == lg2.log_end_offset
    b = _idem(1, expected[1].batches[-1].first_seq, expected[1].batches[-1].last_seq
              - expected[1].batches[-1].first_seq + 1)
    assert lg2.append(b, validate_batches(b), 0).duplicate
    _kill(lg2)
    calls[0] = 0
    lg3 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False)
    assert calls[0] == 0 and lg3.producer_state.producers == expected
    lg3.close()


def test_clean_shutdown_writes_one_snapshot_at_the_leo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 50)
    leo = lg.log_end_offset
    expected = lg.producer_state.producers
    lg.close()
    assert _snapshot_files(path)[-1] == f"{leo:020d}.snapshot" and len(_snapshot_files(path)) == 2
    calls = _count_updates(monkeypatch)
    lg2 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=True)
    assert calls[0] == 0 and lg2.producer_state.producers == expected


def test_snapshot_above_truncated_torn_tail_is_discarded(tmp_path: Path) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 60)
    segs = lg.segments
    victim = segs[-2]  # its end is the newest snapshot's offset
    newest = lg.snapshot_offsets[-1]
    assert newest == segs[-1].base_offset == victim.next_offset
    size = victim.size
    _kill(lg)
    os.truncate(victim.log_path, size - 7)  # torn tail in the last rolled segment
    lg2 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False)
    assert lg2.log_end_offset < newest
    assert f"{newest:020d}.snapshot" not in _snapshot_files(path)
    assert all(o <= lg2.log_end_offset for o in lg2.snapshot_offsets)
    assert lg2.producer_state.producers == _full_replay(lg2).producers
    lg2.close()


def test_stale_or_damaged_snapshot_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 60)
    older, newest = lg.snapshot_offsets
    other = _fill(str(tmp_path / "q-0"), 60, fill=b"z")  # other batches below the same offsets
    assert newest in other.snapshot_offsets
    _kill(lg)
    _kill(other)
    name = f"{newest:020d}.snapshot"
    with open(os.path.join(str(tmp_path / "q-0"), name), "rb") as f:
        foreign = f.read()
    with open(os.path.join(path, name), "wb") as f:
        f.write(foreign)
    lg2 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False)
    assert "log below it has changed" in caplog.text
    assert lg2.producer_state.producers == _full_replay(lg2).producers
    assert lg2.producer_state_replayed == sum(
        1 for s in lg2.segments for h in s.iter_headers() if h.base_offset >= older)
    _kill(lg2)
    for off in lg2.snapshot_offsets:  # torn / zero-filled snapshot files: full rebuild
        with open(os.path.join(path, f"{off:020d}.snapshot"), "r+b") as f:
            f.write(b"\0" * 20)
    lg3 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False)
    assert lg3.producer_state.producers == _full_replay(lg3).producers
    assert lg3.producer_state_replayed == sum(1 for s in lg3.segments for _ in s.iter_headers())


def test_delete_records_and_retention_delete_old_snapshots(tmp_path: Path) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 60)
    older, newest = lg.snapshot_offsets
    lg.delete_records_before(older + 1)
    assert lg.snapshot_offsets == (newest,) and _snapshot_files(path) == [f"{newest:020d}.snapshot"]
    lg.close()
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=100, retention_bytes=800)
    lg = PartitionLog.open(path, cfg, 0, clean_shutdown=True)
    assert lg.snapshot_offsets[-1] == lg.log_end_offset
    for _ in range(12):
        b = _idem(7, lg.producer_state.producers[7].last_seq + 1 if 7 in lg.producer_state.producers else 0)
        lg.append(b, validate_batches(b), 0)
    assert lg.apply_retention(0) > 0
    assert all(o >= lg.log_start_offset for o in lg.snapshot_offsets)
    assert [f"{o:020d}.snapshot" for o in lg.snapshot_offsets] == _snapshot_files(path)
    assert len(lg.snapshot_offsets) <= 2


def test_truncate_to_deletes_snapshots_above_and_reloads(tmp_path: Path) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 60)
    older, _ = lg.snapshot_offsets
    lg.truncate_to(older + 1)
    assert lg.snapshot_offsets == (older,)
    assert lg.producer_state_replayed == sum(
        1 for s in lg.segments for h in s.iter_headers() if h.base_offset >= older)
    assert lg.producer_state.producers == _full_replay(lg).producers
    lg.truncate_to(lg.segments[0].base_offset)  # emptied: no snapshot survives
    assert lg.snapshot_offsets == () and _snapshot_files(path) == [] and lg.producer_state.producers == {}


def test_legacy_snapshot_file_is_read_after_clean_shutdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "p-0")
    lg = _fill(path, 30)
    leo = lg.log_end_offset
    expected = lg.producer_state.producers
    lg.close()
    for n in _snapshot_files(path):
        os.unlink(os.path.join(path, n))
    with open(os.path.join(path, "producer-state.snapshot"), "w") as f:  # as written by older versions
        json.dump({"offset": leo, "state": ProducerStateManager.from_json(
            {"version": 1, "producers": [
                {"id": e.producer_id, "epoch": e.epoch, "last_timestamp": e.last_timestamp, "txn_first_offset": None,
                 "batches": [list(b) for b in e.batches]} for e in expected.values()]}).to_json()}, f)
    calls = _count_updates(monkeypatch)
    lg2 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=True)
    assert calls[0] == 0 and lg2.producer_state.producers == expected
    assert not os.path.exists(os.path.join(path, "producer-state.snapshot"))
    assert lg2.snapshot_offsets == (leo,)  # rewritten in the new format
    # after an unclean shutdown an old-format file is not trusted: full rebuild
    lg2.close()
    for n in _snapshot_files(path):
        os.unlink(os.path.join(path, n))
    with open(os.path.join(path, "producer-state.snapshot"), "w") as f:
        json.dump({"offset": leo, "state": {"version": 1, "producers": []}}, f)
    lg3 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False)
    assert lg3.producer_state.producers == expected


def test_failed_snapshot_writes_are_harmless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    from hightide.log.storage import POSIX
    from hightide.log.storage_faulty import Fault, FaultyStorage

    disk = FaultyStorage(POSIX, Fault("write", "ENOSPC", path=".snapshot"), Fault("fsync", "EIO", path=".snapshot"))
    path = str(tmp_path / "p-0")
    lg = _fill(path, 40, storage=disk)
    assert len(lg.segments) > 3 and lg.offline_reason is None
    assert lg.snapshot_offsets == () and _snapshot_files(path) == []
    assert not [n for n in os.listdir(path) if n.endswith(".tmp")]
    assert "could not write the producer state snapshot" in caplog.text
    expected = lg.producer_state.producers
    _kill(lg)
    lg2 = PartitionLog.open(path, SNAP_CFG, 0, clean_shutdown=False, storage=disk)
    assert lg2.producer_state.producers == expected
    # writes work again, only fsyncs fail: the flush succeeds, the log stays online
    disk.set_rules(Fault("fsync", "EIO", path=".snapshot"))
    b = _idem(1, expected[1].last_seq + 1)
    lg2.append(b, validate_batches(b), 0)
    lg2.roll(0)
    assert lg2.snapshot_offsets[-1] == lg2.log_end_offset
    lg2.flush()
    assert lg2.offline_reason is None
    assert "could not fsync a producer state snapshot" in caplog.text
    lg2.close()
