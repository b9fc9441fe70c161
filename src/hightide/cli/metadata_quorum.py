"""``hightide metadata-quorum describe --status | --replication``, ``add-controller`` and
``remove-controller`` (kafka-metadata-quorum.sh; the last two are KIP-853's AddRaftVoter
and RemoveRaftVoter, for a dynamic quorum).

The same fields and column names as Kafka's tool (DescribeQuorum (55) of
``__cluster_metadata-0``, the cluster id from DescribeCluster), plus hightide's view of
seed 004: each broker's applied metadata offset and the lowest acknowledged offset.
Where those come from: a broker fetches the metadata log at offset N only after it has
applied everything below N, so an observer's LogEndOffset (its fetch position, as the
controller reports it) minus one is its applied offset; the lowest acknowledged offset is
the lowest applied offset among the unfenced brokers (fenced states from DescribeCluster
of a broker; unknown with ``--bootstrap-controller``). It is derived from the
controller's view of fetches, which runs at most one heartbeat ahead of the value the
controller hands out in heartbeat responses.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

import click

from ..client.cluster import applied_offset
from ..client.cluster import lowest_acknowledged as _lowest_acknowledged
from . import main, node_options
from ._common import Col, client_options, command_config_option, kafka_error_line, print_table, terminal_width, wrap_fields

LAO_SOURCE = ("derived: lowest (observer LogEndOffset - 1) among unfenced brokers, from DescribeQuorum "
              "and DescribeCluster")


def kafka_uuid(u: uuid.UUID | None) -> str:
    """A directory id as Kafka prints a Uuid (URL-safe base64, no padding); the zero
    uuid when unknown (below DescribeQuorum v2)."""
    raw = (u or uuid.UUID(int=0)).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True)
class QuorumView:
    """What one ``describe`` gathered: the quorum, the cluster id and, when asked of a
    broker, every broker's fenced state (``fenced`` None when unknown)."""

    cluster_id: str
    quorum: Any  # hightide.client.cluster.QuorumInfo
    fenced: dict[int, bool] | None


async def gather_view(bootstrap: str, controller: bool, timeout_s: float = 15.0) -> QuorumView:
    """Ask DescribeQuorum and DescribeCluster of the first reachable broker (it forwards
    DescribeQuorum to the active controller) or, with ``controller``, of the active
    controller among the servers (a voter that does not lead answers
    NOT_LEADER_OR_FOLLOWER; see :func:`~hightide.client.cluster.active_controller`).
    Raises :class:`~hightide.client.errors.KafkaError` (connection, unsupported, error
    codes); a broker that does not offer DescribeQuorum gets a hint to use
    ``--bootstrap-controller``."""
    from ..client import UnsupportedVersionError, parse_servers
    from ..client.cluster import active_controller, connect_any, describe_cluster, describe_quorum
    security = client_options().get("security")  # --command-config
    if controller:  # a quorum: only the active controller answers; find it among the servers
        conn, quorum = await active_controller(parse_servers(bootstrap), timeout_s=timeout_s, security=security)
    else:
        conn = await connect_any(parse_servers(bootstrap), timeout_s=timeout_s, security=security)
    try:
        if not controller:
            try:
                quorum = await describe_quorum(conn)
            except UnsupportedVersionError as exc:
                raise UnsupportedVersionError(
                    exc.code, f"{exc.message} (ask the controller: --bootstrap-controller HOST:PORT)") from None
        desc = await describe_cluster(conn, controllers=controller, include_fenced=True)
    finally:
        await conn.close()
    fenced = None
    if not controller and desc.includes_fenced:
        fenced = {b.node_id: bool(b.fenced) for b in desc.brokers}
    return QuorumView(desc.cluster_id, quorum, fenced)


def lowest_acknowledged(view: QuorumView) -> int | None:
    """The lowest applied offset among unfenced brokers (see the module doc)."""
    return _lowest_acknowledged(view.quorum, view.fenced)


