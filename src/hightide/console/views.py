"""The console's view-model layer: pure functions from the monitor's reports to the plain
dicts the templates render (and the JSON the pages' scripts read). No IO, no web types.

Numbers are never computed here: consumer-group rows are the CLI's own
:func:`hightide.cli.groups.offset_rows` (so the page equals ``hightide groups describe
-o json``), statuses and anomalies come from :mod:`hightide.lag` through
:class:`~hightide.monitoring.monitor.LagMonitor`, share-partition lag and in-flight counts
from :mod:`hightide.monitoring.share_monitor`. This module only adds words and layout.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard
from urllib.parse import quote

from ..client.types import ListOffsetsResult
from ..monitoring.share_monitor import share_total_lag

__all__ = ["ANOMALY_WORDS", "GROUP_SORTS", "RULE_WORDS", "SHARE_RULE_WORDS", "STATUS_FILTERS", "anomaly_words",
           "fmt_ms", "fmt_time", "group_list", "group_view", "liveness", "rule_words", "select_groups",
           "share_group_view", "topic_list", "topic_view"]

ANOMALY_WORDS = {
    "no_commit": "The group has no committed offset here: lag is unknown.",
    "end_unknown": "The end offset could not be read (deleted topic, no leader, or no stable offset): "
                   "lag is unknown.",
    "committed_past_end": "The committed offset is past the end of the log (negative lag): the log was "
                          "truncated or recreated, or an offset that does not exist yet was committed.",
    "committed_before_log_start": "The committed offset is below the log start offset: {lost} records were "
                                  "deleted (retention or DeleteRecords) before the group read them.",
    "stale_end": "The end offset is the last one known (the partition's leader could not tell it): the lag is "
                 "a lower bound.",
    "tail_unprobed": "The offsets after the commit could not be checked for transaction markers or aborted "
                     "records: the lag is at most this (the group may be caught up); not judged by the status rules.",
}
"""Docs/lag.md's anomaly table, in words."""

RULE_WORDS = {
    "no_samples": "no sample yet",
    "no_commit": "rule 1 (ERR): no committed offset",
    "end_unknown": "rule 1 (ERR): end offset unknown",
    "committed_past_end": "rule 1 (ERR): committed offset past the end",
    "committed_before_log_start": "rule 1 (ERR): committed offset below the log start",
    "caught_up_in_window": "rule 2 (OK): caught up at least once in the window",
    "no_active_members": "rule 3 (STOP): behind and the group has no active members",
    "window_incomplete": "rule 4 (OK, incomplete): too few samples in the window yet",
    "committed_offset_decreased": "rule 5 (REWIND): the committed offset went backwards",
    "offset_unchanged_for_stop_after": "rule 6 (STOP): committed offset unchanged for the stop-after time",
    "offset_unchanged_lag_not_decreasing": "rule 6 (STALL): committed offset unchanged over the window",
    "lag_not_decreasing": "rule 7 (WARN): offsets move but the lag never decreases",
    "progressing": "rule 8 (OK): progressing",
    "tail_unprobed": "not judged (OK, incomplete): the offsets after the commit could not be probed for markers",
}
"""The status rules of docs/lag.md, keyed by the reason :mod:`hightide.lag.status` gives."""

SHARE_RULE_WORDS = {
    **RULE_WORDS,
    "no_commit": "rule 1 (ERR): the share partition is not initialised (no start offset): lag unknown",
    "committed_past_end": "rule 1 (ERR): the acknowledged position is past the end",
    "committed_offset_decreased": "rule 5 (REWIND): the acknowledged position went backwards "
                                  "(records released for redelivery, or the start offset was reset)",
    "offset_unchanged_for_stop_after": "rule 6 (STOP): nothing acknowledged for the stop-after time",
    "offset_unchanged_lag_not_decreasing": "rule 6 (STALL): nothing acknowledged over the window",
    "lag_not_decreasing": "rule 7 (WARN): records are acknowledged but the lag never decreases",
}
"""The status rules as they read for a share group, whose "committed offset" is the
acknowledged position (:func:`hightide.monitoring.share_monitor.share_position`)."""

