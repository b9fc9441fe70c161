"""``hightide lag watch``: a live view of lag, time lag and status per group."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import click

from . import main
from ._common import Col, admin_options, print_table, run_admin, seconds
from .groups import offset_rows, with_pending

WATCH_COLS = [Col("GROUP", "group"), Col("TOPIC", "topic"), Col("PARTITION", "partition"),
              Col("CURRENT-OFFSET", "current_offset"), Col("LOG-END-OFFSET", "log_end_offset"),
              Col("LAG", "lag"), Col("TIME-LAG", "time_lag_ms", seconds, drop=1), Col("STATUS", "status"),
              Col("NOTE", "note", drop=2)]


@main.group("lag")
def lag_group() -> None:
    """Consumer lag views."""


def snapshot_doc(snap: Any) -> dict[str, Any]:
    """A snapshot as a JSON-able document (used by ``lag watch -o json``)."""
    return {"time_ms": snap.time_ms, "round_trips": snap.round_trips,
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
def lag_watch(bootstrap_server: str, output: str, group_ids: tuple[str, ...], interval: float, iterations: int,
              window: float, min_samples: int, isolation: str) -> None:
    """Refresh lag of GROUP_IDS (default: all groups) every --interval seconds.

    With ``-o json`` prints one JSON document per refresh, one per line.
    """
    from ..lag import StatusRules
    from ..monitoring.monitor import LagMonitor
    rules = StatusRules(window_ms=int(window * 1000), min_samples=min_samples)

    async def go(admin: Any) -> None:
        mon = LagMonitor(admin, rules=rules, isolation_level=isolation)
        screen = output == "table" and sys.stdout.isatty()
        n = 0
        while True:
            started = time.monotonic()
            snap = await mon.snapshot(list(group_ids) or None)
            n += 1
            if output == "json":
                click.echo(json.dumps(snapshot_doc(snap)))
            else:
                _print_refresh(snap, n, screen)
            if iterations and n >= iterations:
                return
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    try:
        run_admin(bootstrap_server, go)
    except KeyboardInterrupt:
        pass


def _print_refresh(snap: Any, n: int, screen: bool) -> None:
    """One refresh: on a terminal the screen is redrawn in place; otherwise (a pipe, a
    file) every refresh is printed in full, one after the other, each ending in a newline."""
    rows = [r for g in sorted(snap.groups) for r in offset_rows(snap.groups[g])]
    statuses = ", ".join(f"{g}={r.status.status.value if r.status else '-'}" for g, r in sorted(snap.groups.items()))
    head = (f"refresh {n} · {len(snap.groups)} groups · {snap.round_trips} round trips · "
            f"{snap.duration_s * 1000:.0f} ms · {statuses}")
    if screen:
        click.echo("\033[H\033[2J", nl=False)  # cursor home, clear screen
    elif n > 1:
        click.echo()
    click.echo(head)
    print_table(with_pending(WATCH_COLS, rows), rows)
