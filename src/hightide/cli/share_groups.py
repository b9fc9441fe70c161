"""``hightide share-groups ...``: share groups (KIP-932) like ``kafka-share-groups.sh``.

``list``, ``describe GROUP [--offsets|--members|--state]`` (offsets: GROUP TOPIC PARTITION
START-OFFSET LAG, '-' where unknown — an uninitialised share partition or a broker without
DescribeShareGroupOffsets v1; ``--scale-hint TARGET``: the share consumers to run,
ceil(share lag / TARGET)), ``reset-offsets`` (dry run unless ``--execute``) and
``delete-offsets``; both need an empty share group, as in Kafka.
"""

from __future__ import annotations

from typing import Any

import click

from ..lag.share import desired_consumers, group_share_lag
from . import main
from ._common import Col, ResetSpec, admin_options, emit, reset_options, run_admin

OFFSET_COLS = [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
               Col("START-OFFSET", "start_offset"), Col("LAG", "lag")]


@main.group("share-groups")
def share_groups() -> None:
    """Share groups: list, describe with lag, reset and delete offsets."""


@share_groups.command("list")
@admin_options
@click.option("--state", "states", multiple=True, help="Only groups in this state (repeatable, e.g. Stable).")
def share_groups_list(bootstrap_server: str, output: str, states: tuple[str, ...]) -> None:
    """Share groups known to the cluster (ListGroups with type filter 'share')."""
    wanted = {s.lower() for s in states}

    async def go(admin: Any) -> list[dict[str, Any]]:
        return [{"group": g.group_id, "state": g.state} for g in await admin.list_share_groups()
                if not wanted or (g.state or "").lower() in wanted]
    emit(output, [Col("GROUP", "group"), Col("STATE", "state")], run_admin(bootstrap_server, go))


def offset_rows(group_id: str, offsets: dict[Any, Any]) -> list[dict[str, Any]]:
    """kafka-share-groups.sh --describe --offsets rows: start offset and lag, None ('-')
    when unknown."""
    return [{"group": group_id, "topic": tp.topic, "partition": tp.partition,
             "start_offset": o.start_offset if o.start_offset >= 0 else None,
             "leader_epoch": o.leader_epoch if o.start_offset >= 0 else None,
             "lag": o.lag, "error": str(o.error) if o.error else None}
            for tp, o in sorted(offsets.items())]


SCALE_COLS = [Col("GROUP", "group"), Col("SHARE-LAG", "lag"), Col("TARGET-PER-CONSUMER", "target"),
              Col("MEMBERS", "members"), Col("DESIRED-CONSUMERS", "desired")]


def scale_row(group_id: str, members: int, offsets: dict[Any, Any], target: int | None) -> dict[str, Any]:
    """``--scale-hint``: the group's share lag (sum over its share partitions, '-' when
    none is known), its members and ``desired consumers = ceil(share lag / target)``."""
    lag = group_share_lag(o.lag for o in offsets.values())
    return {"group": group_id, "lag": lag, "target": target, "members": members,
            "desired": desired_consumers(lag, target or 1)}


def _assignment(tps: tuple[Any, ...]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in by_topic.items())) or None


@share_groups.command("describe")
@admin_options
@click.argument("group_ids", nargs=-1, required=True)
@click.option("--offsets", "view", flag_value="offsets", default=True, help="Start offset and lag per partition (default).")
@click.option("--members", "view", flag_value="members", help="Members and their assignments.")
@click.option("--state", "view", flag_value="state", help="State, coordinator and member count.")
@click.option("--verbose", is_flag=True, help="Also leader epochs (offsets), member epochs (members), group and "
              "assignment epochs (state), as kafka-share-groups.sh --verbose.")
@click.option("--scale-hint", "scale_target", type=click.IntRange(min=1), metavar="TARGET",
              help="Instead: the share consumers to run, ceil(share lag / TARGET), TARGET being the share lag one "
                   "consumer should carry (hightide).")
