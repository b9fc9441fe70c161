"""The lag-history report (summary and charts) labels certainty (issue 12 item 4): a time
lag known only as a lower bound is never presented as a value; groups whose series are
identical are drawn once. Pure Python on result rows: no Spark session needed."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from hightide.spark.laghistory import _summary, chart, group_series  # noqa: E402

T0 = 1_700_000_000_000


def row(group, t, lag, time_lag_ms, certainty, partition=0):
    return {"group": group, "topic": "t", "partition": partition, "time_ms": T0 + t, "committed": 0,
            "end_offset": lag, "offset_lag": lag, "time_lag_ms": time_lag_ms, "certainty": certainty}


ROWS = [
    # two groups stuck since before the first sample: only "at least the window" is known
    *(row(g, t, 5, t + 10_000, "lower_bound") for g in ("idle-a", "idle-b") for t in (0, 10_000, 20_000)),
    # a group with interpolated (estimate) and caught-up (exact) points
    row("busy", 0, 3, 4_000, "estimate"), row("busy", 10_000, 0, 0, "exact"), row("busy", 20_000, 2, 1_500, "estimate"),
    # a lower bound on one partition makes the group's max a lower bound too
    row("mixed", 0, 1, 9_000, "exact"), row("mixed", 0, 1, 2_000, "lower_bound", partition=1),
]


def test_group_series_carries_the_weakest_certainty():
    s = group_series(ROWS)
    assert s["mixed"] == [(T0, 2, 9_000, "lower_bound", False)]
    assert [p[3] for p in s["busy"]] == ["estimate", "exact", "estimate"]


def test_summary_labels_lower_bounds_and_estimates():
    text = _summary(ROWS, None, 15_000, 10)
    assert "  idle-a: max time lag >= 30.000 s (lower bound) at " in text
    assert "  busy: max time lag ~4.000 s (estimate) at " in text
    assert "  mixed: max time lag >= 9.000 s (lower bound)" in text
    assert "(lower bound: the committed record was written before the first end-offset sample," in text
    breaches = text.split("SLO breaches, time lag > 15000 ms:")[1]
    assert "  idle-a: 2 of 3 samples" in breaches and "worst >= 30000 ms" in breaches


def test_time_lag_chart_marks_bounds_and_merges_identical_groups():
    fig = chart(group_series(ROWS), 2, "time lag (s)", 1000.0, 10)
    ax = fig.axes[0]
    labels = ax.get_legend().get_texts()
    assert sorted(t.get_text() for t in labels) == ["busy", "idle-a, idle-b (identical) (lower bound)", "mixed (lower bound)"]
    dashed = [ln for ln in ax.get_lines() if ln.get_gid() == "bound"]
    assert dashed and all(ln.get_linestyle() == "--" for ln in dashed)
    assert len(ax.collections) == 1  # the shaded band above the idle groups' bounds
    assert "lower bound" in ax.get_title()
    solid = [ln for ln in ax.get_lines() if ln.get_label() == "busy"]
    assert solid[0].get_linestyle() == "-"
    markers = {ln.get_marker() for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert len(markers) == 3  # each line its own marker
    hollow = [ln for ln in ax.get_lines() if ln.get_linestyle() == "None" and ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 3 + 1  # idle-a/b's three points and mixed's one


def test_offset_lag_chart_has_no_bound_styling():
    ax = chart(group_series(ROWS), 1, "offset lag (records)", 1.0, 10).axes[0]
    assert not [ln for ln in ax.get_lines() if ln.get_gid() == "bound"]
    assert "lower bound" not in ax.get_title()


def est_row(group, t, partition, committed, end, estimated, time_lag_ms=0, certainty="estimate"):
    """A row of a partition the group had not committed yet (issue 30 item 3):
    ``committed``/``offset_lag`` None, ``estimated_lag`` set, as lag_rows writes it."""
    return {"group": group, "topic": "t", "partition": partition, "time_ms": T0 + t, "committed": committed,
            "end_offset": end, "offset_lag": None if committed is None else end - committed,
            "estimated_lag": estimated if committed is None else None, "time_lag_ms": time_lag_ms,
            "certainty": certainty}


# a consumer reading p0, then p1 (30 records each): before the fix p1 was left out until its
# first commit and the total fell to 0 at t=10 s although 30 records were waiting
SERIAL = [est_row("serial", 0, 0, 10, 30, None, 3_000, "estimate"), est_row("serial", 0, 1, None, 30, 30, 5_000),
          est_row("serial", 10_000, 0, 30, 30, None, 0, "exact"), est_row("serial", 10_000, 1, None, 30, 30, 15_000),
          est_row("serial", 20_000, 0, 30, 30, None, 0, "exact"), est_row("serial", 20_000, 1, 15, 30, None, 9_000)]


def test_group_series_counts_estimates_in_the_total_and_flags_them():
    s = group_series(SERIAL + ROWS)
    assert s["serial"] == [(T0, 50, 5_000, "estimate", True), (T0 + 10_000, 30, 15_000, "estimate", True),
                           (T0 + 20_000, 15, 9_000, "estimate", False)]
    assert all(not p[4] for g in ("idle-a", "busy", "mixed") for p in s[g])  # rows without the column


def test_summary_and_chart_say_a_total_is_an_estimate():
    text = _summary(SERIAL, 20, None, 10)
    assert "  serial: max lag ~50 (estimate) at " in text and ", latest 15\n" in text
    assert "(estimate: the total counts partitions the group had not committed yet" in text
    breaches = text.split("SLO breaches, offset lag > 20:")[1]
    assert "  serial: 2 of 3 samples" in breaches and "worst 50 (estimate)" in breaches
    ax = chart(group_series(SERIAL), 1, "offset lag (records)", 1.0, 10).axes[0]
    marked = [ln for ln in ax.get_lines() if ln.get_gid() == "estimate"]
    assert len(marked) == 2 and all(ln.get_markerfacecolor() == "white" for ln in marked)
    assert "estimates for partitions without a commit" in ax.get_title()
    assert not [ln for ln in chart(group_series(ROWS), 1, "x", 1.0, 10).axes[0].get_lines()
                if ln.get_gid() == "estimate"]
