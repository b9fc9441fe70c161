"""Transactions on the partition log: markers, LSO, the aborted transactions index,
recovery of all of it, against Kafka's rules (issue 16)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from hightide.log import LogConfig, PartitionLog
from hightide.log.producer_state import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    TRANSACTION_COORDINATOR_FENCED,
    ProducerStateError,
)
from hightide.log.transactions import parse_marker
from hightide.log.txn_index import ENTRY_SIZE, AbortedTxn, txn_index_path
from hightide.protocol.records import build_batch, decode_records, iter_headers, validate_batches

CFG = LogConfig()


class Txns:
    """A log plus per-producer sequence numbers, to write transactions tersely."""

    def __init__(self, path: Path, cfg: LogConfig = CFG, clean: bool = True) -> None:
        self.path = path
        self.cfg = cfg
        self.lg = PartitionLog.open(str(path), cfg, 0, clean_shutdown=clean)
        self.seq: dict[tuple[int, int], int] = {}

    def data(self, pid: int, n: int = 2, *, epoch: int = 0, txn: bool = True) -> int:
        seq = self.seq.get((pid, epoch), 0)
        b = build_batch([(b"k", b"v%d" % i, [], 10) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=txn)
        self.seq[(pid, epoch)] = seq + n
        return self.lg.append(b, validate_batches(b), 10).base_offset

    def plain(self, n: int = 1) -> int:
        b = build_batch([(b"k", b"p", [], 10)] * n)
        return self.lg.append(b, validate_batches(b), 10).base_offset

    def end(self, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        return self.lg.append_marker(pid, epoch, commit, coordinator_epoch, 20)

    def reopen(self, *, clean: bool) -> PartitionLog:
        if clean:
            self.lg.close()
        else:
            self.lg.abandon()
        self.lg = PartitionLog.open(str(self.path), self.cfg, 0, clean_shutdown=clean)
        return self.lg


# ------------------------------------------------------------------ markers


def test_marker_is_a_kafka_control_batch(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(7)
    off = t.end(7, False, coordinator_epoch=3)
    assert off == 2 and t.lg.log_end_offset == 3
    raw = t.lg.read(off, 1000).data
    (h,) = list(iter_headers(raw))
    assert h.attributes & 0x30 == 0x30  # transactional + control
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (7, 0, -1, 1)
    (rec,) = decode_records(raw)
    assert rec.key == struct.pack(">hh", 0, 0)  # version 0, ABORT
    assert rec.value == struct.pack(">hi", 0, 3)  # version 0, coordinator epoch
    assert parse_marker(raw) == (False, 3)
    t.lg.close()


def test_marker_with_an_older_producer_epoch_is_refused(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(7, epoch=2)
    with pytest.raises(ProducerStateError) as e:
        t.end(7, True, epoch=1)
    assert e.value.error_code == INVALID_PRODUCER_EPOCH
    assert t.lg.log_end_offset == 2 and t.lg.last_stable_offset == 0  # nothing written
    t.end(7, True, epoch=3)  # a newer epoch (the coordinator bumped it) is accepted
    assert t.lg.last_stable_offset == 3
    t.lg.close()


def test_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(7)
    t.end(7, True, coordinator_epoch=5)
    t.data(7)
    with pytest.raises(ProducerStateError) as e:
        t.end(7, True, coordinator_epoch=4)
    assert e.value.error_code == TRANSACTION_COORDINATOR_FENCED
    t.end(7, False, coordinator_epoch=5)
    t.lg.close()


def test_marker_without_data_is_written_and_an_abort_indexes_it(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    off = t.end(9, False)
    assert t.lg.txn_index.entries == [AbortedTxn(9, off, off, off + 1)]
    assert t.lg.last_stable_offset == t.lg.log_end_offset == 1
    t.lg.close()


def test_plain_write_inside_an_open_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(7)
    with pytest.raises(ProducerStateError) as e:
        t.data(7, txn=False)
    assert e.value.error_code == INVALID_TXN_STATE
    t.lg.close()


# ------------------------------------------------------------------ LSO


def test_lso_is_the_first_offset_of_the_earliest_open_transaction(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    assert t.lg.last_stable_offset == 0
    t.plain(2)
    a = t.data(1)  # 2..3
    t.plain()
    b = t.data(2)  # 5..6
    assert t.lg.last_stable_offset == a
    t.data(1)  # more of the same transaction does not move it
    assert t.lg.last_stable_offset == a
    t.end(1, True)
    assert t.lg.last_stable_offset == b
    t.end(2, False)
    assert t.lg.last_stable_offset == t.lg.log_end_offset == t.lg.high_watermark
    assert t.lg.producer_state.ongoing_transactions() == []
    t.lg.close()


def test_read_committed_stops_at_the_lso(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.plain(3)
    t.data(1)
    t.plain(2)  # after the open transaction: not readable by read_committed yet
    res, aborted = t.lg.read_committed(0, 1 << 20)
    assert [r.offset for r in decode_records(res.data)] == [0, 1, 2] and aborted == []
    assert t.lg.read_committed(3, 1 << 20)[0].data == b""
    t.end(1, True)
    res, _ = t.lg.read_committed(3, 1 << 20)
    assert res.first_offset == 3
    t.lg.close()


# ------------------------------------------------------------------ aborted transactions index


def test_aborted_transactions_in_kafka_txnindex_format(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(1)  # 0..1
    t.data(2)  # 2..3
    m1 = t.end(1, False)  # 4: aborted, txn 2 still open -> LSO 2
    m2 = t.end(2, False)  # 5
    t.data(3)  # 6..7
    t.end(3, True)
    entries = [AbortedTxn(1, 0, m1, 2), AbortedTxn(2, 2, m2, m2 + 1)]
    assert t.lg.txn_index.entries == entries
    with open(txn_index_path(str(t.path), 0), "rb") as f:
        raw = f.read()
    assert len(raw) == 2 * ENTRY_SIZE == 68
    assert raw[:ENTRY_SIZE] == struct.pack(">hqqqq", 0, 1, 0, m1, 2)
    res, aborted = t.lg.read_committed(0, 1 << 20)
    assert aborted == [(1, 0), (2, 2)]
    assert t.lg.read_committed(6, 1 << 20)[1] == []  # both markers are below the fetch offset
    assert t.lg.aborted_transactions(5, 6) == [(2, 2)]
    t.lg.close()


def test_collect_stops_once_an_lso_passes_the_upper_bound(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    for pid in range(1, 6):
        t.data(pid)
        t.end(pid, False)
    # txn k occupies [3(k-1), 3(k-1)+1], marker at 3(k-1)+2
    assert t.lg.aborted_transactions(0, 4) == [(1, 0), (2, 3)]
    assert t.lg.aborted_transactions(4, 7) == [(2, 3), (3, 6)]
    t.lg.close()


def test_fetch_of_one_segment_only_lists_its_range(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=1)
    t = Txns(tmp_path / "p-0", cfg)
    for pid in range(1, 8):
        t.data(pid)
        t.end(pid, False)
    assert len(t.lg.segments) > 2
    res, aborted = t.lg.read_committed(0, 1)  # one batch: txn 1's data
    assert res.first_offset == 0
    assert aborted[0] == (1, 0) and len(aborted) < 7
    t.lg.close()


def test_txn_index_is_deleted_with_its_segment(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=400)
    t = Txns(tmp_path / "p-0", cfg)
    for pid in range(1, 8):
        t.data(pid)
        t.end(pid, False)
    first = t.lg.segments[0].base_offset
    second = t.lg.segments[1].base_offset
    assert os.path.exists(txn_index_path(str(t.path), first))
    t.lg.delete_records_before(second)
    assert not os.path.exists(txn_index_path(str(t.path), first))
    assert all(e.last_offset >= second for e in t.lg.txn_index.entries)
    t.lg.close()


def test_truncation_drops_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(1)
    m = t.end(1, False)
    assert t.lg.last_stable_offset == m + 1
    t.lg.truncate_to(m)
    assert t.lg.txn_index.entries == []
    assert not os.path.exists(txn_index_path(str(t.path), 0))
    assert t.lg.last_stable_offset == 0  # the transaction is open again
    t.lg.close()


# ------------------------------------------------------------------ recovery


def _state(lg: PartitionLog) -> tuple:
    return (lg.last_stable_offset, lg.txn_index.entries, lg.producer_state.ongoing_transactions(),
            {p: (e.epoch, e.current_txn_first_offset, e.coordinator_epoch) for p, e in lg.producer_state.producers.items()})


@pytest.mark.parametrize("clean", [True, False])
def test_open_transactions_and_index_survive_a_restart(tmp_path: Path, clean: bool) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(1)
    t.data(2)
    t.end(2, False, coordinator_epoch=4)
    t.data(3)
    before = _state(t.lg)
    assert before[0] == 0
    lg = t.reopen(clean=clean)
    assert _state(lg) == before
    t.end(1, True)
    assert lg.last_stable_offset == before[2][1][0]  # txn 3 is now the earliest open one
    lg.close()


def test_kill_between_marker_and_index_write_rebuilds_the_entry(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(1)
    m = t.end(1, False)
    t.data(2)
    before = _state(t.lg)
    t.lg.abandon()
    os.unlink(txn_index_path(str(t.path), 0))  # the index write never happened
    lg = PartitionLog.open(str(t.path), CFG, 0, clean_shutdown=False)
    assert _state(lg) == before
    assert lg.txn_index.entries == [AbortedTxn(1, 0, m, m + 1)]
    assert os.path.getsize(txn_index_path(str(t.path), 0)) == ENTRY_SIZE  # file rewritten
    lg.close()


def test_torn_index_entry_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    t = Txns(tmp_path / "p-0")
    t.data(1)
    t.end(1, False)
    t.data(2)
    t.end(2, False)
    before = _state(t.lg)
    t.lg.abandon()
    path = txn_index_path(str(t.path), 0)
    with open(path, "r+b") as f:
        f.truncate(ENTRY_SIZE + 10)
    lg = PartitionLog.open(str(t.path), CFG, 0, clean_shutdown=False)
    assert _state(lg) == before
    assert os.path.getsize(path) == 2 * ENTRY_SIZE
    lg.close()


def test_snapshot_carries_the_open_transaction(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300)
    t = Txns(tmp_path / "p-0", cfg)
    first = t.data(1)
    for _ in range(6):  # rolls: snapshots are written at the new segments' bases
        t.plain(3)
    assert len(t.lg.segments) > 2
    lg = t.reopen(clean=False)
    assert lg.producer_state_replayed < 8  # started from a snapshot holding txn 1, not from scratch
    assert lg.last_stable_offset == first
    lg.close()


def test_orphan_index_of_a_merged_segment_is_merged(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300)
    t = Txns(tmp_path / "p-0", cfg)
    for pid in range(1, 6):
        t.data(pid)
        t.end(pid, False)
    entries = list(t.lg.txn_index.entries)
    bases = [s.base_offset for s in t.lg.segments]
    t.lg.close()
    # what an interrupted cleaning of the first two segments leaves: one .log for both,
    # the second one's .txnindex still there
    d = str(t.path)
    with open(os.path.join(d, f"{bases[0]:020d}.log"), "ab") as out, \
            open(os.path.join(d, f"{bases[1]:020d}.log"), "rb") as src:
        out.write(src.read())
    for ext in ("log", "index", "timeindex"):
        os.unlink(os.path.join(d, f"{bases[1]:020d}.{ext}"))
    os.unlink(os.path.join(d, f"{bases[0]:020d}.index"))
    lg = PartitionLog.open(d, cfg, 0, clean_shutdown=True)
    assert lg.txn_index.entries == entries
    assert not os.path.exists(txn_index_path(d, bases[1]))
    assert os.path.getsize(txn_index_path(d, bases[0])) > ENTRY_SIZE
    lg.close()


# ------------------------------------------------------------------ log cleaner


def test_cleaning_keeps_transactions_and_merges_their_index(tmp_path: Path) -> None:
    from hightide.log import clean

    cfg = LogConfig(segment_bytes=1000, index_interval_bytes=100, compact=True)
    t = Txns(tmp_path / "p-0", cfg)
    for _ in range(4):
        for pid in (1, 2):
            t.data(pid)
        t.end(1, False)
        t.end(2, True)
        t.plain(3)  # plain overwrites of key b"k", which the cleaner compacts away
        t.lg.roll(30)  # small segments, so the cleaner merges them
    t.data(3)  # an open transaction: the cleaner stops below the LSO
    t.plain(1)
    t.lg.roll(30)
    before_entries = list(t.lg.txn_index.entries)
    n_segments = len(t.lg.segments)
    result = clean(t.lg, 40, force=True)
    assert result.cleaned and len(t.lg.segments) < n_segments  # segments were merged
    assert result.cleaned_up_to <= t.lg.last_stable_offset
    assert t.lg.txn_index.entries == before_entries
    res, aborted = t.lg.read_committed(0, 1 << 20)  # now one merged segment's worth
    end = max(h.next_offset for h in iter_headers(res.data))
    assert aborted == [(e.producer_id, e.first_offset) for e in before_entries if e.first_offset < end]
    # every index file holds exactly the entries whose marker is in its segment
    bases = [s.base_offset for s in t.lg.segments]
    on_disk = []
    for name in sorted(os.listdir(t.path)):
        if name.endswith(".txnindex"):
            assert int(name.split(".")[0]) in bases, name
            with open(os.path.join(t.path, name), "rb") as f:
                on_disk += [AbortedTxn(*e[1:]) for e in struct.iter_unpack(">hqqqq", f.read())]
    assert on_disk == before_entries
    # every control batch and transactional batch survived
    kinds = []
    off = 0
    while off < t.lg.log_end_offset:
        data = t.lg.read(off, 1 << 20).data
        for h in iter_headers(data):
            if h.is_transactional:
                kinds.append((h.base_offset, h.is_control))
            off = h.next_offset
    assert sum(1 for _, c in kinds if c) == 8 and sum(1 for _, c in kinds if not c) == 9
    lg = t.reopen(clean=False)
    assert lg.txn_index.entries == before_entries
    lg.close()


def test_power_cut_losing_an_index_entry_above_the_recovery_point_rebuilds_it(tmp_path: Path) -> None:
    # The kernel wrote back the marker and the snapshot of a later roll, not the marker's
    # .txnindex entry: the snapshot above the recovery point is passed over because a
    # control batch lies between them, and the replay from below rebuilds the entry.
    t = Txns(tmp_path / "p-0")
    t.data(1)
    t.lg.flush(0)  # recovery point 2
    m = t.end(1, False)
    t.plain()
    t.lg.roll(0)  # snapshot at 4, above the recovery point
    assert t.lg.recovery_point == m and t.lg.snapshot_offsets[-1] == 4
    before = _state(t.lg)
    t.lg.abandon()
    os.unlink(txn_index_path(str(t.path), 0))
    lg = PartitionLog.open(str(t.path), CFG, 0, clean_shutdown=False)
    assert _state(lg) == before
    assert lg.producer_state_replayed == 3  # from the start, not from the snapshot at 4
    lg.close()


def test_index_left_by_a_crash_in_a_segment_deletion_is_dropped(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=400)
    t = Txns(tmp_path / "p-0", cfg)
    for pid in range(1, 8):
        t.data(pid)
        t.end(pid, False)
    first = t.lg.segments[0].base_offset
    keep = [e for e in t.lg.txn_index.entries if e.last_offset >= t.lg.segments[1].base_offset]
    t.lg.abandon()
    # killed inside LogSegment.delete: the .log and indexes are gone, the .txnindex not yet
    for ext in ("index", "timeindex", "log"):
        os.unlink(os.path.join(t.path, f"{first:020d}.{ext}"))
    lg = PartitionLog.open(str(t.path), cfg, 0, clean_shutdown=False)
    assert lg.txn_index.entries == keep
    assert not os.path.exists(txn_index_path(str(t.path), first))
    lg.close()
