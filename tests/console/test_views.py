"""The console's view-model layer (hightide.console.views), without a browser or a broker:
reports built with the real lag functions, rendered to the dicts the pages show."""

from __future__ import annotations

from hightide.cli.groups import offset_rows
from hightide.client import ListOffsetsResult, PartitionMetadata, TopicMetadata, TopicPartition
from hightide.client.errors import KafkaError
from hightide.console import views
from hightide.lag import Certainty, Sample, StatusRules, TimeLag, evaluate_group, evaluate_partition, offset_lag
from hightide.lag.share import InFlightCounts
from hightide.lag.timelag import TimeLagMethod
from hightide.monitoring.monitor import GroupReport, Member, PartitionReport
from hightide.monitoring.share_monitor import ShareGroupReport, SharePartitionReport

NOW = 1_700_000_000_000
RULES = StatusRules(window_ms=60_000, min_samples=3)


def _partition(group, topic, p, committed, end, start=0, *, samples=(), member=None, tl=None, active=0):
    ol = offset_lag(committed, end, start)
    rows = [Sample(NOW - 1000 * (len(samples) - i), c, e, start) for i, (c, e) in enumerate(samples)]
    rows.append(Sample(NOW, committed, end, start))
    st = evaluate_partition(rows, NOW, RULES, active_members=active)
    tls = (tl,) if tl else ()
    return PartitionReport(group, topic, p, ol, end, end, member, tls, tl, st, "offset_fetch")


def _group(name, parts, members=(), state="Empty"):
    gs = evaluate_group({TopicPartition(p.topic, p.partition): p.status for p in parts})
    return GroupReport(name, state, tuple(members), "consumer", tuple(parts), gs, 1, "range")


def test_group_view_rows_are_the_cli_rows_plus_words():
    tl = TimeLag(4200, TimeLagMethod.RECORD_TIMESTAMP, Certainty.EXACT)
    bound = TimeLag(61_000, TimeLagMethod.MAX_TIMESTAMP_ANCHOR, Certainty.LOWER_BOUND)
    rep = _group("g", [_partition("g", "t", 0, 5, 9, tl=tl), _partition("g", "t", 1, 3, 20, start=8, tl=bound)])
    rows = offset_rows(rep)
    v = views.group_view(rep, rows, now_ms=NOW)
    for got, cli in zip(v["partitions"], rows):
        assert {k: got[k] for k in cli} == cli  # every CLI field, unchanged
    p0, p1 = v["partitions"]
    assert (p0["current_offset"], p0["log_end_offset"], p0["lag"]) == (5, 9, 4)
    assert p0["time_lag_text"] == "4.2 s" and p0["time_lag_certainty"] == "exact"
    assert p1["time_lag_text"] == "≥ 1 min 01 s"  # a lower bound is marked as one
    assert p1["time_lags_text"] == "max_timestamp_anchor: ≥ 1 min 01 s (lower_bound)"
    assert views._all_time_lags({"interpolation": {"ms": None, "certainty": "estimate", "reason": "no_history"},
                                 "record_timestamp": {"ms": 1500, "certainty": "exact", "reason": None}}) == (
        "interpolation: no answer (no_history); record_timestamp: 1.5 s (exact)")
    assert p1["anomaly_text"] == ["The committed offset is below the log start offset: 5 records were deleted "
                                  "(retention or DeleteRecords) before the group read them."]
    assert p1["status"] == "ERR" and p1["rule"] == "rule 1 (ERR): committed offset below the log start"
    s = v["summary"]
    assert s["status"] == "ERR" and s["decided_by"] == "t-1" and s["rule"].startswith("rule 1 (ERR)")
    assert s["total_lag"] == 4 + 17 and s["max_time_lag_text"] == "≥ 1 min 01 s"
    assert v["anomalies"] == ["t-1: " + p1["anomaly_text"][0]]
    assert s["active"] is False