def status_doc(view: QuorumView) -> dict[str, Any]:
    """The ``--status`` fields, computed as kafka-metadata-quorum.sh computes them."""
    q = view.quorum
    leader = next((v for v in q.voters if v.node_id == q.leader_id), None)
    max_lag, max_lag_ms = -1, -1
    if leader is not None and q.voters:
        laggard = min(q.voters, key=lambda v: v.log_end_offset)
        max_lag = leader.log_end_offset - laggard.log_end_offset
        if laggard is leader:
            max_lag_ms = 0
        elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
            max_lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    return {
        "cluster_id": view.cluster_id, "leader_id": q.leader_id, "leader_epoch": q.leader_epoch,
        "high_watermark": q.high_watermark, "max_follower_lag": max_lag, "max_follower_lag_time_ms": max_lag_ms,
        "current_voters": [_node(q, v) for v in q.voters],
        "current_observers": [_node(q, o) for o in q.observers],
        "lowest_acknowledged_offset": lowest_acknowledged(view),
        "lowest_acknowledged_offset_source": LAO_SOURCE if view.fenced is not None else None,
        "brokers": {str(o.node_id): {"applied_offset": applied_offset(o),
                                     "fenced": None if view.fenced is None else view.fenced.get(o.node_id)}
                    for o in q.observers},
    }


def _node(q: Any, r: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": r.node_id}
    if r.directory_id is not None and r.directory_id.int != 0:
        out["directoryId"] = kafka_uuid(r.directory_id)
    endpoints = q.nodes.get(r.node_id)
    if endpoints:
        out["endpoints"] = [f"{name}://{host}:{port}" for name, host, port in endpoints]
    return out


def _node_text(node: dict[str, Any]) -> str:
    parts = [f'"id": {node["id"]}']
    if "directoryId" in node:
        parts.append(f'"directoryId": "{node["directoryId"]}"')
    if "endpoints" in node:
        parts.append('"endpoints": [' + ", ".join(f'"{e}"' for e in node["endpoints"]) + "]")
    return "{" + ", ".join(parts) + "}"


def status_text(doc: dict[str, Any], width: int | None = None) -> str:
    """Kafka's ``--status`` layout (labels padded to 24 columns) plus hightide's lines.
    With a ``width`` (a terminal's), a longer line (the voters and observers) continues
    on lines indented to the values' column, cut after a comma."""
    lao = doc["lowest_acknowledged_offset"]
    lines = [("ClusterId:", doc["cluster_id"]), ("LeaderId:", doc["leader_id"]),
             ("LeaderEpoch:", doc["leader_epoch"]), ("HighWatermark:", doc["high_watermark"]),
             ("MaxFollowerLag:", doc["max_follower_lag"]), ("MaxFollowerLagTimeMs:", doc["max_follower_lag_time_ms"]),
             ("CurrentVoters:", "[" + ", ".join(map(_node_text, doc["current_voters"])) + "]"),
             ("CurrentObservers:", "[" + ", ".join(map(_node_text, doc["current_observers"])) + "]"),
             ("LowestAckedOffset:", "-" if lao is None else lao)]
    return "\n".join(part for label, value in lines
                     for part in wrap_fields(f"{label:<24}{value}", width, ", ", " " * 25))


def replication_rows(view: QuorumView, human: bool, now_ms: int) -> list[dict[str, Any]]:
    """One row per replica: the leader, then the other voters, then the observers, with
    Kafka's columns (Lag = leader LEO - replica LEO) and the broker's applied offset."""
    q = view.quorum
    leader = next((v for v in q.voters if v.node_id == q.leader_id), None)
    leader_leo = leader.log_end_offset if leader is not None else q.high_watermark
    ordered = ([(leader, "Leader")] if leader is not None else []) + \
        [(v, "Follower") for v in q.voters if v is not leader] + [(o, "Observer") for o in q.observers]

    def ts(ms: int) -> Any:
        if ms < 0:
            return -1
        return f"{max(0, now_ms - ms)} ms ago" if human else ms
    return [{"node_id": r.node_id, "directory_id": kafka_uuid(r.directory_id), "log_end_offset": r.log_end_offset,
             "lag": leader_leo - r.log_end_offset, "last_fetch_timestamp": ts(r.last_fetch_timestamp),
             "last_caught_up_timestamp": ts(r.last_caught_up_timestamp), "status": status,
             "applied_offset": applied_offset(r) if status == "Observer" else None,
             "fenced": None if view.fenced is None or status != "Observer" else view.fenced.get(r.node_id)}
            for r, status in ordered]


REPLICATION_COLS = [Col("NodeId", "node_id"), Col("DirectoryId", "directory_id", drop=2),
                    Col("LogEndOffset", "log_end_offset"), Col("Lag", "lag"),
                    Col("LastFetchTimestamp", "last_fetch_timestamp", drop=1),
                    Col("LastCaughtUpTimestamp", "last_caught_up_timestamp", drop=1),
                    Col("Status", "status"), Col("AppliedOffset", "applied_offset", drop=3)]


@main.group("metadata-quorum")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help="HOST:PORT[,...] of brokers (default 127.0.0.1:9092).")
@click.option("--bootstrap-controller", default=None, help="HOST:PORT[,...] of controllers (KIP-919).")
@command_config_option
@click.pass_context
def metadata_quorum(ctx: click.Context, bootstrap_server: str | None, bootstrap_controller: str | None) -> None:
    """The metadata quorum: leader, high watermark, replication (kafka-metadata-quorum).

    The connection options go before or after ``describe`` (kafka-metadata-quorum.sh
    takes them before: ``metadata-quorum --bootstrap-server HOST:PORT describe --status``)."""
    ctx.obj = {"bootstrap_server": bootstrap_server, "bootstrap_controller": bootstrap_controller}


