"""``hightide groups ...``: list, describe (offsets, members, state), reset and delete offsets."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from ..lag.timelag import CAUGHT_UP_AT_MARKERS
from . import main
from ._common import (
    Col,
    ResetSpec,
    admin_options,
    assume_reset_option,
    emit,
    parse_topic_partitions,
    reset_options,
    run_admin,
    seconds,
)

OFFSET_COLS = [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
               Col("CURRENT-OFFSET", "current_offset"), Col("LOG-END-OFFSET", "log_end_offset"),
               Col("LAG", "lag"), Col("CONSUMER-ID", "consumer_id", drop=3), Col("HOST", "host", drop=4),
               Col("CLIENT-ID", "client_id", drop=5), Col("TIME-LAG", "time_lag_ms", seconds, drop=1),
               Col("STATUS", "status"), Col("NOTE", "note", drop=2)]
"""kafka-consumer-groups.sh --describe's columns plus TIME-LAG, STATUS and NOTE. In a narrow
terminal CLIENT-ID, HOST, CONSUMER-ID, NOTE and TIME-LAG are hidden in that order; the
others are never hidden nor cut."""


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


def _transaction_notes(ol: Any) -> list[str]:
    """NOTE texts for transactions: records held back by an open transaction (beyond the
    LSO) and a commit that only transaction markers separate from the end."""
    notes = []
    if ol.pending:
        notes.append(f"{ol.pending} pending in open transaction(s)")
    if ol.invisible_tail:
        notes.append(f"caught up: {ol.invisible_tail} marker/aborted offset(s) after the commit")
    return notes


def with_pending(cols: list[Col], rows: list[dict[str, Any]]) -> list[Col]:
    """``cols`` with a PENDING column after LAG when a row has records pending in an open
    transaction (offsets past the LSO: not in a read_committed group's lag)."""
    if not any(r.get("pending") for r in rows):
        return cols
    i = next(i for i, c in enumerate(cols) if c.key == "lag") + 1
    return [*cols[:i], Col("PENDING", "pending", drop=1), *cols[i:]]


def offset_rows(report: Any) -> list[dict[str, Any]]:
    """kafka-consumer-groups.sh --describe rows (plus time lag and status) of a GroupReport."""
    rows = []
    for p in report.partitions:
        tl = p.time_lag
        estimated = p.offsets.estimated_lag  # no commit: lag and time lag from where the group would start
        notes = [a.value for a in p.offsets.anomalies if estimated is None or a.value != "no_commit"]
        if estimated is not None:
            notes.insert(0, f"no_commit: estimated lag {estimated}")
        if p.error:
            notes.append(p.error.lower())
        if tl is not None and tl.certainty != "exact" and estimated is None:
            notes.append(f"time-lag {tl.certainty} ({tl.method})")
        notes += _transaction_notes(p.offsets)
        if tl is not None and tl.reason == CAUGHT_UP_AT_MARKERS:
            notes.append("time-lag 0: caught up at markers")
        rows.append({
            "group": p.group, "topic": p.topic, "partition": p.partition,
            "current_offset": p.offsets.committed, "log_end_offset": p.offsets.end_offset,
            "log_start_offset": p.offsets.log_start_offset, "lag": p.lag,
            "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
            "pending": p.offsets.pending, "invisible_tail": p.offsets.invisible_tail,
            "estimated_lag": p.offsets.estimated_lag,
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


def _state_row(report: Any, coordinator: str | None) -> dict[str, Any]:
    return {"group": report.group, "coordinator": coordinator, "coordinator_id": report.coordinator,
            "assignment_strategy": report.assignment_strategy,
            "state": report.state, "members": None if report.members is None else len(report.members),
            "status": report.status.status.value if report.status else None,
            "total_lag": report.total_lag, "total_lag_estimated": report.total_lag_estimated,
            "max_time_lag_ms": report.max_time_lag_ms, "error": report.error}


def _total_lag(state: dict[str, Any]) -> str:
    """TOTAL-LAG as shown: '-' unknown, 'N (est.)' when it counts partitions without a
    commit (their lag estimated from where the group would start: docs/lag.md)."""
    if state["total_lag"] is None:
        return "-"
    return f"{state['total_lag']} (est.)" if state["total_lag_estimated"] else str(state["total_lag"])


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
@assume_reset_option
def groups_describe(bootstrap_server: str, output: str, group_ids: tuple[str, ...], view: str,
                    samples: int, interval: float, isolation: str, assume_reset: str) -> None:
    """Describe GROUP_IDS like kafka-consumer-groups.sh --describe, plus TIME-LAG and STATUS."""
    from ..lag import StatusRules
    from ..monitoring.monitor import LagMonitor
    rules = StatusRules(window_ms=max(1, int(samples * interval * 1000) + 1000), min_samples=max(1, samples))

    progress = Progress(samples)

    async def go(admin: Any) -> Any:
        mon = LagMonitor(admin, rules=rules, isolation_level=isolation, uncommitted_reset=assume_reset)
        snap = await mon.snapshot(list(group_ids))
        for i in range(samples - 1):
            progress.show(i + 1, interval)
            await asyncio.sleep(interval)
            snap = await mon.snapshot(list(group_ids))
        progress.done()
        missing = [g for g in group_ids if _does_not_exist(snap.groups[g])]
        types = {x.group_id: x.group_type for x in await admin.list_groups()} if missing else {}
        coordinators = {}
        if view == "state":  # as kafka-consumer-groups.sh (and share-groups --state): HOST:PORT (ID)
            for g in group_ids:
                if g not in missing:
                    c = await admin.find_coordinator(g)
                    coordinators[g] = f"{c.host}:{c.port} ({c.node_id})"
        return snap, {g: types.get(g) for g in missing}, coordinators
    snap, missing, coordinators = run_admin(bootstrap_server, go)
    reports = [snap.groups[g] for g in group_ids if g not in missing]
    if not reports:
        pass  # nothing to show: only the messages below
    elif view == "members":
        rows = [r for rep in reports for r in _member_rows(rep)]
        emit(output, [Col("GROUP", "group"), Col("CONSUMER-ID", "consumer_id"), Col("HOST", "host"),
                      Col("CLIENT-ID", "client_id"), Col("#PARTITIONS", "partitions")], rows)
    elif view == "state":
        states = [_state_row(r, coordinators.get(r.group)) for r in reports]
        emit(output, [Col("GROUP", "group"), Col("COORDINATOR (ID)", "coordinator", drop=2),
                      Col("ASSIGNMENT-STRATEGY", "assignment_strategy", drop=3), Col("STATE", "state"),
                      Col("#MEMBERS", "members"), Col("STATUS", "status"), Col("TOTAL-LAG", "total_lag_shown"),
                      Col("MAX-TIME-LAG", "max_time_lag_ms", seconds, drop=1)],
             [{**r, "total_lag_shown": _total_lag(r)} for r in states], json_doc=states)
    else:
        rows = [r for rep in reports for r in offset_rows(rep)]
        emit(output, with_pending(OFFSET_COLS, rows), rows)
        for rep in reports:
            if rep.error:
                click.echo(f"Error describing group {rep.group!r}: {rep.error}", err=True)
            elif not rep.partitions:
                click.echo(f"Consumer group '{rep.group}' has no active members and no committed offsets.",
                           err=True)
    for g, group_type in missing.items():
        if group_type == "share":
            click.echo(f"Group '{g}' is a share group: use 'hightide share-groups describe {g}'.", err=True)
        elif group_type:
            click.echo(f"Group '{g}' is a {group_type} group, not a consumer group.", err=True)
        else:
            click.echo(f"Consumer group '{g}' does not exist.", err=True)
    if missing:
        raise SystemExit(1)


def _does_not_exist(report: Any) -> bool:
    """True when ``report`` is of no consumer group: no description (GROUP_ID_NOT_FOUND or
    state Dead), no commits and no members — Kafka's tool says "does not exist" then.
    A share group also lands here (DescribeGroups and OffsetFetch refuse it)."""
    if report.partitions or report.members:
        return False
    return report.state == "Dead" or (report.error is not None and "GROUP_ID_NOT_FOUND" in report.error)


class Progress:
    """``sample i/N`` on stderr while ``--samples`` waits, only when stderr is a terminal
    (the line is rewritten in place and erased at the end)."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.shown = sys.stderr.isatty() and samples > 1

    def show(self, taken: int, interval: float) -> None:
        if self.shown:
            left = (self.samples - taken) * interval
            sys.stderr.write(f"\rsample {taken}/{self.samples} taken, {left:.0f}s left ... ")
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


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
    warnings: list[str] = []

    async def go(admin: Any) -> list[dict[str, Any]]:
        state = await _active_state(admin, group_id)
        if state is not None:
            if execute:  # Kafka's ConsumerGroupCommand message
                raise click.ClickException(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                                           f"but the current state is {state}.")
            warnings.append(f"Warning: group '{group_id}' has active members (state {state}): --execute will fail "
                            f"until they stop.")
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
    for w in warnings:
        click.echo(w, err=True)


async def _active_state(admin: Any, group_id: str) -> str | None:
    """The group's state when it is active (offsets cannot be reset then: Kafka allows a
    reset only in Empty or Dead), else None (inactive, unknown, or not describable)."""
    from ..client import KafkaError
    desc = (await admin.describe_groups([group_id], raise_on_error=False)).get(group_id)
    if desc is None or isinstance(desc, KafkaError) or desc.state in ("Empty", "Dead"):
        return None
    return desc.state


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
                parts = await _partitions_to_delete(admin, group_id, topic)
            tps += [TopicPartition(topic, p) for p in parts]
        res = await admin.delete_consumer_group_offsets(group_id, tps, raise_on_error=False) if tps else {}
        return [{"group": group_id, "topic": tp.topic, "partition": tp.partition,
                 "result": "deleted" if res.get(tp) is None else str(res[tp])} for tp in tps]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
                  Col("RESULT", "result")], rows)
    if any(r["result"] != "deleted" for r in rows):
        raise SystemExit(1)


async def _partitions_to_delete(admin: Any, group_id: str, topic: str) -> list[int]:
    """The partitions of ``topic`` the group has offsets for (even if the topic was
    deleted since); else every partition of the topic. Raises a click error when the
    topic does not exist and the group has nothing for it."""
    from ..client import KafkaError
    from ..client.errors import ErrorCode
    current = await admin.list_consumer_group_offsets(group_id)
    parts = sorted(tp.partition for tp in current if tp.topic == topic)
    if parts:
        return parts
    try:
        return sorted((await admin.describe_topics([topic]))[topic].partitions)
    except KafkaError as exc:
        if exc.code == ErrorCode.unknown_topic_or_partition:
            raise click.ClickException(f"Topic '{topic}' does not exist (and group '{group_id}' has no "
                                       f"offsets for it).") from None
        raise