def test_stopped_group_and_no_commit_words():
    stopped = _partition("g", "t", 0, 5, 50, samples=[(5, 30), (5, 40)])
    missing = _partition("g", "t", 1, None, 7)
    rep = _group("g", [stopped, missing])
    v = views.group_view(rep, offset_rows(rep), now_ms=NOW)
    p0, p1 = v["partitions"]
    assert p0["status"] == "STOP" and p0["rule"] == "rule 3 (STOP): behind and the group has no active members"
    assert p1["lag"] is None and p1["log_end_offset"] == 7
    assert p1["anomaly_text"] == ["The group has no committed offset here: lag is unknown."]
    assert p1["time_lag_text"] == "-"


def test_members_and_activity():
    m = Member("c-1", "/10.0.0.1", "app")
    rep = _group("g", [_partition("g", "t", 0, 9, 9, member=m, active=1)], members=[m], state="Stable")
    v = views.group_view(rep, offset_rows(rep), now_ms=NOW)
    assert v["members"] == [{"consumer_id": "c-1", "host": "/10.0.0.1", "client_id": "app", "partitions": 1}]
    assert v["summary"]["active"] is True and v["summary"]["status"] == "OK"
    assert v["partitions"][0]["rule"] == "rule 2 (OK): caught up at least once in the window"


def test_rule_words_cover_every_reason_the_status_rules_give():
    import inspect

    from hightide.lag import status
    src = inspect.getsource(status)
    reasons = {r for r in views.RULE_WORDS}
    for reason in reasons:
        assert f'"{reason}"' in src, reason  # no word for a reason that does not exist
    for line in src.splitlines():
        if "PartitionStatus(Status." in line and '"' in line:
            assert line.split('"')[1] in reasons, line
    assert views.rule_words(None) == "" and views.rule_words("new_rule") == "new rule"


def test_group_list_mixes_consumer_and_share_groups_sorted_with_quoted_links():
    rep = _group("b g/1", [_partition("b g/1", "t", 0, 1, 4)])
    share = ShareGroupReport("a-share", "Empty", 0, (SharePartitionReport("t", 0, 2, 7, 11), SharePartitionReport(
        "t", 1, None, None)))
    rows = views.group_list({"b g/1": rep}, {"a-share": share})
    assert [(r["group"], r["type"], r["total_lag"]) for r in rows] == [
        ("a-share", "share", 7), ("b g/1", "consumer", 3)]
    assert rows[1]["href"] == "/groups/b%20g%2F1" and rows[0]["href"] == "/share-groups/a-share"


def test_share_group_view_counts_and_unknowns():
    rep = ShareGroupReport("s", "Stable", 2, (
        SharePartitionReport("t", 0, 2, 7, 11, InFlightCounts(6, 1, 1, 1)),
        SharePartitionReport("t", 1, None, None)))
    v = views.share_group_view(rep)
    p0, p1 = v["partitions"]
    assert (p0["start_offset"], p0["end_offset"], p0["lag"], p0["available"], p0["acknowledged"], p0["archived"],
            p0["not_persisted"]) == (2, 11, 7, 6, 1, 1, 1)
    assert p1["lag"] is None and p1["available"] is None and p1["initialised"] is False
    assert v["summary"]["total_lag"] == 7 and v["summary"]["counts_known"] is True


def test_liveness_rule():
    assert views.liveness(None, NOW, 1000) == ("EMPTY", None)
    assert views.liveness(NOW - 500, NOW, 1000) == ("ACTIVE", 500)
    assert views.liveness(NOW - 5000, NOW, 1000) == ("IDLE", 5000)
    assert views.liveness(NOW, NOW, 1000, error="x") == ("ERROR", None)