def share_groups_describe(bootstrap_server: str, output: str, group_ids: tuple[str, ...], view: str,
                          verbose: bool, scale_target: int | None) -> None:
    """Describe share groups like kafka-share-groups.sh --describe."""
    if scale_target is not None:
        view = "scale"
    notes: list[str] = []
    missing: list[str] = []

    async def go(admin: Any) -> list[dict[str, Any]]:
        from ..client import KafkaError
        from ..client.errors import ErrorCode
        rows: list[dict[str, Any]] = []
        for g in group_ids:
            try:
                desc = await admin.describe_share_group(g)  # GROUP_ID_NOT_FOUND for non-share groups
            except KafkaError as exc:
                if exc.code != ErrorCode.group_id_not_found:
                    raise
                missing.append(await _not_a_share_group(admin, g))
                continue
            if not desc.members and view != "offsets":
                notes.append(f"Share group '{g}' has no active members.")
            if view == "scale":
                rows.append(scale_row(g, len(desc.members), await admin.list_share_group_offsets(g), scale_target))
            elif view == "offsets":
                rows += offset_rows(g, await admin.list_share_group_offsets(g))
            elif view == "members":
                rows += [{"group": g, "consumer_id": m.member_id, "host": m.client_host, "client_id": m.client_id,
                          "partitions": len(m.assignment), "member_epoch": m.member_epoch,
                          "assignment": _assignment(m.assignment)} for m in desc.members]
            else:
                c = await admin.find_coordinator(g)
                rows.append({"group": g, "coordinator": f"{c.host}:{c.port} ({c.node_id})", "state": desc.state,
                             "group_epoch": desc.group_epoch, "assignment_epoch": desc.assignment_epoch,
                             "members": len(desc.members)})
        return rows
    rows = run_admin(bootstrap_server, go)
    if view == "scale":
        cols = SCALE_COLS
    elif view == "members":
        cols = [Col("GROUP", "group"), Col("CONSUMER-ID", "consumer_id"), Col("HOST", "host"),
                Col("CLIENT-ID", "client_id"), Col("#PARTITIONS", "partitions"),
                *([Col("MEMBER-EPOCH", "member_epoch")] if verbose else []), Col("ASSIGNMENT", "assignment")]
    elif view == "state":
        cols = [Col("GROUP", "group"), Col("COORDINATOR (ID)", "coordinator"), Col("STATE", "state"),
                *([Col("GROUP-EPOCH", "group_epoch"), Col("ASSIGNMENT-EPOCH", "assignment_epoch")] if verbose else []),
                Col("#MEMBERS", "members")]
    elif verbose:
        cols = [*OFFSET_COLS[:3], Col("LEADER-EPOCH", "leader_epoch"), *OFFSET_COLS[3:]]
    else:
        cols = OFFSET_COLS
    if rows or not missing:
        emit(output, cols, rows)
    for note in notes + missing:
        click.echo(note, err=True)
    if missing:
        raise SystemExit(1)


async def _not_a_share_group(admin: Any, group_id: str) -> str:
    """The message for a group ShareGroupDescribe does not know (kafka-share-groups.sh's
    wording), with a pointer to ``groups`` when it is a consumer group."""
    kinds = {g.group_id: g.group_type for g in await admin.list_groups()}
    kind = kinds.get(group_id)
    if kind in ("consumer", "classic"):
        return f"Group '{group_id}' is a consumer group: use 'hightide groups describe {group_id}'."
    return f"Share group '{group_id}' does not exist."


@share_groups.command("reset-offsets")
@admin_options
@click.argument("group_id")
@reset_options
def share_groups_reset_offsets(bootstrap_server: str, output: str, group_id: str, topics: tuple[str, ...],
                               all_topics: bool, to: str | None, to_datetime: str | None, to_offset: int | None,
                               execute: bool) -> None:
    """Reset GROUP_ID's share-partition start offsets (the share group must be empty)."""
    spec = ResetSpec(topics, all_topics, to, to_datetime, to_offset)
    spec.check()

    async def go(admin: Any) -> list[dict[str, Any]]:
        desc = await admin.describe_share_group(group_id)
        if desc.state not in ("Empty", "Dead"):
            raise click.ClickException(f"Share group '{group_id}' is not empty.")
        current = await admin.list_share_group_offsets(group_id)
        new = await spec.targets(admin, list(current))
        if execute and new:
            await admin.alter_share_group_offsets(group_id, new)
        return [{"group": group_id, "topic": tp.topic, "partition": tp.partition,
                 "start_offset": current[tp].start_offset if tp in current and current[tp].start_offset >= 0
                 else None, "new_offset": off, "applied": execute} for tp, off in new.items()]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
                  Col("START-OFFSET", "start_offset"), Col("NEW-OFFSET", "new_offset")], rows)
    if not execute:
        click.echo("Dry run: nothing changed. Add --execute to apply.", err=True)


@share_groups.command("delete-offsets")
@admin_options
@click.argument("group_id")
@click.option("--topic", "topics", multiple=True, required=True, help="A topic whose share state to delete (repeatable).")
def share_groups_delete_offsets(bootstrap_server: str, output: str, group_id: str, topics: tuple[str, ...]) -> None:
    """Delete GROUP_ID's share-partition state of whole topics (the share group must be empty)."""
    async def go(admin: Any) -> list[dict[str, Any]]:
        res = await admin.delete_share_group_offsets(group_id, list(topics), raise_on_error=False)
        return [{"group": group_id, "topic": t, "result": "Successful" if res.get(t) is None else f"Error: {res[t]}"}
                for t in sorted(res)]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("STATUS", "result")], rows)
    if any(r["result"] != "Successful" for r in rows):
        raise SystemExit(1)
