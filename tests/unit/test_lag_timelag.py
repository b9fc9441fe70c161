"""Time lag by three methods (hightide.lag.timelag), with property tests against a
simulated partition whose append times are known."""

from hypothesis import assume, given
from hypothesis import strategies as st

from hightide.lag import (
    Certainty,
    OffsetHistory,
    TimeLag,
    TimeLagMethod,
    best_time_lag,
    time_lag_from_max_timestamp,
    time_lag_from_record,
    time_lag_interpolated,
)


def test_record_method():
    assert time_lag_from_record(5, 10, 1_000, 4_000) == TimeLag(3_000, TimeLagMethod.RECORD_TIMESTAMP)
    assert time_lag_from_record(10, 10, None, 4_000).ms == 0
    assert time_lag_from_record(None, 10, 1, 4_000).reason == "no_commit"
    assert time_lag_from_record(5, 10, -1, 4_000).ms is None


def test_history_collapses_flat_runs_and_restarts_on_truncation():
    h = OffsetHistory(10)
    for t, o in [(0, 5), (10, 5), (20, 5), (30, 5), (40, 8)]:
        h.add(o, t)
    assert h.points == [(5, 0), (5, 30), (8, 40)]
    h.add(9, 40)  # same time: ignored
    assert h.points[-1] == (8, 40)
    h.add(2, 50)
    assert h.points == [(2, 50)]


def test_interpolation_between_samples():
    h = OffsetHistory(points=[(0, 0), (100, 1_000)])
    # record 49 was appended when the end offset passed 50: t = 500
    lag = time_lag_interpolated(49, 100, h, 2_000)
    assert (lag.ms, lag.certainty) == (1_500, Certainty.ESTIMATE)
    assert time_lag_interpolated(100, 100, h, 2_000).ms == 0
    before = time_lag_interpolated(0, 100, OffsetHistory(points=[(50, 1_000), (100, 2_000)]), 3_000)
    assert (before.ms, before.certainty) == (2_000, Certainty.LOWER_BOUND)
    assert time_lag_interpolated(5, 100, OffsetHistory(), 1).ms is None


def test_anchor_bound_and_estimate():
    lb = time_lag_from_max_timestamp(10, 100, 99, 9_000, 10_000)
    assert (lb.ms, lb.certainty) == (1_000, Certainty.LOWER_BOUND)
    est = time_lag_from_max_timestamp(10, 100, 99, 9_000, 10_000, rate_per_ms=0.1)  # 89 records at 0.1/ms
    assert (est.ms, est.certainty) == (1_890, Certainty.ESTIMATE)
    assert time_lag_from_max_timestamp(100, 100, 99, 9_000, 10_000).ms == 0
    assert time_lag_from_max_timestamp(1, 100, -1, -1, 10_000).ms is None


def test_best_prefers_certainty():
    exact = TimeLag(5, TimeLagMethod.RECORD_TIMESTAMP)
    est = TimeLag(50, TimeLagMethod.INTERPOLATION, Certainty.ESTIMATE)
    lb = TimeLag(500, TimeLagMethod.MAX_TIMESTAMP_ANCHOR, Certainty.LOWER_BOUND)
    assert best_time_lag([lb, est, exact]) is exact
    assert best_time_lag([lb, est]) is est
    assert best_time_lag([TimeLag(None, TimeLagMethod.INTERPOLATION)]) is None


# A partition: record i appended at append[i] (non-decreasing), CreateTime ts[i].
appends = st.lists(st.integers(0, 10_000), min_size=1, max_size=60).map(lambda xs: sorted(xs))


@given(appends, st.data())
def test_interpolation_error_is_at_most_one_sampling_gap(append, data):
    n = len(append)
    sample_times = sorted(set(data.draw(st.lists(st.integers(-1, 10_001), min_size=2, max_size=30))))
    h = OffsetHistory(max_points=1_000)
    for t in sample_times:
        h.add(sum(1 for a in append if a <= t), t)
    c = data.draw(st.integers(0, n - 1))
    now = 20_000
    end = sum(1 for a in append if a <= sample_times[-1])
    assume(c < end)
    got = time_lag_interpolated(c, end, h, now)
    truth = now - append[c]
    assert got.ms is not None
    if got.certainty == Certainty.LOWER_BOUND:
        assert got.ms <= truth
    else:
        # the sample pair around the append brackets it
        after = min(t for t in sample_times if t >= append[c])
        before = max((t for t in sample_times if t < append[c]), default=after)
        assert now - after - 1 <= got.ms <= now - before + 1


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=50), st.data())
def test_anchor_is_a_lower_bound_and_record_method_exact(ts, data):
    end = len(ts)
    c = data.draw(st.integers(0, end - 1))
    now = 2 * 10**6
    max_ts = max(ts)
    anchor = ts.index(max_ts)  # first record with the largest timestamp (ListOffsets -3)
    truth = now - ts[c]
    assert time_lag_from_record(c, end, ts[c], now).ms == truth
    lb = time_lag_from_max_timestamp(c, end, anchor, max_ts, now)
    assert lb.certainty == Certainty.LOWER_BOUND and lb.ms <= truth
    assert time_lag_from_max_timestamp(end, end, anchor, max_ts, now).ms == 0
