"""``hightide dev-cluster``: a controller (or a quorum of them) and N brokers on loopback,
until Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from types import FrameType
from typing import Any

import click

from . import main

POLL_S = 0.5


def _parse_sets(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--set")
        out[name.strip()] = value.strip()
    return out


@main.command("dev-cluster")
@click.option("--brokers", "n_brokers", type=click.IntRange(1, 64), default=3, show_default=True,
              help="How many broker processes.")
@click.option("--controllers", "n_controllers", type=click.IntRange(1, 9), default=1, show_default=True,
              help="How many controllers: 1, or a quorum of 3 (survives 1 lost) or 5 (survives 2).")
@click.option("--data-dir", default="./hightide-dev-cluster", show_default=True,
              help="Base dir: one data dir per node under it (kept between runs).")
@click.option("--base-port", type=click.IntRange(0, 65535), default=9092, show_default=True,
              envvar="HIGHTIDE_DEV_CLUSTER_BASE_PORT", show_envvar=True,
              help="Brokers listen on PORT, PORT+1, ...; the controller after them. 0: free ports.")
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE",
              help="A config for every node, e.g. metadata.read.consistency=local (repeatable).")
@click.option("--log-level", default="INFO", show_default=True, help="The nodes' --log-level.")
@click.option("--dynamic-voters", is_flag=True,
              help="A dynamic quorum (KIP-853): controller.quorum.bootstrap.servers, controllers formatted with "
                   "--initial-controllers; add and remove controllers with `metadata-quorum add-controller`.")
def dev_cluster(n_brokers: int, n_controllers: int, data_dir: str, base_port: int,
                overrides: tuple[str, ...], log_level: str, dynamic_voters: bool) -> None:
    """Run a controller (or a quorum of them) and N brokers on 127.0.0.1 until Ctrl-C.

    Prints the bootstrap string and each broker's state as it changes (registered,
    unfenced, fenced, exited) and any controller that exits; node logs are in
    DATA_DIR/logs. Ctrl-C (or SIGTERM) stops the brokers, then the controllers."""
    from ..devcluster import DevCluster, NodeFailed, plan
    settings = _parse_sets(overrides)
    try:
        specs = plan(n_brokers, data_dir, n_controllers=n_controllers, base_port=base_port or None,
                     settings=settings, log_level=log_level, dynamic_voters=dynamic_voters)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    cluster = DevCluster(specs, data_dir)
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _start(cluster)
        _watch(cluster)
    except NodeFailed as exc:
        cluster.close(timeout=10)
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        click.echo(f"stopping: brokers first, then the controller{'s' * (len(cluster.controllers) != 1)}")
        for node_id, code in cluster.stop().items():
            click.echo(f"  {cluster.nodes[node_id].spec.name} stopped (exit {code})")
    finally:
        cluster.close(timeout=10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _start(cluster: Any) -> None:
    """Start the controllers, then the brokers, printing each as it listens."""
    from ..devcluster import format_dirs, inspect_dirs
    specs = [n.spec for n in cluster.nodes.values()]
    _, doing = inspect_dirs(specs)  # raises LayoutMismatch (one line) before anything starts
    cluster.check_ports()
    cluster.cluster_id = format_dirs(specs)
    n, c = len(cluster.brokers), len(cluster.controllers)
    click.echo(f"dev cluster {cluster.cluster_id}: {c} controller{'s' * (c != 1)}, {n} broker{'s' * (n != 1)}")
    for line in doing:
        click.echo(line)
    click.echo(f"data and logs under {cluster.base_dir}")
    for group in (cluster.controllers, cluster.brokers):
        for node in group:
            node.start()
        for node in group:
            node.wait_listening(60.0)
            click.echo(f"  {node.spec.name:<16} {node.spec.address:<21} listening (pid {node.pid})")
    click.echo(f"bootstrap: {cluster.bootstrap}")
    click.echo(f"controller{'s' * (c != 1)}: {cluster.bootstrap_controller}")


def broker_states(cluster: Any, views: dict[int, dict[int, str]], silent: set[int] | frozenset[int] = frozenset()
                  ) -> dict[int, str]:
    """Each broker's state from the processes and the brokers' DescribeCluster views:
    ``exited (code)``, ``paused`` (by dev-cluster), ``not answering`` (in ``silent``: its
    own DescribeCluster failed or is overdue, e.g. SIGSTOPped from outside), ``unfenced``
    (every view says so), ``fenced`` (some view says so), ``starting`` (not listed yet)."""
    out = {}
    for node in cluster.brokers:
        bid = node.spec.node_id
        seen = [v[bid] for v in views.values() if bid in v]
        if not node.alive:
            out[bid] = f"exited ({node.returncode})"
        elif node.paused:
            out[bid] = "paused"
        elif bid in silent:
            out[bid] = "not answering"
        elif seen and all(s == "unfenced" for s in seen):
            out[bid] = "unfenced"
        elif seen:
            out[bid] = "fenced"
        else:
            out[bid] = "starting"
    return out


def _watch(cluster: Any) -> None:
    """Print broker state changes until interrupted (see :func:`_awatch`)."""
    asyncio.run(_awatch(cluster))


async def _awatch(cluster: Any) -> None:
    """Print broker state changes until interrupted; a broker seen fenced before it was
    ever unfenced is shown as ``registered (fenced)``. Every broker is polled on its own
    (:class:`~hightide.devcluster.StatusPoller`): one silent broker does not make the
    others look ``starting``."""
    from ..devcluster import StatusPoller
    poller = StatusPoller(cluster.describe_broker)
    shown: dict[int, str] = {}
    shown_controllers: dict[int, str] = {}
    ever_unfenced: set[int] = set()
    ready = False
    try:
        while True:
            running = [n.spec.node_id for n in cluster.brokers if n.alive and not n.paused]
            views, silent = await poller.poll(running, wait_s=POLL_S)
            states = broker_states(cluster, views, silent)
            for bid, state in states.items():
                label = "registered (fenced)" if state == "fenced" and bid not in ever_unfenced else state
                if state == "unfenced":
                    ever_unfenced.add(bid)
                if shown.get(bid) != label:
                    shown[bid] = label
                    click.echo(f"{time.strftime('%H:%M:%S')} broker {bid:<4} {label}")
                    if state.startswith("exited"):
                        click.echo(f"  {cluster.nodes[bid].last_line()[:76]}")
            if not ready and all(s == "unfenced" for s in states.values()):
                ready = True
                click.echo(f"{time.strftime('%H:%M:%S')} all {len(states)} brokers unfenced; "
                           "Ctrl-C stops the cluster")
            _watch_controllers(cluster, shown_controllers)
            sys.stdout.flush()
            await asyncio.sleep(POLL_S)
    finally:
        poller.close()


def _watch_controllers(cluster: Any, shown: dict[int, str]) -> None:
    """Print a controller that exits or pauses (a quorum survives a minority); raise
    NodeFailed once a majority of the controllers has exited (no metadata change can
    be made any more: a single controller's exit ends the dev cluster)."""
    from ..devcluster import NodeFailed
    gone = []
    for node in cluster.controllers:
        state = "paused" if node.alive and node.paused else ("running" if node.alive else f"exited ({node.returncode})")
        if not node.alive:
            gone.append(node)
        if shown.get(node.spec.node_id, "running") != state:
            click.echo(f"{time.strftime('%H:%M:%S')} {node.spec.name} {state}")
        shown[node.spec.node_id] = state
    if len(gone) > (len(cluster.controllers) - 1) // 2:
        node = gone[0]
        if len(cluster.controllers) == 1:
            raise NodeFailed(f"{node.spec.name} exited with {node.returncode}: {node.last_line()}")
        raise NodeFailed(f"{len(gone)} of {len(cluster.controllers)} controllers exited (no quorum): "
                         f"{node.spec.name} exited with {node.returncode}: {node.last_line()}")