TIME_LAG_METHODS = {
    "record_timestamp": "timestamp of the record at the committed offset",
    "interpolation": "interpolated over the console's end-offset samples",
    "max_timestamp_anchor": "from the partition's max timestamp (ListOffsets -3)",
}


def rule_words(reason: str | None, *, share: bool = False) -> str:
    """The status rule that fired, in words ('' when unknown); ``share``: as it reads for
    a share group."""
    if reason is None:
        return ""
    return (SHARE_RULE_WORDS if share else RULE_WORDS).get(reason, reason.replace("_", " "))


def anomaly_words(anomalies: Iterable[str], lost: int | None = None) -> list[str]:
    """Each anomaly name as a sentence; ``lost`` fills the deleted-records count."""
    n = "some" if lost is None else str(lost)
    return [ANOMALY_WORDS.get(a, a.replace("_", " ")).format(lost=n) for a in anomalies]


def fmt_ms(ms: int | None) -> str:
    """A duration in ms for people: '-', '850 ms', '12.3 s', '4 min 05 s', '2 h 03 min'."""
    if ms is None:
        return "-"
    if abs(ms) < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if abs(s) < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def fmt_bytes(n: int | None) -> str:
    """A size for people: '-', '512 B', '1.5 KiB', '12.0 MiB', '3.2 GiB'."""
    if n is None:
        return "-"
    size, unit = float(n), "B"
    for nxt in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, nxt
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def fmt_time(ms: int | None) -> str:
    """A timestamp in ms as ISO-8601 UTC to the second, '-' when unknown or negative."""
    if ms is None or ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _certainty_mark(certainty: str | None) -> str:
    """'≥' before a lower bound, '~' before an estimate (as spark lag-history labels them)."""
    return {"lower_bound": "≥ ", "estimate": "~ "}.get(certainty or "", "")


def group_view(report: Any, rows: list[dict[str, Any]], *, now_ms: int) -> dict[str, Any]:
    """A consumer group page from a :class:`GroupReport` and its CLI rows
    (:func:`hightide.cli.groups.offset_rows` of the same report).

    Returns a dict with ``summary`` (state, members, status, rule, total lag, max time
    lag), ``members``, ``partitions`` (the CLI rows, each with ``rule``, ``anomaly_text``,
    ``time_lag_text``) and ``anomalies`` (group-wide sentences, one per partition affected)."""
    by_key = {(p.topic, p.partition): p for p in report.partitions}
    parts = []
    notes = []
    for r in rows:
        p = by_key.get((r["topic"], r["partition"]))
        lost = p.offsets.lost if p is not None else None
        words = anomaly_words(r["anomalies"], lost)
        notes += [f"{r['topic']}-{r['partition']}: {w}" for w in words]
        parts.append({**r, "rule": rule_words(r["status_reason"]), "anomaly_text": words,
                      "time_lag_text": _certainty_mark(r["time_lag_certainty"]) + fmt_ms(r["time_lag_ms"])
                      + _reason_words(r),
                      "time_lag_method_text": TIME_LAG_METHODS.get(r["time_lag_method"] or "", ""),
                      "time_lags_text": _all_time_lags(r["time_lags"])})
    counts: dict[str, int] = {}
    for p in report.partitions:
        if p.member is not None:
            counts[p.member.consumer_id] = counts.get(p.member.consumer_id, 0) + 1
    members = [{"consumer_id": m.consumer_id, "host": m.host, "client_id": m.client_id,
                "partitions": counts.get(m.consumer_id, 0)} for m in report.members or ()]
    gs = report.status
    worst = gs.partitions.get(gs.worst) if gs is not None and gs.worst is not None else None
    wk = gs.worst if gs is not None else None
    summary = {
        "group": report.group, "state": report.state, "protocol_type": report.protocol_type,
        "members": None if report.members is None else len(report.members),
        "coordinator": report.coordinator, "assignment_strategy": report.assignment_strategy,
        "status": gs.status.value if gs else None, "complete": gs.complete if gs else None,
        "rule": rule_words(worst.reason) if worst else "",
        "decided_by": f"{wk.topic}-{wk.partition}" if worst is not None and wk is not None and hasattr(wk, "topic")
        else None,
        "total_lag": report.total_lag, "total_lag_estimated": report.total_lag_estimated,
        "estimated_partitions": sum(1 for r in rows if r.get("estimated_lag") is not None),
        "max_time_lag_ms": report.max_time_lag_ms,
        "max_time_lag_text": _max_time_lag_text(rows), "partitions": len(rows), "error": report.error,
        "active": report.state not in (None, "Empty", "Dead") and bool(report.members),
    }
    return {"summary": summary, "members": members, "partitions": parts, "anomalies": notes,
            "time_ms": now_ms}