@metadata_quorum.command("describe")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help="HOST:PORT[,...] of brokers (default 127.0.0.1:9092).")
@click.option("--bootstrap-controller", default=None, help="HOST:PORT[,...] of controllers (KIP-919).")
@command_config_option
@click.option("--status", is_flag=True, help="A short summary of the quorum status.")
@click.option("--replication", is_flag=True, help="Each replica's replication state.")
@click.option("--human-readable", is_flag=True, help="Timestamps as 'N ms ago' (--replication).")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text (raw values).")
def describe(bootstrap_server: str | None, bootstrap_controller: str | None, status: bool, replication: bool,
             human_readable: bool, as_json: bool) -> None:
    """Describe the metadata quorum (one of --status or --replication)."""
    given = click.get_current_context().obj or {}
    bootstrap_server = bootstrap_server or given.get("bootstrap_server")
    bootstrap_controller = bootstrap_controller or given.get("bootstrap_controller")
    if status == replication:
        raise click.UsageError("give exactly one of --status or --replication")
    if bootstrap_server and bootstrap_controller:
        raise click.UsageError("give only one of --bootstrap-server or --bootstrap-controller")
    from ..client import KafkaError
    controller = bootstrap_controller is not None
    target = bootstrap_controller or bootstrap_server or "127.0.0.1:9092"
    try:
        view = asyncio.run(gather_view(target, controller))
    except KafkaError as exc:
        raise click.ClickException(kafka_error_line(exc)) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if status:
        doc = status_doc(view)
        click.echo(json.dumps(doc, indent=2) if as_json else status_text(doc, terminal_width()))
        return
    import time
    rows = replication_rows(view, human_readable and not as_json, int(time.time() * 1000))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        print_table(REPLICATION_COLS, rows)



# -- add-controller / remove-controller (KIP-853) ------------------------------------------
def _target(bootstrap_server: str | None, bootstrap_controller: str | None) -> tuple[str, bool]:
    given = click.get_current_context().obj or {}
    bootstrap_server = bootstrap_server or given.get("bootstrap_server")
    bootstrap_controller = bootstrap_controller or given.get("bootstrap_controller")
    if bootstrap_server and bootstrap_controller:
        raise click.UsageError("give only one of --bootstrap-server or --bootstrap-controller")
    return bootstrap_controller or bootstrap_server or "127.0.0.1:9092", bootstrap_controller is not None


async def _on_active(target: str, controller: bool, call: Any, timeout_s: float = 15.0) -> None:
    """Run ``call(conn)`` on the active controller (``controller``) or on the first
    reachable broker (it forwards the request to the active controller)."""
    from ..client import parse_servers
    from ..client.cluster import active_controller, connect_any
    security = client_options().get("security")
    if controller:
        conn, _ = await active_controller(parse_servers(target), timeout_s=timeout_s, security=security)
    else:
        conn = await connect_any(parse_servers(target), timeout_s=timeout_s, security=security)
    try:
        await call(conn)
    finally:
        await conn.close()