def test_topic_view_and_list():
    t = TopicMetadata("t", {0: PartitionMetadata(0, 1, replicas=(1,), isr=(1,)),
                            1: PartitionMetadata(1, 1, replicas=(1,), isr=(1,))})
    ends = {0: ListOffsetsResult(10, -1), 1: ListOffsetsResult(0, -1)}
    starts = {0: ListOffsetsResult(2, -1), 1: ListOffsetsResult(0, -1)}
    maxts = {0: ListOffsetsResult(7, NOW - 400_000), 1: ListOffsetsResult(-1, -1)}
    v = views.topic_view(t, ends, starts, maxts, now_ms=NOW, idle_after_ms=300_000)
    p0, p1 = v["partitions"]
    assert (p0["log_start_offset"], p0["log_end_offset"], p0["max_timestamp_offset"], p0["status"]) == (
        2, 10, 7, "IDLE")
    assert p0["idle_text"] == "6 min 40 s"
    assert (p1["log_end_offset"], p1["status"], p1["last_write_text"]) == (0, "EMPTY", "-")
    assert v["liveness"] == {"EMPTY": 1, "IDLE": 1}
    err = {0: KafkaError(35, "unsupported"), 1: ListOffsetsResult(3, NOW - 10)}
    rows = views.topic_list([t], {("t", 0): ends[0], ("t", 1): ends[1]}, {("t", p): r for p, r in err.items()},
                            now_ms=NOW, idle_after_ms=300_000)
    assert rows[0]["records_end_sum"] == 10 and rows[0]["liveness"] == {"ACTIVE": 1, "ERROR": 1}
    assert rows[0]["idle_text"] == "10 ms"
    assert rows[0]["size_bytes"] is None and rows[0]["size_text"] == "-"  # DescribeLogDirs said nothing
    rows = views.topic_list([t], {}, {}, now_ms=NOW, idle_after_ms=1, sizes={("t", 0): 2048, ("t", 1): 1})
    assert (rows[0]["size_bytes"], rows[0]["size_text"]) == (2049, "2.0 KiB")
    v = views.topic_view(t, ends, starts, maxts, now_ms=NOW, idle_after_ms=1, sizes={1: 700})
    assert [p["size_bytes"] for p in v["partitions"]] == [None, 700] and v["size_text"] == "700 B"


def test_formatting():
    assert [views.fmt_ms(x) for x in (None, 850, 12_345, 245_000, 7_380_000)] == [
        "-", "850 ms", "12.3 s", "4 min 05 s", "2 h 03 min"]
    assert views.fmt_time(0) == "1970-01-01 00:00:00Z" and views.fmt_time(-1) == "-"
    assert [views.fmt_bytes(x) for x in (None, 0, 1023, 1536, 12 * 2**20, 3 * 2**30 + 2**29)] == [
        "-", "0 B", "1023 B", "1.5 KiB", "12.0 MiB", "3.5 GiB"]


# -- share groups: status (issue 30 item 5) ------------------------------------------------------

def _share_series(points, members=1, rules=RULES):
    """judge_share_groups over snapshots 10 s apart: ``points`` are per snapshot a list of
    (start offset, lag, end) per partition 0..n. Returns the last judged report."""
    from hightide.lag import StatusTracker
    from hightide.monitoring.share_monitor import ShareSnapshot, judge_share_groups
    tracker = StatusTracker(rules)
    rep = None
    for i, parts in enumerate(points):
        snap = ShareSnapshot(NOW + 10_000 * i, {"s": ShareGroupReport("s", "Stable", members, tuple(
            SharePartitionReport("t", p, start, lag, end) for p, (start, lag, end) in enumerate(parts)))})
        rep = judge_share_groups(snap, tracker).groups["s"]
    return rep


def test_share_group_status_follows_the_consumer_group_rules():
    rules = StatusRules(window_ms=60_000, min_samples=3, stop_after_ms=600_000)
    # acknowledging: the lag falls although the start offset (a record still in flight) stays
    moving = _share_series([[(5, 20, 30)], [(5, 12, 32)], [(5, 6, 34)]], rules=rules)
    assert (moving.status.status.value, moving.status.partitions[("t", 0)].reason) == ("OK", "progressing")
    # nothing acknowledged while records wait: STALL (members present), STOP without members
    stuck = [[(5, 20, 25)], [(5, 25, 30)], [(5, 30, 35)]]
    assert _share_series(stuck, rules=rules).status.status.value == "STALL"
    assert _share_series(stuck, members=0, rules=rules).status.partitions[("t", 0)].reason == "no_active_members"
    # caught up once in the window: OK; an uninitialised partition: ERR, it decides the group
    ok = _share_series([[(5, 0, 5), (None, None, None)]], rules=rules)
    assert ok.status.partitions[("t", 0)].status.value == "OK"
    assert (ok.status.status.value, ok.status.worst) == ("ERR", ("t", 1))
    v = views.share_group_view(ok)
    assert v["summary"]["status"] == "ERR" and v["summary"]["decided_by"] == "t-1"
    assert v["summary"]["rule"] == "rule 1 (ERR): the share partition is not initialised (no start offset): lag unknown"
    assert [p["status"] for p in v["partitions"]] == ["OK", "ERR"]
    assert v["partitions"][0]["rule"] == "rule 2 (OK): caught up at least once in the window"
    stall = views.share_group_view(_share_series(stuck, rules=rules))
    assert stall["summary"]["rule"] == "rule 6 (STALL): nothing acknowledged over the window"
    # a group that could not be described is not judged
    from hightide.lag import StatusTracker
    from hightide.monitoring.share_monitor import ShareSnapshot, judge_share_groups
    bad = judge_share_groups(ShareSnapshot(NOW, {"x": ShareGroupReport("x", error="boom")}), StatusTracker())
    assert bad.groups["x"].status is None and views.share_group_view(bad.groups["x"])["summary"]["status"] is None


