"""``hightide brokers``: the cluster's brokers and their state.

From a broker: DescribeCluster v2 with fenced brokers included (KIP-1073) gives id,
endpoint, rack and fenced/unfenced; Metadata adds how many partitions each leads. From a
controller (``--bootstrap-controller``, KIP-919): DescribeCluster lists the controllers.
Brokers in controlled shutdown are listed as unfenced: no Kafka RPC tells them apart.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import click

from . import main
from ._common import Col, client_options, command_config_option, dash, emit, kafka_error_line, run_admin


def _state(fenced: bool | None) -> str:
    return "-" if fenced is None else ("fenced" if fenced else "unfenced")


async def gather_rows(bootstrap: str, controller: bool, timeout_s: float = 15.0) -> list[dict[str, Any]]:
    """One row per node; raises :class:`~hightide.client.errors.KafkaError`."""
    from ..client import parse_servers
    from ..client.cluster import connect_any, describe_cluster
    conn = await connect_any(parse_servers(bootstrap), timeout_s=timeout_s,
                             security=client_options().get("security"))  # --command-config
    try:
        desc = await describe_cluster(conn, controllers=controller, include_fenced=True)
        leaders: Counter[int] = Counter()
        if not controller:
            v = conn.pick_version(3, 12, 1)
            md = await conn.request(3, v, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False,
                                           "include_cluster_authorized_operations": False})
            leaders.update(int(p.leader_id) for t in md.topics for p in t.partitions if int(p.leader_id) >= 0)
    finally:
        await conn.close()
    role = "controller" if controller else "broker"
    return [{"id": b.node_id, "role": role, "host": b.host, "port": b.port, "endpoint": f"{b.host}:{b.port}",
             "rack": b.rack, "state": "-" if controller else _state(b.fenced),
             "fenced": b.fenced, "leaders": None if controller else leaders.get(b.node_id, 0)}
            for b in desc.brokers]


@main.group("brokers", invoke_without_command=True)
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help="HOST:PORT[,...] of brokers (default 127.0.0.1:9092).")
@click.option("--bootstrap-controller", default=None, help="HOST:PORT[,...] of controllers: list them (KIP-919).")
@command_config_option
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def brokers(ctx: click.Context, bootstrap_server: str | None, bootstrap_controller: str | None, output: str) -> None:
    """Brokers with endpoint, rack, fenced/unfenced and partitions led; "unregister"
    removes a decommissioned broker's registration."""
    if ctx.invoked_subcommand is not None:
        return
    if bootstrap_server and bootstrap_controller:
        raise click.UsageError("give only one of --bootstrap-server or --bootstrap-controller")
    from ..client import KafkaError
    controller = bootstrap_controller is not None
    try:
        rows = asyncio.run(gather_rows(bootstrap_controller or bootstrap_server or "127.0.0.1:9092", controller))
    except KafkaError as exc:
        raise click.ClickException(kafka_error_line(exc)) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    cols = [Col("ID", "id"), Col("ENDPOINT", "endpoint"), Col("RACK", "rack", dash, drop=1)]
    cols += [Col("ROLE", "role")] if controller else [Col("STATE", "state"), Col("LEADERS", "leaders", drop=2)]
    emit(output, cols, rows)


@brokers.command("unregister")
@click.argument("broker_id", type=int, required=False)
@click.option("--id", "id_option", type=int, default=None, help="The broker id (kafka-cluster.sh unregister's form).")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help="HOST:PORT[,...] of brokers (default 127.0.0.1:9092).")
@command_config_option
@click.pass_context
def brokers_unregister(ctx: click.Context, broker_id: int | None, id_option: int | None,
                       bootstrap_server: str | None) -> None:
    """Remove broker BROKER_ID's registration (UnregisterBroker, forwarded to the active
    controller), as ``kafka-cluster.sh unregister --id``: for a broker that is gone for
    good. A broker that still runs registers again at its next heartbeat."""
    if (broker_id is None) == (id_option is None):
        raise click.UsageError("give the broker id once: BROKER_ID or --id")
    bid = broker_id if broker_id is not None else id_option
    assert bid is not None
    parent = ctx.parent.params if ctx.parent is not None else {}
    bootstrap = bootstrap_server or parent.get("bootstrap_server") or "127.0.0.1:9092"

    async def go(admin: Any) -> None:
        await admin.unregister_broker(bid)
    run_admin(bootstrap, go)
    click.echo(f"Broker {bid} is no longer registered.")
