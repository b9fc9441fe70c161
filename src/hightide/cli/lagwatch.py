"""``hightide lag watch``: a live view of lag, time lag and status per group."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import click

from . import main
from ._common import Col, admin_options, assume_reset_option, print_table, run_admin, seconds
from .groups import offset_rows, with_pending

WATCH_COLS = [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
              Col("CURRENT-OFFSET", "current_offset"), Col("LOG-END-OFFSET", "log_end_offset"),
              Col("LAG", "lag"), Col("TIME-LAG", "time_lag_ms", seconds, drop=1), Col("STATUS", "status"),
              Col("NOTE", "note", drop=2)]


@main.group("lag")
def lag_group() -> None:
    """Consumer lag views."""


def share_rows(share: Any) -> list[dict[str, Any]]:
    """``lag watch`` rows of a share snapshot's groups: CURRENT-OFFSET is the share-partition
    start offset (SPSO), LAG the share-partition lag (``-`` while uninitialised)."""
    return [r for g, rep in sorted((share.groups if share is not None else {}).items())
            for r in _share_group_rows(g, rep)]


def _share_group_rows(g: str, rep: Any) -> list[dict[str, Any]]:
    rows = [{"group": g, "type": "share", "topic": p.topic, "partition": p.partition,
             "current_offset": p.start_offset, "log_end_offset": p.end_offset, "lag": p.lag,
             "time_lag_ms": None, "status": None,
             "note": "share group" + ("" if p.start_offset is not None else "; not initialised")}
            for p in rep.partitions]
    if rep.error:
        rows.append({"group": g, "type": "share", "topic": None, "partition": None, "current_offset": None,
                     "log_end_offset": None, "lag": None, "time_lag_ms": None, "status": None, "note": rep.error})
    return rows


def share_doc(share: Any) -> dict[str, Any]:
    """A share snapshot's groups as JSON (``lag watch -o json``'s ``share_groups``)."""
    out = {}
    for g, rep in sorted((share.groups if share is not None else {}).items()):
        lags = [p.lag for p in rep.partitions if p.lag is not None]
        out[g] = {"state": rep.state, "members": rep.members, "error": rep.error,
                  "total_lag": sum(x for x in lags if x > 0) if lags else None,
                  "partitions": [r for r in _share_group_rows(g, rep) if r["topic"] is not None]}
    return out


def snapshot_doc(snap: Any, share: Any = None) -> dict[str, Any]:
    """A snapshot as a JSON-able document (used by ``lag watch -o json``); ``share``: the
    share groups' snapshot (``share_groups``), if any."""
    return {"time_ms": snap.time_ms, "round_trips": snap.round_trips, "share_groups": share_doc(share),
            "duration_s": round(snap.duration_s, 4),
            "groups": {g: {"state": r.state, "status": r.status.status.value if r.status else None,
                           "complete": r.status.complete if r.status else None,
                           "total_lag": r.total_lag, "total_lag_estimated": r.total_lag_estimated,
                           "max_time_lag_ms": r.max_time_lag_ms,
                           "error": r.error, "partitions": offset_rows(r)}
                       for g, r in sorted(snap.groups.items())}}


@lag_group.command("watch")
@admin_options
@click.argument("group_ids", nargs=-1)
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between refreshes.")
@click.option("--iterations", type=int, default=0, help="Stop after this many refreshes (0: until Ctrl-C).")
@click.option("--window", type=float, default=60.0, show_default=True, help="Status window in seconds.")
@click.option("--min-samples", type=int, default=5, show_default=True, help="Samples for a complete window.")
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted",
              help="read_committed measures lag to the last stable offset (records of open transactions: PENDING).")
@assume_reset_option
def lag_watch(bootstrap_server: str, output: str, group_ids: tuple[str, ...], interval: float, iterations: int,
              window: float, min_samples: int, isolation: str, assume_reset: str) -> None:
    """Refresh lag of GROUP_IDS (default: all groups) every --interval seconds.

    With ``-o json`` prints one JSON document per refresh, one per line.
    """
    from ..lag import StatusRules
    from ..monitoring.monitor import LagMonitor
    rules = StatusRules(window_ms=int(window * 1000), min_samples=min_samples)

    from ..monitoring.share_monitor import share_snapshot

    async def go(admin: Any) -> None:
        mon = LagMonitor(admin, rules=rules, isolation_level=isolation, uncommitted_reset=assume_reset)
        screen = output == "table" and sys.stdout.isatty()
        consumer: list[str] | None = None
        shares: list[str] | None = None
        if group_ids:  # share groups named are watched as share groups, not as empty consumer groups
            kinds = {g.group_id: g.group_type for g in await admin.list_groups()}
            shares = [g for g in group_ids if kinds.get(g) == "share"]
            consumer = [g for g in group_ids if kinds.get(g) != "share"]
        n = 0
        while True:
            started = time.monotonic()
            snap = await mon.snapshot(consumer)
            share = await share_snapshot(admin, shares) if shares is None or shares else None
            n += 1
            if output == "json":
                click.echo(json.dumps(snapshot_doc(snap, share)))
            else:
                _print_refresh(snap, n, screen, share)
            if iterations and n >= iterations:
                return
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    try:
        run_admin(bootstrap_server, go)
    except KeyboardInterrupt:
        pass


def _print_refresh(snap: Any, n: int, screen: bool, share: Any = None) -> None:
    """One refresh: on a terminal the screen is redrawn in place; otherwise (a pipe, a
    file) every refresh is printed in full, one after the other, each ending in a newline.
    Share groups follow the consumer groups (their state in the heading)."""
    rows = [r for g in sorted(snap.groups) for r in offset_rows(snap.groups[g])] + share_rows(share)
    statuses = ", ".join([f"{g}={r.status.status.value if r.status else '-'}" for g, r in sorted(snap.groups.items())]
                         + [f"{g}=share:{r.state or '-'}" for g, r in sorted((share.groups if share else {}).items())])
    ngroups = len(snap.groups) + (len(share.groups) if share else 0)
    head = (f"refresh {n} · {ngroups} groups · {snap.round_trips} round trips · "
            f"{snap.duration_s * 1000:.0f} ms · {statuses}")
    if screen:
        click.echo("\033[H\033[2J", nl=False)  # cursor home, clear screen
    elif n > 1:
        click.echo()
    click.echo(head)
    print_table(with_pending(WATCH_COLS, rows), rows)
