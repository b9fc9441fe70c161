"""LagMonitor._scan: the one pass over a snapshot's lag rows (settled end offsets, the
bounds, the marker probes and the record Fetch offsets) answers exactly what the
separate passes it replaced answered, written out here as the reference: every row
settled by EndOffsetMemory.settle, then each collection read from the settled rows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.client import KafkaError, TopicPartition
from hightide.client.errors import ErrorCode
from hightide.lag.endoffsets import EndOffsetMemory
from hightide.monitoring.monitor import LAST_KNOWN, LagMonitor

TPS = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]
_off = st.one_of(st.none(), st.integers(0, 60))


def _reference(mem: EndOffsetMemory, lags: dict, now: int, limit: int, records: bool) -> tuple:
    """The separate passes, one row at a time (the code before the single pass)."""
    rc = mem.read_committed
    out, stale = {}, set()
    for g, rows in lags.items():
        if isinstance(rows, KafkaError):
            out[g] = rows
            continue
        settled = []
        for row in rows:
            e = mem.settle(row[0], row[2], row[3], row[5], now)
            if e is not None:
                tp, c = row[0], row[1]
                end = e.last_stable_offset if rc else e.high_watermark
                row = (tp, c, e.high_watermark, e.log_start_offset, None if c is None or end is None else end - c,
                       e.last_stable_offset, row[6], LAST_KNOWN, row[8])
                stale.add(tp)
            settled.append(row)
        out[g] = settled
    bounds, probes, pending = {}, {}, {}
    for rows in out.values():
        if isinstance(rows, KafkaError):
            continue
        for tp, c, hw, start, lag, lst, *_ in rows:
            bounds.setdefault(tp, (hw, start))
            end = lst if rc else hw
            if limit > 0 and c is not None and end is not None and 0 < end - c <= limit:
                probes.setdefault(tp, ([], end))[0].append(c)
            if records and lag is not None and lag > 0 and c is not None:
                pending.setdefault(tp, set()).add(max(c, start or 0))
            if records and c is None and end is not None and start is not None and end > start:
                pending.setdefault(tp, set()).add(start)  # no commit: estimated from the log start
    return out, stale, bounds, probes, pending


def _row(tp: TopicPartition, c: int | None, hw: int | None, start: int | None, lst: int | None, rc: bool) -> tuple:
    end = lst if rc else hw
    return (tp, c, hw, start, None if c is None or end is None else end - c, lst, "", "extension", ErrorCode.none)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(TPS), _off, _off, _off, _off), max_size=6), min_size=1,
                max_size=5),
       st.lists(st.lists(st.tuples(st.sampled_from(TPS), _off, _off, _off), max_size=4), min_size=1, max_size=4),
       st.booleans(), st.sampled_from([0, 3, 1000]), st.booleans(), st.integers(0, 20_000))
def test_scan_equals_the_separate_passes(groups, earlier, rc, limit, records, grace) -> None:
    """Rounds of readings (some partitions read lower, unknown or differently by several
    groups in one round, as coordinators answering at different moments would) settle
    to the same rows, stale set and memory state; the collections are the same."""
    iso = "read_committed" if rc else "read_uncommitted"
    methods = ("record_timestamp", "interpolation") if records else ("interpolation",)
    mon = LagMonitor(None, isolation_level=iso, marker_probe_max_lag=limit, methods=methods,  # type: ignore[arg-type]
                     stale_end_grace_ms=grace)
    ref = EndOffsetMemory(grace, read_committed=rc)
    now = 0
    for readings in earlier:  # earlier rounds: something remembered, some partitions stale
        now += 7_000
        for tp, hw, start, lst in readings:
            for mem in (mon.ends, ref):
                mem.settle(tp, hw, start, lst, now)
        mon.ends.end_round()
        ref.end_round()
    now += 7_000
    lags: dict = {f"g{i}": [_row(tp, c, hw, start, lst, rc) for tp, c, hw, start, lst in rows]
                  for i, rows in enumerate(groups)}
    lags["failed"] = KafkaError(ErrorCode.coordinator_not_available, "x")
    scan = mon._scan(lags, now)
    out, stale, bounds, probes, pending = _reference(ref, lags, now, limit, records)
    assert scan.lags == out
    assert (scan.stale, scan.bounds, scan.probes, scan.pending) == (stale, bounds, probes, pending)
    mon.ends.end_round()
    ref.end_round()
    for tp in TPS:  # the memory ends the round in the same state
        a, b = mon.ends._base.get(tp), ref._base.get(tp)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a.hw, a.start, a.lso, a.bad_since) == (b.hw, b.start, b.lso, b.bad_since)


def test_scan_leaves_rows_without_a_settled_end_untouched() -> None:
    """No failover: the rows are the very objects read (no copy), nothing is stale."""
    mon = LagMonitor(None)  # type: ignore[arg-type]
    lags: dict = {"g": [_row(TPS[0], 5, 10, 0, 10, False), _row(TPS[1], None, 10, 0, 10, False)]}
    scan = mon._scan(lags, 1000)
    assert scan.lags is lags and scan.stale == set()
    assert scan.bounds == {TPS[0]: (10, 0), TPS[1]: (10, 0)}
    assert scan.probes == {TPS[0]: ([5], 10)}
    assert scan.pending == {TPS[0]: {5}, TPS[1]: {0}}  # no commit: the log start record (an estimate)


def test_the_status_pass_looks_up_only_committed_offsets_facing_skipped_records() -> None:
    """A next visible offset equal to the committed one (a record is there) can never
    make a partition caught up, so the status pass gets only the others."""
    from hightide.monitoring.monitor import _ReportContext
    tp = TPS[0]
    ctx = _ReportContext((), False, {}, {}, {}, 0, {(tp, 5): 5, (tp, 6): 8, (TPS[1], 2): 2})
    assert ctx.skipped == {(tp, 6): 8}
    assert ctx.visible == {(tp, 5): 5, (tp, 6): 8, (TPS[1], 2): 2}