def _reason_words(row: Mapping[str, Any]) -> str:
    """Why a best time lag is what it is, when it is not measured from a record: caught up
    at the markers, or a partition without a commit (an estimate)."""
    best = (row.get("time_lags") or {}).get(row.get("time_lag_method") or "", {})
    reason = best.get("reason") if isinstance(best, Mapping) else None
    if reason == "caught_up_at_markers":
        return " (caught up at markers)"
    if reason == "no_commit_estimate":
        return " (no commit: estimate)"
    return ""


def _all_time_lags(time_lags: Mapping[str, Mapping[str, Any]]) -> str:
    """Every method's answer on one line (the time-lag cell's tooltip), e.g.
    ``record_timestamp: 4.2 s (exact); interpolation: no answer (no_history)``."""
    parts = []
    for method, t in time_lags.items():
        if t["ms"] is None:
            parts.append(f"{method}: no answer ({t['reason'] or 'unknown'})")
        else:
            parts.append(f"{method}: {_certainty_mark(t['certainty'])}{fmt_ms(t['ms'])} ({t['certainty']})")
    return "; ".join(parts)


def _max_time_lag_text(rows: list[dict[str, Any]]) -> str:
    """The largest best time lag, marked as weak as its row's certainty."""
    best = [r for r in rows if r["time_lag_ms"] is not None]
    if not best:
        return "-"
    top = max(best, key=lambda r: r["time_lag_ms"])
    return _certainty_mark(top["time_lag_certainty"]) + fmt_ms(top["time_lag_ms"])


