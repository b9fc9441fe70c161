"""End offsets across a leader failover (issue 15, item 3): an unknown or smaller high
watermark (a new leader whose HW is not known yet, a dead leader, a follower's HW) is
reported as the last known one, marked stale, for at most the grace; the lag never goes
back because of a failover."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.client import TopicPartition
from hightide.client.errors import ErrorCode
from hightide.lag import Anomaly, offset_lag
from hightide.lag.endoffsets import EndOffsetMemory, EndOffsets
from hightide.monitoring.monitor import LAST_KNOWN, LagMonitor

TP = TopicPartition("t", 0)


def rounds(mem: EndOffsetMemory, readings: list[tuple[int | None, int | None, int | None]], start_ms: int = 0,
           step_ms: int = 1000) -> list[EndOffsets | None]:
    """One reading per round, ``step_ms`` apart."""
    out = []
    for i, (hw, start, lso) in enumerate(readings):
        out.append(mem.settle(TP, hw, start, lso, start_ms + i * step_ms))
        mem.end_round()
    return out


def test_readings_that_do_not_go_back_are_taken_as_they_are() -> None:
    mem = EndOffsetMemory()
    assert rounds(mem, [(10, 0, 10), (10, 0, 10), (12, 2, 11), (30, 2, 30)]) == [None] * 4


def test_an_unknown_high_watermark_is_the_last_known_one_marked_stale_until_known_again() -> None:
    mem = EndOffsetMemory(grace_ms=30_000)
    got = rounds(mem, [(100, 5, 100), (None, None, None), (None, 6, None), (104, 6, 104), (None, None, None)])
    assert got[0] is None
    assert got[1] == EndOffsets(100, 5, 100, 1000)  # OFFSET_NOT_AVAILABLE on the new leader
    assert got[2] == EndOffsets(100, 6, 100, 1000)  # a known log start is the reading's; stale since the first
    assert got[3] is None  # known again, not lower: taken, no longer stale
    assert got[4] == EndOffsets(104, 6, 104, 4000)  # a new episode starts its own grace


def test_a_lower_high_watermark_is_replaced_then_accepted_after_the_grace() -> None:
    """A new leader's own HW below the old one (its followers have not fetched yet) is
    never reported within the grace; a lower HW that lasts past it is a real regression
    (unclean election, recreated topic) and becomes the new baseline."""
    mem = EndOffsetMemory(grace_ms=3000)
    got = rounds(mem, [(100, 0, 100), (95, 0, 95), (97, 0, 97), (98, 0, 98), (98, 0, 98), (99, 0, 99)])
    assert got[:4] == [None, EndOffsets(100, 0, 100, 1000), EndOffsets(100, 0, 100, 1000),
                       EndOffsets(100, 0, 100, 1000)]
    assert got[4] is None  # 3 s after the first lower reading: taken as it is
    assert got[5] is None  # and the baseline is now 98, so 99 is no regression


def test_an_end_unknown_past_the_grace_is_unknown() -> None:
    mem = EndOffsetMemory(grace_ms=2000)
    got = rounds(mem, [(50, 0, 50), (None, None, None), (None, None, None), (None, None, None)])
    assert got == [None, EndOffsets(50, 0, 50, 1000), EndOffsets(50, 0, 50, 1000), None]  # 2 s after the first
    assert rounds(mem, [(20, 0, 20)], start_ms=10_000) == [None]  # past the grace: a lower one is taken at once


def test_readings_of_one_round_are_not_compared_with_each_other() -> None:
    """Two groups' coordinators answer at slightly different moments: within a round, a
    reading below another is no failover; the next round is held to the highest."""
    mem = EndOffsetMemory()
    assert mem.settle(TP, 105, 0, 105, 0) is None
    assert mem.settle(TP, 100, 0, 100, 0) is None
    mem.end_round()
    assert mem.settle(TP, 103, 0, 103, 1000) == EndOffsets(105, 0, 105, 1000)
    assert mem.settle(TP, 106, 0, 106, 1000) is None
    mem.end_round()
    assert mem.settle(TP, 105, 0, 105, 2000) == EndOffsets(106, 0, 106, 1000)  # the highest good reading
    mem.end_round()


def test_read_committed_needs_the_lso_and_a_lower_lso_is_stale() -> None:
    mem = EndOffsetMemory(read_committed=True)
    got = rounds(mem, [(None, 0, 40), (None, 0, 42), (None, 0, None), (None, 0, 41), (None, 0, 43)])
    assert got == [None, None, EndOffsets(None, 0, 42, 2000), EndOffsets(None, 0, 42, 2000), None]
    ru = EndOffsetMemory()  # read_uncommitted: an LSO that is not part of a reading is no regression
    assert rounds(ru, [(40, 0, 40), (41, 0, None), (42, 0, 39)]) == [None, None, EndOffsets(41, 0, 40, 2000)]


def test_offset_lag_of_a_stale_end_says_so() -> None:
    ol = offset_lag(90, 100, 0, 100, stale=True)
    assert (ol.lag, ol.end_offset, ol.anomalies) == (10, 100, (Anomaly.STALE_END,))
    assert offset_lag(90, 100, 0, 100).anomalies == ()
    caught_up = offset_lag(99, 100, 0, 100, stale=True, next_visible=100)  # a marker at 99: still caught up
    assert (caught_up.lag, caught_up.invisible_tail, caught_up.anomalies) == (0, 1, (Anomaly.STALE_END,))
    ahead = offset_lag(120, 100, 0, 100, stale=True)
    assert ahead.anomalies == (Anomaly.STALE_END, Anomaly.COMMITTED_PAST_END)


def _rows(hw: int | None, committed: int = 90, source: str = "extension",
          error: ErrorCode = ErrorCode.none) -> dict[str, list]:
    lag = None if hw is None else hw - committed
    return {"g": [(TP, committed, hw, 0 if hw is not None else None, lag, hw, "", source, error)]}


def test_the_monitor_never_reports_the_lag_going_back_across_a_failover() -> None:
    """The lag monitor's rows through a failover as a follower coordinator saw it: 100,
    then the leader is dead (end unknown), then the new leader's lower HW (95, a reader of
    another system) and OFFSET_NOT_AVAILABLE, then the new leader's HW passes the old."""
    mon = LagMonitor(None, stale_end_grace_ms=30_000)  # type: ignore[arg-type]  # no I/O used here
    seen = []
    for i, (hw, err) in enumerate([(100, ErrorCode.none), (None, ErrorCode.not_leader_or_follower),
                                   (95, ErrorCode.none), (None, ErrorCode.offset_not_available),
                                   (120, ErrorCode.none)]):
        scan = mon._scan(_rows(hw, error=err), i * 500)
        lags, stale = scan.lags, scan.stale
        mon.ends.end_round()
        row = lags["g"][0]
        seen.append((row[2], row[4], row[7], stale == {TP}))
    assert seen == [(100, 10, "extension", False), (100, 10, LAST_KNOWN, True), (100, 10, LAST_KNOWN, True),
                    (100, 10, LAST_KNOWN, True), (120, 30, "extension", False)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.sampled_from(["true", "unknown", "lower"]),
                          st.integers(1, 40)), min_size=1, max_size=40))
def test_property_the_reported_end_never_goes_below_an_earlier_true_end(
        steps: list[tuple[int, str, int]]) -> None:
    """The true HW only grows (clean failovers); each round's reading is the truth,
    unknown, or anything below it. Within the grace the reported end is never below the
    highest truth read in an earlier round, and never above the truth."""
    grace = 10_000_000  # the whole run is within the grace
    mem = EndOffsetMemory(grace_ms=grace)
    true_hw, best_read, now = 0, None, 0
    for grow, kind, below in steps:
        true_hw += grow
        now += 500
        reading = true_hw if kind == "true" else None if kind == "unknown" else max(0, true_hw - below)
        e = mem.settle(TP, reading, 0, None, now)
        mem.end_round()
        reported = reading if e is None else e.high_watermark
        if best_read is not None:
            assert reported is not None and reported >= best_read
        if reported is not None:
            assert reported <= true_hw
        if kind == "true":
            best_read = true_hw
