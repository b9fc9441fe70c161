"""``hightide groups ...``: list, describe (offsets, members, state), reset and delete offsets."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from . import main
from ._common import (
    Col,
    ResetSpec,
    admin_options,
    emit,
    parse_topic_partitions,
    reset_options,
    run_admin,
    seconds,
)

OFFSET_COLS = [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
               Col("CURRENT-OFFSET", "current_offset"), Col("LOG-END-OFFSET", "log_end_offset"),
               Col("LAG", "lag"), Col("CONSUMER-ID", "consumer_id"), Col("HOST", "host"),
               Col("CLIENT-ID", "client_id"), Col("TIME-LAG", "time_lag_ms", seconds),
               Col("STATUS", "status"), Col("NOTE", "note")]


@main.group()
def groups() -> None:
    """Consumer groups: list, describe with lag, reset and delete offsets."""


@groups.command("list")
@admin_options
@click.option("--state", "states", multiple=True, help="Only groups in this state (repeatable).")
def groups_list(bootstrap_server: str, output: str, states: tuple[str, ...]) -> None:
    """Groups known to the cluster (ListGroups on every broker)."""
    async def go(admin: Any) -> list[dict[str, Any]]:
        return [{"group": g.group_id, "state": g.state, "type": g.group_type,
                 "protocol_type": g.protocol_type or None}
                for g in await admin.list_groups(list(states) or None)]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("GROUP", "group"), Col("STATE", "state"), Col("TYPE", "type"),
                  Col("PROTOCOL-TYPE", "protocol_type")], rows)


def offset_rows(report: Any) -> list[dict[str, Any]]:
    """kafka-consumer-groups.sh --describe rows (plus time lag and status) of a GroupReport."""
    rows = []
    for p in report.partitions:
        tl = p.time_lag
        notes = [a.value for a in p.offsets.anomalies]
        if p.error:
            notes.append(p.error.lower())
        if tl is not None and tl.certainty != "exact":
            notes.append(f"time-lag {tl.certainty} ({tl.method})")
        rows.append({
            "group": p.group, "topic": p.topic, "partition": p.partition,
            "current_offset": p.offsets.committed, "log_end_offset": p.offsets.end_offset,
            "log_start_offset": p.offsets.log_start_offset, "lag": p.lag,
            "consumer_id": p.member.consumer_id if p.member else None,
            "host": p.member.host if p.member else None,
            "client_id": p.member.client_id if p.member else None,
            "time_lag_ms": tl.ms if tl else None,
            "time_lag_method": tl.method.value if tl else None,
            "time_lag_certainty": tl.certainty.value if tl else None,
            "time_lags": {t.method.value: {"ms": t.ms, "certainty": t.certainty.value, "reason": t.reason}
                          for t in p.time_lags},
            "status": p.status.status.value if p.status else None,
            "status_reason": p.status.reason if p.status else None,
            "anomalies": [a.value for a in p.offsets.anomalies],
            "source": p.source,
            "note": "; ".join(notes) or None,
        })
    return rows


def _member_rows(report: Any) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    for p in report.partitions:
        if p.member is not None:
            counts[p.member.consumer_id] = counts.get(p.member.consumer_id, 0) + 1
    return [{"group": report.group, "consumer_id": m.consumer_id, "host": m.host, "client_id": m.client_id,
             "partitions": counts.get(m.consumer_id, 0)} for m in report.members or ()]


def _state_row(report: Any) -> dict[str, Any]:
    return {"group": report.group, "coordinator": report.coordinator, "assignment_strategy": report.assignment_strategy,
            "state": report.state, "members": None if report.members is None else len(report.members),
            "status": report.status.status.value if report.status else None,
            "total_lag": report.total_lag, "max_time_lag_ms": report.max_time_lag_ms, "error": report.error}


@groups.command("describe")
@admin_options
@click.argument("group_ids", nargs=-1, required=True)
@click.option("--offsets", "view", flag_value="offsets", default=True, help="Per-partition lag (default).")
@click.option("--members", "view", flag_value="members", help="Members and their partition counts.")
@click.option("--state", "view", flag_value="state", help="State, coordinator, status and total lag.")
@click.option("--samples", type=int, default=1, show_default=True,
              help="Snapshots to take for the status window (STATUS needs several to say more than OK/ERR).")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted",
              help="read_committed measures lag to the last stable offset.")
def groups_describe(bootstrap_server: str, output: str, group_ids: tuple[str, ...], view: str,
                    samples: int, interval: float, isolation: str) -> None:
    """Describe GROUP_IDS like kafka-consumer-groups.sh --describe, plus TIME-LAG and STATUS."""
    from ..lag import StatusRules
    from ..monitoring.monitor import LagMonitor
    rules = StatusRules(window_ms=max(1, int(samples * interval * 1000) + 1000), min_samples=max(1, samples))

    async def go(admin: Any) -> Any:
        mon = LagMonitor(admin, rules=rules, isolation_level=isolation)
        snap = await mon.snapshot(list(group_ids))
        for _ in range(samples - 1):
            await asyncio.sleep(interval)
            snap = await mon.snapshot(list(group_ids))
        return snap
    snap = run_admin(bootstrap_server, go)
    reports = [snap.groups[g] for g in group_ids]
    if view == "members":
        rows = [r for rep in reports for r in _member_rows(rep)]
        emit(output, [Col("GROUP", "group"), Col("CONSUMER-ID", "consumer_id"), Col("HOST", "host"),
                      Col("CLIENT-ID", "client_id"), Col("#PARTITIONS", "partitions")], rows)
    elif view == "state":
        emit(output, [Col("GROUP", "group"), Col("COORDINATOR (ID)", "coordinator"),
                      Col("ASSIGNMENT-STRATEGY", "assignment_strategy"), Col("STATE", "state"),
                      Col("#MEMBERS", "members"), Col("STATUS", "status"), Col("TOTAL-LAG", "total_lag"),
                      Col("MAX-TIME-LAG", "max_time_lag_ms", seconds)], [_state_row(r) for r in reports])
    else:
        rows = [r for rep in reports for r in offset_rows(rep)]
        emit(output, OFFSET_COLS, rows)
        for rep in reports:
            if rep.error:
                click.echo(f"Error describing group {rep.group!r}: {rep.error}", err=True)
            elif not rep.partitions:
                click.echo(f"Consumer group {rep.group!r} has no committed offsets and no members.", err=True)


@groups.command("reset-offsets")
@admin_options
@click.argument("group_id")
@reset_options
def groups_reset_offsets(bootstrap_server: str, output: str, group_id: str, topics: tuple[str, ...],
                         all_topics: bool, to: str | None, to_datetime: str | None, to_offset: int | None,
                         execute: bool) -> None:
    """Reset GROUP_ID's committed offsets (the group must have no active members)."""
    spec = ResetSpec(topics, all_topics, to, to_datetime, to_offset)
    spec.check()

    async def go(admin: Any) -> list[dict[str, Any]]:
        current = await admin.list_consumer_group_offsets(group_id)
        new = await spec.targets(admin, list(current))
        if execute and new:
            await admin.alter_consumer_group_offsets(group_id, new)
        return [{"group": group_id, "topic": tp.topic, "partition": tp.partition,
                 "current_offset": current[tp].offset if tp in current and current[tp].offset >= 0 else None,
                 "new_offset": off, "applied": execute} for tp, off in new.items()]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
                  Col("CURRENT-OFFSET", "current_offset"), Col("NEW-OFFSET", "new_offset")], rows)
    if not execute:
        click.echo("Dry run: nothing changed. Add --execute to apply.", err=True)


@groups.command("delete-offsets")
@admin_options
@click.argument("group_id")
@click.option("--topic", "topics", multiple=True, required=True, help="TOPIC or TOPIC:P1,P2 (repeatable).")
def groups_delete_offsets(bootstrap_server: str, output: str, group_id: str, topics: tuple[str, ...]) -> None:
    """Delete GROUP_ID's committed offsets for topics or partitions (OffsetDelete)."""
    async def go(admin: Any) -> list[dict[str, Any]]:
        from ..client import TopicPartition
        tps = []
        for topic, parts in parse_topic_partitions(topics):
            if parts is None:
                current = await admin.list_consumer_group_offsets(group_id)
                parts = sorted(tp.partition for tp in current if tp.topic == topic)
            tps += [TopicPartition(topic, p) for p in parts]
        res = await admin.delete_consumer_group_offsets(group_id, tps, raise_on_error=False) if tps else {}
        return [{"group": group_id, "topic": tp.topic, "partition": tp.partition,
                 "result": "deleted" if res.get(tp) is None else str(res[tp])} for tp in tps]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
                  Col("RESULT", "result")], rows)
    if any(r["result"] != "deleted" for r in rows):
        raise SystemExit(1)
