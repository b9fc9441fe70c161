"""Replication on a PartitionLog (log/replica_log.py): leader epochs stamped and cached,
follower appends keeping the leader's bytes, truncation keeping the epoch cache, the
checkpoint file across restarts, and a property: a follower that truncates where the
leader says it diverged and replicates ends byte-for-byte equal to its leader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.log import LogConfig, OffsetOutOfRange, PartitionLog
from hightide.log.flush import run_flush
from hightide.log.leader_epochs import EpochEntry, truncation_point
from hightide.log.partition_log import UnexpectedAppendOffset
from hightide.log.transactions import marker_batch
from hightide.protocol.records import build_batch, iter_headers, validate_batches

SMALL = LogConfig(segment_bytes=3000, index_interval_bytes=300)


def batch(n: int = 2, *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return build_batch([(None, b"v" * 40, [], 1000 + i) for i in range(n)], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=txn)


def open_log(path: Path, name: str = "t-0", cfg: LogConfig = SMALL, clean: bool = True) -> PartitionLog:
    return PartitionLog.open(str(path / name), cfg, 0, clean_shutdown=clean)


def lead(lg: PartitionLog, b: bytes) -> int:
    return lg.append(b, validate_batches(b), 0).base_offset


def log_bytes(lg: PartitionLog) -> bytes:
    out = b""
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).data
        out += bytes(data)
        off = list(iter_headers(data))[-1].next_offset
    return out


def replicate(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> int:
    """One fetch round as the replica fetcher does it (DivergingEpoch, then records)."""
    last = follower.epochs.latest_epoch
    div = leader.diverging_epoch(-1 if last is None else last, follower.log_end_offset)
    if div is not None:
        offset, _ = truncation_point(div[0], div[1], follower.epochs, follower.log_end_offset,
                                     follower.high_watermark)
        follower.truncate_to(offset)
        return -1
    data = leader.read(follower.log_end_offset, max_bytes).data
    if not data:
        return 0
    follower.append_as_follower(data, validate_batches(data, client_origin=False), 0)
    follower.high_watermark = leader.high_watermark
    return len(data)


def test_leader_appends_carry_the_leader_epoch(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    assert lg.leader_epoch == -1 and lg.epochs.entries() == []
    lead(lg, batch())
    assert lg.leader_epoch == 0
    assert lg.epochs.entries() == [EpochEntry(0, 0)]
    lg.become_leader(3)
    assert lg.epochs.entries() == [EpochEntry(0, 0), EpochEntry(3, 2)]
    lead(lg, batch(3))
    lg.append_marker(7, 0, True, 0, 0)
    assert [h.partition_leader_epoch for h in iter_headers(log_bytes(lg))] == [0, 3, 3]
    assert lg.end_offset_for_epoch(0) == (0, 2) and lg.end_offset_for_epoch(3) == (3, 6)
    assert lg.end_offset_for_epoch(2) == (0, 2) and lg.end_offset_for_epoch(4) == (-1, -1)
    with pytest.raises(ValueError):
        lg.become_leader(2)
    b = batch()
    assert lg.append(b, validate_batches(b), 0, leader_epoch=5).base_offset == 6
    assert lg.epochs.latest_epoch == 5 and lg.leader_epoch == 3  # an explicit epoch is the caller's


def test_checkpoint_written_by_flush_in_kafkas_format(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lead(lg, batch())
    lg.become_leader(2)
    lead(lg, batch())
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    assert not path.exists()
    lg.flush(0)
    assert path.read_text() == "0\n2\n0 0\n2 2\n"
    lg.close()
    again = open_log(tmp_path)
    assert again.epochs.entries() == [EpochEntry(0, 0), EpochEntry(2, 2)] and again.leader_epoch == 2


def test_follower_append_keeps_offsets_epochs_and_bytes(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l-0"), open_log(tmp_path, "f-0")
    leader.become_leader(4)
    for i in range(30):
        lead(leader, batch(1 + i % 3, pid=9, seq=sum(1 + j % 3 for j in range(i))))
    leader.become_leader(6)
    lead(leader, batch(2))
    leader.high_watermark = 20
    while replicate(leader, follower, 700):
        pass
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.epochs.entries() == leader.epochs.entries() == [EpochEntry(4, 0), EpochEntry(6, 60)]
    assert follower.high_watermark == leader.high_watermark == 20  # the leader's, not the LEO
    assert follower.leader_epoch == 6  # the leader's latest, from its batches
    assert len(follower.segments) > 1
    assert follower.producer_state.producers[9].last_seq == leader.producer_state.producers[9].last_seq


def test_follower_append_applies_transaction_markers(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l-0"), open_log(tmp_path, "f-0")
    lead(leader, batch(2, pid=5, seq=0, txn=True))
    lead(leader, batch(1))
    leader.append_marker(5, 0, False, 0, 0)
    replicate(leader, follower)
    assert leader.aborted_transactions(0, 10) == follower.aborted_transactions(0, 10) == [(5, 0)]
    assert follower.last_stable_offset == follower.high_watermark


def test_follower_append_refuses_overlaps_and_gaps(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l-0"), open_log(tmp_path, "f-0")
    for _ in range(3):
        lead(leader, batch(2))
    data = leader.read(0, 1 << 20).data
    hs = validate_batches(data, client_origin=False)
    follower.append_as_follower(data[: hs[0].size], hs[:1], 0)
    with pytest.raises(UnexpectedAppendOffset, match="overlaps"):
        follower.append_as_follower(data, validate_batches(data, client_origin=False), 0)
    third = data[hs[0].size + hs[1].size:]
    with pytest.raises(UnexpectedAppendOffset, match="gap"):
        follower.append_as_follower(third, validate_batches(third, client_origin=False), 0)
    assert follower.log_end_offset == 2  # nothing written
    compacted = open_log(tmp_path, "c-0", LogConfig(segment_bytes=3000, compact=True))
    compacted.append_as_follower(third, validate_batches(third, client_origin=False), 0)  # the cleaner removed 0..3
    assert (compacted.log_end_offset, compacted.epochs.entries()) == (6, [EpochEntry(0, 4)])


def test_truncation_keeps_the_cache_and_lowers_the_recovery_point_durably(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for e in (1, 2, 3):
        lg.become_leader(e)
        lead(lg, batch(5))
    lg.flush(0)
    rp = tmp_path / "t-0" / "recovery-point"
    assert rp.read_text().strip() == "15"
    lg.truncate_to(7)  # the batch 5..9 goes whole: epoch 2 has nothing left
    assert lg.epochs.entries() == [EpochEntry(1, 0)] and lg.log_end_offset == 5
    assert lg.needs_flush(0)
    job = lg.begin_due_flush(0)  # not due by policy: only the small files
    assert {os.path.basename(p) for p, _ in job.small_files} >= {"recovery-point", "leader-epoch-checkpoint"}
    run_flush(job)
    lg.end_flush(job, ok=True)
    assert rp.read_text().strip() == "5" and not lg.needs_flush(0)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"


def test_unclean_restart_rebuilds_epochs_past_the_recovery_point(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.become_leader(1)
    lead(lg, batch(3))
    lg.flush(0)
    lg.become_leader(2)
    lead(lg, batch(3))
    lg.abandon()  # killed: the checkpoint only knows epoch 1
    again = open_log(tmp_path, clean=False)
    assert again.epochs.entries() == [EpochEntry(1, 0), EpochEntry(2, 3)]
    again.close()
    os.unlink(tmp_path / "t-0" / "leader-epoch-checkpoint")
    third = open_log(tmp_path)  # missing file: rebuilt from every batch
    assert third.epochs.entries() == [EpochEntry(1, 0), EpochEntry(2, 3)]
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink(missing_ok=True)
    third.flush(0)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n2 3\n"


def test_stale_checkpoint_entries_past_the_log_end_dropped(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.become_leader(1)
    lead(lg, batch(3))
    lg.close()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n5 3\n")
    assert open_log(tmp_path).epochs.entries() == [EpochEntry(1, 0)]


def test_log_start_moves_the_first_entry(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l-0"), open_log(tmp_path, "f-0")
    leader.become_leader(1)
    lead(leader, batch(4))
    leader.become_leader(2)
    lead(leader, batch(4))
    replicate(leader, follower)
    assert leader.delete_records_before(6) == 6
    assert leader.epochs.entries() == [EpochEntry(2, 6)]
    assert follower.maybe_increment_log_start(leader.log_start_offset)
    assert follower.log_start_offset == 6 and follower.epochs.entries() == [EpochEntry(2, 6)]
    follower.truncate_fully_and_start_at(20)
    assert (follower.log_start_offset, follower.log_end_offset, follower.epochs.entries()) == (20, 20, [])


def test_diverging_epoch_on_the_leader(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.become_leader(1)
    lead(lg, batch(5))
    lg.become_leader(3)
    lead(lg, batch(5))
    assert lg.diverging_epoch(-1, 99) is None  # no LastFetchedEpoch: nothing to check
    assert lg.diverging_epoch(1, 5) is None and lg.diverging_epoch(3, 10) is None
    assert lg.diverging_epoch(1, 7) == (1, 5)  # epoch 1 ended at 5 here
    assert lg.diverging_epoch(2, 7) == (1, 5)  # epoch 2 never existed here
    with pytest.raises(OffsetOutOfRange):
        lg.diverging_epoch(4, 10)
    lg.delete_records_before(7)
    with pytest.raises(OffsetOutOfRange):
        lg.diverging_epoch(3, 6)


def test_truncation_point_rules() -> None:
    from hightide.log.leader_epochs import LeaderEpochCache
    local = LeaderEpochCache([(1, 0), (2, 5), (4, 9)])
    assert truncation_point(2, 7, local, 12, 3) == (7, True)  # ours ends at 9, the leader's at 7
    assert truncation_point(3, 11, local, 12, 3) == (9, False)  # we never had 3: end of our 2, ask again
    assert truncation_point(4, 20, local, 12, 3) == (12, True)
    assert truncation_point(-1, 6, local, 12, 3) == (6, True)
    assert truncation_point(2, -1, local, 12, 3) == (3, True)  # unknown: our high watermark
    assert truncation_point(0, 4, local, 12, 3) == (0, True)  # older than all of ours: our first start


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("replicate"), st.integers(200, 2000)),
    st.tuples(st.just("failover"), st.booleans()),
), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_follower_converges_to_its_leader(tmp_path_factory: pytest.TempPathFactory,
                                          steps: list[tuple[str, object]]) -> None:
    """Leaders change (the new leader may lack the old one's unreplicated tail, which then
    diverges), followers truncate as told and replicate: each ends equal to its leader."""
    base = tmp_path_factory.mktemp("conv")
    a, b = open_log(base, "a-0"), open_log(base, "b-0")
    leader, follower, epoch = a, b, 0
    leader.become_leader(epoch)
    for op, arg in steps:
        if op == "append":
            for _ in range(int(arg)):  # type: ignore[call-overload]
                lead(leader, batch(2))
        elif op == "replicate":
            replicate(leader, follower, int(arg))  # type: ignore[call-overload]
        elif arg:  # failover: the follower becomes leader in a new epoch
            epoch += 1
            leader, follower = follower, leader
            leader.become_leader(epoch)
    for _ in range(200):
        if replicate(leader, follower) == 0:
            break
    assert follower.log_end_offset == leader.log_end_offset
    assert log_bytes(follower) == log_bytes(leader)
    with_data = [e for e in leader.epochs.entries() if e.start_offset < leader.log_end_offset]
    assert [e for e in follower.epochs.entries() if e.start_offset < follower.log_end_offset] == with_data
    a.close()
    b.close()