def _run(what: str, target: str, controller: bool, call: Any) -> None:
    from ..client import KafkaError
    try:
        asyncio.run(_on_active(target, controller, call))
    except KafkaError as exc:
        raise click.ClickException(f"{what} failed: {type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def new_controller(config: Any, data_dir: str) -> tuple[int, uuid.UUID, list[tuple[str, str, int]]]:
    """(node id, directory id, controller listeners as advertised) of the controller that
    ``config`` and ``data_dir`` describe (its ``serve`` flags): what add-controller sends,
    as kafka-metadata-quorum.sh reads them from the controller's properties and log dir.
    Raises click.ClickException when it is not a formatted dynamic quorum's controller."""
    from ..log.data_dir import read_meta_properties
    from ..cluster.raft.batches import uuid_bytes
    settings = config.cluster_settings()
    if not settings.dynamic_quorum:
        raise click.ClickException("add-controller adds a dynamic quorum's controller: its flags must set "
                                   "process.roles=controller and controller.quorum.bootstrap.servers (no "
                                   "controller.quorum.voters)")
    directory = read_meta_properties(data_dir).get("directory.id")
    if not directory:
        raise click.ClickException(f"data dir {data_dir} is not formatted (no directory.id in meta.properties): "
                                   "run `hightide storage format --no-initial-controllers` with its flags first")
    try:
        dir_uuid = uuid.UUID(bytes=uuid_bytes(directory))
    except ValueError:
        raise click.ClickException(f"data dir {data_dir}: directory.id {directory!r} is not a Uuid") from None
    listeners = [(x.name, *settings.advertised_for(x, x.port)) for x in settings.controller_listeners]
    if not listeners or any(port == 0 for _, _, port in listeners):
        raise click.ClickException("add-controller needs the controller's listener with a fixed port "
                                   "(listeners, controller.listener.names)")
    return settings.node_id, dir_uuid, listeners


@metadata_quorum.command("add-controller")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help="HOST:PORT[,...] of brokers (they forward to the active controller).")
@click.option("--bootstrap-controller", default=None, help="HOST:PORT[,...] of controllers (KIP-919).")
@command_config_option
@node_options
@click.option("--timeout-ms", type=int, default=30_000, show_default=True,
              help="How long the controller waits for the new voter set to commit.")
def add_controller(bootstrap_server: str | None, bootstrap_controller: str | None, data_dir: str,
                   config_file: str | None, node_id: int | None, overrides: tuple[str, ...], timeout_ms: int) -> None:
    """Add a controller to a dynamic quorum (AddRaftVoter, KIP-853).

    Give the new controller's own flags (--data-dir, --config, --node-id, --set, as it is
    started with `hightide serve`): its node id, directory id (meta.properties) and
    controller listener are sent. It must be running and caught up (fetching the metadata
    log as an observer) first. Returns once the new voter set is committed."""
    from . import load_node_config
    from ..client.cluster import add_raft_voter
    target, controller = _target(bootstrap_server, bootstrap_controller)
    config = load_node_config(config_file, node_id, overrides)
    nid, directory, listeners = new_controller(config, data_dir)

    async def call(conn: Any) -> None:
        await add_raft_voter(conn, nid, directory, listeners, timeout_ms=timeout_ms)
    _run(f"adding controller {nid}", target, controller, call)
    click.echo(f"Added controller {nid} with directory id {kafka_uuid(directory)} and endpoints: "
               + ", ".join(f"{n}://{h}:{p}" for n, h, p in listeners))


@metadata_quorum.command("remove-controller")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help="HOST:PORT[,...] of brokers (they forward to the active controller).")
@click.option("--bootstrap-controller", default=None, help="HOST:PORT[,...] of controllers (KIP-919).")
@command_config_option
@click.option("--controller-id", "-i", type=int, required=True, help="The id of the controller to remove.")
@click.option("--controller-directory-id", "-d", required=True,
              help="The directory id of the controller to remove (describe --replication shows it).")
def remove_controller(bootstrap_server: str | None, bootstrap_controller: str | None, controller_id: int,
                      controller_directory_id: str) -> None:
    """Remove a controller from a dynamic quorum (RemoveRaftVoter, KIP-853). Returns once
    the new voter set is committed; stop the removed controller afterwards."""
    from ..client.cluster import remove_raft_voter
    from ..cluster.raft.batches import uuid_bytes
    target, controller = _target(bootstrap_server, bootstrap_controller)
    try:
        directory = uuid.UUID(bytes=uuid_bytes(controller_directory_id))
    except ValueError:
        raise click.ClickException(f"--controller-directory-id {controller_directory_id!r} is not a Uuid "
                                   "(22 characters of URL-safe base64)") from None

    async def call(conn: Any) -> None:
        await remove_raft_voter(conn, controller_id, directory)
    _run(f"removing controller {controller_id}", target, controller, call)
    click.echo(f"Removed controller {controller_id} with directory id {controller_directory_id}")