def group_list(consumer: Mapping[str, Any], share: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per group, consumer groups (from a Snapshot's ``groups``) and share groups
    (a ShareSnapshot's ``groups``), sorted by name."""
    out = []
    for name, rep in consumer.items():
        out.append({"group": name, "type": "consumer", "state": rep.state,
                    "members": None if rep.members is None else len(rep.members),
                    "status": rep.status.status.value if rep.status else None,
                    "partitions": len(rep.partitions), "total_lag": rep.total_lag,
                    "total_lag_estimated": rep.total_lag_estimated,
                    "max_time_lag_ms": rep.max_time_lag_ms, "max_time_lag_text": fmt_ms(rep.max_time_lag_ms),
                    "error": rep.error, "href": "/groups/" + quote(name, safe="")})
    for name, rep in (share or {}).items():
        st = getattr(rep, "status", None)
        out.append({"group": name, "type": "share", "state": rep.state, "members": rep.members,
                    "status": st.status.value if st is not None else None,
                    "partitions": len(rep.partitions), "total_lag": share_total_lag(rep),
                    "total_lag_estimated": False,
                    "max_time_lag_ms": None, "max_time_lag_text": "-", "error": rep.error,
                    "href": "/share-groups/" + quote(name, safe="")})
    out.sort(key=lambda r: (r["group"], r["type"]))
    return out


def share_group_view(report: Any) -> dict[str, Any]:
    """A share group page from a :class:`ShareGroupReport`: per share partition the start
    offset (SPSO), end offset, lag (None: unknown, '-'), in-flight records by state (None
    when the cluster does not serve ReadShareGroupState) and, when the report was judged
    (:func:`~hightide.monitoring.share_monitor.judge_share_groups`), status and rule; the
    summary's total lag is the consumer groups' (positive lags), its status the group's
    with the rule that decided it."""
    gs = getattr(report, "status", None)
    parts = []
    for p in report.partitions:
        c = p.counts
        st = gs.partitions.get((p.topic, p.partition)) if gs is not None else None
        parts.append({"topic": p.topic, "partition": p.partition, "start_offset": p.start_offset,
                      "end_offset": p.end_offset, "lag": p.lag,
                      "available": c.available if c else None, "acknowledged": c.acknowledged if c else None,
                      "archived": c.archived if c else None, "not_persisted": c.not_persisted if c else None,
                      "initialised": p.start_offset is not None,
                      "status": st.status.value if st is not None else None,
                      "rule": rule_words(st.reason, share=True) if st is not None else ""})
    worst = gs.partitions.get(gs.worst) if gs is not None and gs.worst is not None else None
    wk = gs.worst if gs is not None else None
    return {"summary": {"group": report.group, "state": report.state, "members": report.members,
                        "total_lag": share_total_lag(report), "partitions": len(parts), "error": report.error,
                        "counts_known": any(p["available"] is not None for p in parts),
                        "status": gs.status.value if gs is not None else None,
                        "complete": gs.complete if gs is not None else None,
                        "rule": rule_words(worst.reason, share=True) if worst is not None else "",
                        "decided_by": f"{wk[0]}-{wk[1]}" if worst is not None and isinstance(wk, tuple) else None},
            "partitions": parts}


GROUP_SORTS = ("name", "status", "lag", "time_lag", "type")
"""The groups list's sort keys (``?sort=``)."""
STATUS_FILTERS = ("all", "problems", "OK", "WARN", "REWIND", "STALL", "STOP", "ERR", "unknown")
"""The groups list's status filters (``?status=``): ``problems`` is every status but OK
(unknown included: a group that could not be judged)."""
_SEVERITY = {"OK": 0, "WARN": 1, "REWIND": 2, "STALL": 3, "STOP": 4, "ERR": 5}


def select_groups(rows: list[dict[str, Any]], *, sort: str = "name", desc: bool | None = None,
                  status: str = "all", name: str = "") -> list[dict[str, Any]]:
    """The rows of :func:`group_list` the groups page shows: those whose status matches
    ``status`` (:data:`STATUS_FILTERS`; ``unknown``: no status) and whose name contains
    ``name`` (case-insensitive), sorted by ``sort`` (:data:`GROUP_SORTS`; unknown values
    sort by name). ``desc`` None is each key's natural order: the worst first for status,
    lag and time lag (most severe, largest), a to z for name and type. Unknown values
    (``-``) sort last either way; ties go by name. Unknown ``status`` filters keep all."""
    needle = name.strip().lower()
    out = [r for r in rows if (not needle or needle in r["group"].lower())
           and (status in ("all", "") or status not in STATUS_FILTERS
                or (status == "problems" and r["status"] != "OK")
                or (status == "unknown" and r["status"] is None) or r["status"] == status)]
    value = {"status": lambda r: _SEVERITY.get(r["status"]) if r["status"] is not None else None,
             "lag": lambda r: r["total_lag"], "time_lag": lambda r: r["max_time_lag_ms"],
             "type": lambda r: r["type"]}.get(sort)
    if value is None:
        return sorted(out, key=lambda r: (r["group"], r["type"]), reverse=bool(desc))
    if desc is None:
        desc = sort != "type"
    known = sorted((r for r in out if value(r) is not None), key=lambda r: (r["group"], r["type"]))
    known.sort(key=value, reverse=desc)  # stable: ties stay by name
    return known + sorted((r for r in out if value(r) is None), key=lambda r: (r["group"], r["type"]))


def liveness(max_ts: int | None, now_ms: int, idle_after_ms: int, error: str | None = None) -> tuple[str, int | None]:
    """(status, idle ms) of a partition from its max-timestamp answer, with the rule of
    ``hightide topics liveness``: ERROR (no answer), EMPTY (no records), IDLE (no write
    for more than ``idle_after_ms``) or ACTIVE."""
    if error is not None:
        return "ERROR", None
    if max_ts is None or max_ts < 0:
        return "EMPTY", None
    idle = now_ms - max_ts
    return ("IDLE" if idle > idle_after_ms else "ACTIVE"), idle


def topic_view(topic: Any, ends: Mapping[int, Any], starts: Mapping[int, Any], maxts: Mapping[int, Any], *,
               now_ms: int, idle_after_ms: int, sizes: Mapping[int, int] | None = None) -> dict[str, Any]:
    """A topic page from its :class:`TopicMetadata` and ListOffsets answers per partition
    (latest, earliest, max_timestamp: a ListOffsetsResult or a KafkaError) and the log
    size of each partition (DescribeLogDirs: its leader's copy; missing: unknown)."""
    sizes = sizes or {}
    rows = []
    for pid in sorted(topic.partitions):
        pm = topic.partitions[pid]
        mx = maxts.get(pid)
        err = None if _is_result(mx) else str(mx)
        ts = mx.timestamp if _is_result(mx) and mx.timestamp >= 0 else None
        status, idle = liveness(ts, now_ms, idle_after_ms, err)
        rows.append({"partition": pid, "leader": pm.leader, "replicas": list(pm.replicas), "isr": list(pm.isr),
                     "log_start_offset": _off(starts.get(pid)), "log_end_offset": _off(ends.get(pid)),
                     "max_timestamp_offset": mx.offset if _is_result(mx) and mx.offset >= 0 else None,
                     "last_write_ms": ts, "last_write_text": fmt_time(ts), "idle_ms": idle,
                     "idle_text": fmt_ms(idle), "status": status, "error": err,
                     "size_bytes": sizes.get(pid), "size_text": fmt_bytes(sizes.get(pid))})
    ends_known = [r["log_end_offset"] for r in rows if r["log_end_offset"] is not None]
    size = _sum_known(r["size_bytes"] for r in rows)
    return {"topic": topic.name, "internal": topic.is_internal, "topic_id": str(topic.topic_id or ""),
            "partitions": rows, "records_end_sum": sum(ends_known), "size_bytes": size, "size_text": fmt_bytes(size),
            "liveness": _count(r["status"] for r in rows)}


def topic_list(topics: Iterable[Any], ends: Mapping[Any, Any], maxts: Mapping[Any, Any], *, now_ms: int,
               idle_after_ms: int, sizes: Mapping[Any, int] | None = None) -> list[dict[str, Any]]:
    """One row per topic: partitions, sum of end offsets, size (the sum of its partitions'
    log sizes, ``sizes`` keyed like ``ends``; None when none is known), last write over
    its partitions and liveness counts. ``ends``/``maxts`` are keyed by TopicPartition."""
    sizes = sizes or {}
    out = []
    for t in sorted(topics, key=lambda t: t.name):
        last, sts, end_sum = None, [], 0
        for pid in t.partitions:
            key = (t.name, pid)
            e = _off(ends.get(key))
            end_sum += e or 0
            mx = maxts.get(key)
            ts = mx.timestamp if _is_result(mx) and mx.timestamp >= 0 else None
            if ts is not None and (last is None or ts > last):
                last = ts
            sts.append(liveness(ts, now_ms, idle_after_ms, None if _is_result(mx) else str(mx))[0])
        size = _sum_known(sizes.get((t.name, pid)) for pid in t.partitions)
        out.append({"topic": t.name, "partitions": len(t.partitions), "internal": t.is_internal,
                    "records_end_sum": end_sum, "size_bytes": size, "size_text": fmt_bytes(size), "last_write_text": fmt_time(last),
                    "idle_text": fmt_ms(None if last is None else now_ms - last), "liveness": _count(sts)})
    return out


def _sum_known(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in items:
        out[s] = out.get(s, 0) + 1
    return dict(sorted(out.items()))


def _is_result(r: Any) -> TypeGuard[ListOffsetsResult]:
    """True for a ListOffsets answer (a partition's failure is a KafkaError instead)."""
    return isinstance(r, ListOffsetsResult)


def _off(r: Any) -> int | None:
    return r.offset if _is_result(r) and r.offset >= 0 else None
