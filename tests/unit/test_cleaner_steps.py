"""The cleaner's steps (plan on the owner, build on a worker, commit/install on the
owner) with the log changing between them: appends and rolls are fine; retention,
DeleteRecords, truncation or deletion of the partition make the commit abandon the
cleaning; never two cleanings of one log; segment deletion waits for a committed swap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hightide.log import LogConfig, PartitionLog
from hightide.log import cleaner as C
from hightide.protocol.records import build_batch, decode_records, iter_headers, validate_batches

CFG = LogConfig(segment_bytes=400, index_interval_bytes=100)


def _log(tmp_path: Path, n: int = 60) -> PartitionLog:
    lg = PartitionLog.open(str(tmp_path / "t-0"), CFG, 0, clean_shutdown=False)
    for i in range(n):
        _append(lg, i)
    return lg


def _append(lg: PartitionLog, i: int) -> None:
    b = build_batch([(b"k%d" % (i % 4), b"v%d" % i, [], 1000 + i)])
    lg.append(b, validate_batches(b), 0)


def _latest(lg: PartitionLog) -> dict[bytes, bytes]:
    out = {}
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).data
        for h in iter_headers(data):
            for r in decode_records(data[h.position : h.position + h.size]):
                out[r.key] = r.value
            off = h.next_offset
    return out


def _plan(lg: PartitionLog) -> C.CleanPlan:
    plan = C.plan_clean(lg, 10**6, force=True)
    assert isinstance(plan, C.CleanPlan) and lg.cleaning
    return plan


def _leftovers(lg: PartitionLog) -> list[str]:
    return [n for n in os.listdir(lg.path) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_steps_in_sequence_with_appends_and_rolls_meanwhile(tmp_path: Path) -> None:
    lg = _log(tmp_path)
    plan = _plan(lg)
    assert C.plan_clean(lg, 10**6, force=True).cleaned is False  # never two at once
    C.build_clean(plan)
    for i in range(60, 80):  # appends and rolls while the worker ran
        _append(lg, i)
    assert C.commit_clean(plan) and lg.swap_pending
    lg.config = CFG.replace(retention_bytes=100)
    assert lg.apply_retention(0) == 0  # segment deletion waits for the committed swap
    lg.config = CFG
    C.sync_swaps(plan)
    before = len(lg.segments)
    result = C.install_clean(plan)
    C.finish_clean(plan)
    C.end_clean(plan)
    assert result.cleaned and result.bytes_after < result.bytes_before
    assert len(lg.segments) < before and not lg.cleaning and not lg.swap_pending
    assert _latest(lg) == {b"k%d" % k: b"v%d" % max(i for i in range(80) if i % 4 == k) for k in range(4)}
    assert _leftovers(lg) == []
    reopened = PartitionLog.open(lg.path, CFG, 0, clean_shutdown=False)
    assert _latest(reopened) == _latest(lg)
    reopened.close()


@pytest.mark.parametrize("change", ["retention", "delete_records", "truncate", "delete_partition"])
def test_commit_abandons_when_segments_changed(tmp_path: Path, change: str) -> None:
    lg = _log(tmp_path)
    expected = _latest(lg)
    plan = _plan(lg)
    C.build_clean(plan)
    if change == "retention":
        lg.config = CFG.replace(retention_bytes=1500)
        assert lg.apply_retention(0) > 0
        expected = _latest(lg)
    elif change == "delete_records":
        lg.delete_records_before(lg.segments[2].base_offset)
        expected = _latest(lg)
    elif change == "truncate":
        lg.truncate_to(lg.segments[1].base_offset + 1)
        expected = _latest(lg)
    else:
        lg.delete()
    assert not C.commit_clean(plan)
    C.discard_clean(plan)
    C.end_clean(plan)
    assert not lg.cleaning and not lg.swap_pending
    if change != "delete_partition":
        assert _leftovers(lg) == []
        assert _latest(lg) == expected
        assert C.clean(lg, 10**6, force=True).cleaned  # the next cleaning works
        assert _latest(lg) == expected
    else:
        assert not os.path.exists(lg.path)


def test_delete_records_waits_for_a_committed_swap(tmp_path: Path) -> None:
    lg = _log(tmp_path)
    plan = _plan(lg)
    C.build_clean(plan)
    assert C.commit_clean(plan)
    target = lg.segments[3].base_offset
    nsegs = len(lg.segments)
    assert lg.delete_records_before(target) == target  # the start moves at once...
    assert len(lg.segments) == nsegs  # ...the segment files stay until the swap is installed
    C.sync_swaps(plan)
    C.install_clean(plan)
    C.finish_clean(plan)
    C.end_clean(plan)
    assert lg.segments[0].base_offset <= target < lg.segments[1].base_offset
    assert _leftovers(lg) == []


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = _log(tmp_path)
    expected = _latest(lg)
    plan = _plan(lg)
    calls = 0
    real = C._GroupWriter.finish

    def failing_finish(self, end):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        real(self, end)
        if calls == 1:  # after the first group was written completely
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(C._GroupWriter, "finish", failing_finish)
    with pytest.raises(OSError):
        C.build_clean(plan)
    C.discard_clean(plan)
    C.end_clean(plan)
    assert [n for n in os.listdir(lg.path) if ".cleaned" in n] == []
    assert _latest(lg) == expected and not lg.cleaning