def test_share_position_is_end_less_lag():
    from hightide.monitoring.share_monitor import share_position
    assert share_position(SharePartitionReport("t", 0, 2, 7, 11)) == 4  # SPSO 2, 2 acknowledged above it
    assert share_position(SharePartitionReport("t", 0, 2, None, None)) == 2
    assert share_position(SharePartitionReport("t", 0, None, None, 11)) is None


def test_group_list_carries_share_status():
    rep = _share_series([[(0, 0, 3)]])
    rows = views.group_list({}, {"s": rep})
    assert rows[0]["status"] == "OK" and rows[0]["total_lag"] == 0


# -- the groups list: sort and filter (issue 30 item 5) ---------------------------------------

def _row(name, status, lag, tl=None, kind="consumer"):
    return {"group": name, "type": kind, "status": status, "total_lag": lag, "max_time_lag_ms": tl}


LIST = [_row("b-orders", "OK", 0, 10), _row("a-clicks", "STOP", 500, 90_000), _row("c-jobs", "ERR", None),
        _row("d-share", "STALL", 40, None, "share"), _row("e-new", None, 7), _row("f-warn", "WARN", 500, 5)]


def names(rows):
    return [r["group"] for r in rows]


def test_groups_sort_by_status_lag_name_worst_first_unknown_last():
    assert names(views.select_groups(LIST)) == ["a-clicks", "b-orders", "c-jobs", "d-share", "e-new", "f-warn"]
    assert names(views.select_groups(LIST, sort="name", desc=True))[0] == "f-warn"
    assert names(views.select_groups(LIST, sort="status")) == [
        "c-jobs", "a-clicks", "d-share", "f-warn", "b-orders", "e-new"]
    assert names(views.select_groups(LIST, sort="status", desc=False)) == [
        "b-orders", "f-warn", "d-share", "a-clicks", "c-jobs", "e-new"]  # unknown last either way
    # ties (500) by name; unknown lag last
    assert names(views.select_groups(LIST, sort="lag")) == ["a-clicks", "f-warn", "d-share", "e-new", "b-orders",
                                                           "c-jobs"]
    assert names(views.select_groups(LIST, sort="time_lag"))[:3] == ["a-clicks", "b-orders", "f-warn"]
    assert names(views.select_groups(LIST, sort="type"))[-1] == "d-share"
    assert names(views.select_groups(LIST, sort="bogus")) == names(views.select_groups(LIST))


def test_groups_filter_by_status_and_name():
    assert names(views.select_groups(LIST, status="problems")) == ["a-clicks", "c-jobs", "d-share", "e-new", "f-warn"]
    assert names(views.select_groups(LIST, status="ERR")) == ["c-jobs"]
    assert names(views.select_groups(LIST, status="unknown")) == ["e-new"]
    assert names(views.select_groups(LIST, name=" ORD ")) == ["b-orders"]
    assert names(views.select_groups(LIST, status="STOP", name="clicks", sort="lag")) == ["a-clicks"]
    assert views.select_groups(LIST, status="OK", name="nope") == []
    assert len(views.select_groups(LIST, status="bogus")) == len(LIST)
