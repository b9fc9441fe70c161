"""Burrow-style status evaluation (hightide.lag.status) with injected samples and clock."""

from hypothesis import given
from hypothesis import strategies as st

from hightide.lag import (
    PartitionStatus,
    Sample,
    Status,
    StatusRules,
    StatusTracker,
    evaluate_group,
    evaluate_group_rows,
    evaluate_partition,
)

RULES = StatusRules(window_ms=10_000, min_samples=5, stop_after_ms=60_000)


def run(points, now=None, **kw):
    """points: [(t, committed, end)]"""
    samples = [Sample(t, c, e, 0) for t, c, e in points]
    return evaluate_partition(samples, now if now is not None else samples[-1].time_ms, RULES, **kw)


def every_second(pairs, t0=0):
    return [(t0 + i * 1000, c, e) for i, (c, e) in enumerate(pairs)]


def test_ok_when_caught_up_in_window():
    assert run(every_second([(0, 10), (10, 10), (10, 20)])).status == Status.OK


def test_incomplete_window_is_ok_but_flagged():
    r = run(every_second([(0, 10), (0, 20)]))
    assert (r.status, r.complete, r.reason) == (Status.OK, False, "window_incomplete")


def test_stall_then_stop_after():
    pts = every_second([(5, 10)] * 6)
    r = run(pts)
    assert (r.status, r.complete) == (Status.STALL, True)
    assert run(pts, now=pts[-1][0], committed_since_ms=pts[-1][0] - 60_000).status == Status.STOP


def test_stop_without_members():
    assert run(every_second([(5, 10)] * 2), active_members=0).status == Status.STOP
    assert run(every_second([(10, 10)] * 2), active_members=0).status == Status.OK


def test_warn_when_falling_behind_and_ok_when_gaining():
    assert run(every_second([(i, 10 + 2 * i) for i in range(6)])).status == Status.WARN
    assert run(every_second([(i * 3, 20 + i) for i in range(6)])).status == Status.OK


def test_rewind():
    assert run(every_second([(5, 20), (6, 20), (7, 20), (2, 20), (3, 20)])).status == Status.REWIND


def test_errors():
    assert run([(0, None, 10)]).reason == "no_commit"
    assert run([(0, 11, 10)]).reason == "committed_past_end"
    assert evaluate_partition([Sample(0, 5, 10, 6)], 0, RULES).reason == "committed_before_log_start"
    assert run([(0, 5, None)]).status == Status.ERR


def test_group_is_most_severe():
    parts = {("t", 0): run(every_second([(0, 10), (10, 10)])), ("t", 1): run(every_second([(5, 10)] * 6)),
             ("t", 2): run(every_second([(i, 10 + 2 * i) for i in range(6)]))}
    g = evaluate_group(parts)
    assert (g.status, g.worst, g.total_lag) == (Status.STALL, ("t", 1), 5 + 15)
    assert evaluate_group({}).status == Status.OK


def test_tracker_transitions_through_stall_and_back_to_ok():
    tr = StatusTracker(RULES)
    seen = []
    t = 0
    for c, e in [(i, i) for i in range(3)] + [(3, 10)] * 14 + [(6, 10), (10, 10), (10, 10)]:
        tr.observe("g", ("t", 0), Sample(t, c, e, 0))
        seen.append(tr.group_status("g", t).status)
        t += 1000
    assert Status.STALL in seen
    assert seen[0] == Status.OK and seen[-1] == Status.OK
    stall = seen.index(Status.STALL)
    assert all(s == Status.OK for s in seen[:stall])
    tr.expire(t + 10**6)
    assert tr.samples("g", ("t", 0)) == []


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=15),
       st.sampled_from([None, 0, 1]))
def test_evaluate_never_raises_and_caught_up_is_ok(pairs, members):
    pts = [(i * 1000, min(c, e), e) for i, (c, e) in enumerate(pairs)]
    r = run(pts, active_members=members)
    assert r.status in Status
    if any(c >= e for _, c, e in pts[-10:]):
        assert r.status == Status.OK


_offset = st.one_of(st.none(), st.integers(-1, 30))


@given(st.lists(st.tuples(st.integers(0, 4000), _offset, _offset, _offset), min_size=1, max_size=25),
       st.lists(st.sampled_from([None, 0, 2]), min_size=25, max_size=25))
def test_observe_status_equals_observe_then_partition_status(steps, members):
    """The monitor's one-call path (observe_status, status rows, evaluate_group_rows)
    answers exactly what observe + partition_status + evaluate_group answer, for any
    sample sequence: gaps, repeated or older times, unknown offsets."""
    rules = StatusRules(window_ms=6_000, min_samples=3, stop_after_ms=9_000)
    fast, slow = StatusTracker(rules), StatusTracker(rules)
    t, rows, statuses = 0, {}, {}
    for i, (dt, c, e, start) in enumerate(steps):
        t += dt - 500  # sometimes backwards or equal: such samples are ignored by both
        key = ("t", i % 3)
        rows[key] = fast.observe_status("g", key, t, c, e, start, members[i])
        slow.observe("g", key, Sample(t, c, e, start))
        statuses[key] = slow.partition_status("g", key, t, members[i])
        assert PartitionStatus(*rows[key]) == statuses[key]
    assert evaluate_group_rows(rows) == evaluate_group(statuses)
    assert evaluate_group_rows(rows).partitions == statuses


@given(st.lists(st.tuples(st.integers(1, 3000), _offset, _offset, _offset), min_size=1, max_size=60),
       st.sampled_from([None, 0, 2]), st.integers(1, 8), st.integers(1_000, 20_000))
def test_tracker_constant_time_status_equals_a_scan_of_its_window(steps, members, min_samples, window_ms):
    """observe_status evaluates from markers kept per partition (caught up, rewind, lag
    gain, offset unchanged since), not by scanning the window: after every sample it
    answers what a scan of the same samples answers, over long sequences whose window
    drops samples (committed offsets that go up, down and repeat; unknown offsets)."""
    rules = StatusRules(window_ms=window_ms, min_samples=min_samples, stop_after_ms=window_ms + 3_000)
    tracker = StatusTracker(rules)
    t, kept = 0, []
    for dt, c, e, start in steps:
        t += dt
        row = tracker.observe_status("g", "p", t, c, e, start, members)
        kept.append(Sample(t, c, e, start))
        kept = [s for s in kept if s.time_ms > t - window_ms] or kept[-1:]
        assert tracker.samples("g", "p") == kept
        # since: the first sample of the trailing run with the newest committed offset, over all samples
        assert PartitionStatus(*row) == tracker.partition_status("g", "p", t, members)
        assert PartitionStatus(*row) == evaluate_partition(kept, t, rules, active_members=members,
                                                           committed_since_ms=tracker._groups["g"]["p"].since_ms)


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=40))
def test_tracker_statuses_over_monotonic_offsets_equal_a_scan(moves):
    """Offsets as a consumer produces them (committed and end only grow, some commits
    repeat): every status the tracker reaches (WARN, STALL, STOP, OK) matches the scan."""
    rules = StatusRules(window_ms=5_000, min_samples=3, stop_after_ms=8_000)
    tracker, c, e = StatusTracker(rules), 0, 0
    for i, (dc, de) in enumerate(moves):
        e += de
        c = min(e, c + dc)
        t = (i + 1) * 1000
        row = tracker.observe_status("g", "p", t, c, e, 0)
        assert PartitionStatus(*row) == tracker.partition_status("g", "p", t)


def test_rewind_leaves_the_window_with_its_earlier_sample():
    """A REWIND pair counts while both of its samples are in the window: once the
    sample before the decrease is dropped, the partition is no longer REWIND."""
    rules = StatusRules(window_ms=5_000, min_samples=3, stop_after_ms=60_000)
    tracker = StatusTracker(rules)
    seen = [tracker.observe_status("g", "p", (i + 1) * 1000, c, 100, 0)[0]
            for i, c in enumerate([10, 5, 6, 7, 8, 9])]
    assert seen == [Status.OK, Status.OK, Status.REWIND, Status.REWIND, Status.REWIND, Status.OK]
    assert tracker.partition_status("g", "p", 6000).status == Status.OK


_lagrow_off = st.one_of(st.none(), st.integers(-1, 40))


@given(st.lists(st.lists(st.tuples(st.integers(0, 3), _lagrow_off, _lagrow_off, _lagrow_off, _lagrow_off),
                         max_size=6), min_size=1, max_size=8),
       st.booleans(), st.sampled_from([None, 0, 3]),
       st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 40)), st.integers(0, 45), max_size=8),
       st.lists(st.integers(-1500, 4000), min_size=8, max_size=8))
def test_observe_rows_equals_observe_status_row_by_row(rounds, read_committed, members, visible, steps):
    """observe_rows (the monitor's per-group call on lag rows) answers and stores what
    one observe_status per row does with the end (LSO or HW), unknown offsets as None
    and the next-visible offset folded in as the monitor did it."""
    rules = StatusRules(window_ms=5_000, min_samples=2, stop_after_ms=7_000)
    fast, slow = StatusTracker(rules), StatusTracker(rules)
    t = 0
    for rows, dt in zip(rounds, steps):
        t += dt  # sometimes backwards: such samples are ignored by both
        lag_rows = [(k, c, hw, start, None, lst, "", "extension", 0) for k, c, hw, start, lst in rows]
        got = fast.observe_rows("g", t, lag_rows, members, read_committed=read_committed, next_visible=visible)
        want = {}
        for k, c, hw, start, _, lst, *_ in lag_rows:
            end = lst if read_committed else hw
            if visible and c is not None and end is not None and visible.get((k, c), -1) >= end > c:
                end = c
            want[k] = slow.observe_status("g", k, t, None if c is None or c < 0 else c,
                                          None if end is None or end < 0 else end,
                                          None if start is None or start < 0 else start, members)
        assert got == want
        for k in range(4):
            assert fast.samples("g", k) == slow.samples("g", k)


def test_observe_rows_counts_a_committed_offset_facing_only_markers_as_caught_up():
    """Committed 9, end 10: the next visible record at 10 (a marker at 9) or past the
    end is caught up (lag 0); at 9 (a record is there) the partition is behind by one."""
    tracker = StatusTracker(StatusRules(window_ms=5_000, min_samples=1))
    rows = [(k, 9, 10, 0, 1, 10, "", "extension", 0) for k in range(3)]
    got = tracker.observe_rows("g", 1000, rows, next_visible={(0, 9): 10, (1, 9): 11, (2, 9): 9})
    assert [got[k][:2] for k in range(3)] == [(Status.OK, "caught_up_in_window")] * 2 + [
        (Status.OK, "window_incomplete")]
    assert [r[3] for r in got.values()] == [0, 0, 1]
