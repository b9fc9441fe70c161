"""``hightide storage``: Kafka's ``kafka-storage.sh``.

``random-uuid`` prints a new cluster id; ``format`` formats one node's data dir for a
cluster id from the flags that start the node (``--data-dir``, ``--config``, ``--node-id``,
``--set``, as ``hightide serve``): ``meta.properties`` and, on a controller, the voter set
(:func:`hightide.log.data_dir.format_new_dir`, the code ``dev-cluster`` formats with). A
controller quorum's voters are formatted with one cluster id before their first start;
an unformatted voter refuses to start. A dynamic quorum's controller (KIP-853:
``controller.quorum.bootstrap.servers``, no ``controller.quorum.voters``) takes one of
Kafka's ``--standalone`` (this controller alone is the initial voter set),
``--initial-controllers id@host:port:directory-id,...`` (the same list on every initial
controller) or ``--no-initial-controllers`` (a controller that joins later as an observer
and is added with ``hightide metadata-quorum add-controller``). Errors: one line, exit 1.
"""

from __future__ import annotations

import os
from typing import Any

import click

from . import load_node_config, main, node_options


@main.group()
def storage() -> None:
    """Format data dirs (kafka-storage.sh): random-uuid, format."""


@storage.command("random-uuid")
def random_uuid() -> None:
    """Print a new cluster id (Kafka's Uuid: 22 characters of URL-safe base64)."""
    from ..log.data_dir import new_id
    click.echo(new_id())


@storage.command("format")
@click.option("--cluster-id", "-t", required=True, help="The cluster id, the same for every node (random-uuid).")
@node_options
@click.option("--ignore-formatted", "-g", is_flag=True,
              help="Leave a dir already formatted for this cluster (and node) as it is, exit 0.")
@click.option("--standalone", "-s", is_flag=True,
              help="A dynamic quorum's controller: this controller alone is the initial voter set.")
@click.option("--initial-controllers", "-I", default=None, metavar="ID@HOST:PORT:DIRID,...",
              help="A dynamic quorum's controllers: the initial voter set (the same on every initial controller).")
@click.option("--no-initial-controllers", "-N", is_flag=True,
              help="A dynamic quorum's controller that joins later (add-controller): no initial voter set.")
def format_dir(cluster_id: str, data_dir: str, config_file: str | None, node_id: int | None,
               overrides: tuple[str, ...], ignore_formatted: bool, standalone: bool, initial_controllers: str | None,
               no_initial_controllers: bool) -> None:
    """Format a node's data dir for the --cluster-id: meta.properties and, on a controller, the
    voter set of controller.quorum.voters. Give the flags that start the node with
    `hightide serve`. A dir already formatted is refused (--ignore-formatted: accepted if
    it is the same cluster's and node's, and left as it is)."""
    if not cluster_id.strip() or any(c.isspace() or c in "=#" for c in cluster_id):
        raise click.ClickException(f"invalid cluster id {cluster_id!r}: print one with `hightide storage random-uuid`")
    config = load_node_config(config_file, node_id, overrides)
    settings = config.cluster_settings()
    voters = settings.formatted_voters
    dynamic = dynamic_format(settings, standalone, initial_controllers, no_initial_controllers)
    from ..log.data_dir import DataDirMismatch, format_new_dir
    from ..log.dirlock import DataDirLocked, DirLock
    from ..log.storage import POSIX, make_dirs_durable
    try:
        if os.path.exists(data_dir) and not os.path.isdir(data_dir):
            raise click.ClickException(f"--data-dir {data_dir} is a file, not a directory")
        make_dirs_durable(POSIX, data_dir)
        lock = DirLock.acquire(data_dir)  # not while a node runs on it
        try:
            line = format_new_dir(data_dir, cluster_id=cluster_id, node_id=config["node.id"], voters=voters,
                                  ignore_formatted=ignore_formatted, dynamic=dynamic is not None,
                                  bootstrap=dynamic[0] if dynamic else None,
                                  directory_id=dynamic[1] if dynamic else None)
        finally:
            lock.release()
    except (DataDirMismatch, DataDirLocked) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot format data dir {data_dir}: {exc.strerror or exc}"
                                   + (f": {exc.filename}" if exc.filename else "")) from None
    click.echo(line)


def dynamic_format(settings: Any, standalone: bool, initial: str | None,
                   no_initial: bool) -> tuple[bytes | None, str | None] | None:
    """For a dynamic quorum's controller: (the bootstrap checkpoint's bytes or None, this
    node's directory id or None: a new one); None for any other node. Raises
    click.ClickException (one line) for a flag that does not fit the node."""
    chosen = int(standalone) + int(initial is not None) + int(no_initial)
    if not settings.dynamic_quorum:
        if chosen:
            raise click.ClickException("--standalone, --initial-controllers and --no-initial-controllers format a "
                                       "dynamic quorum's controller: set controller.quorum.bootstrap.servers (and no "
                                       "controller.quorum.voters) with process.roles=controller")
        return None
    if chosen != 1:
        raise click.ClickException("a dynamic quorum's controller (controller.quorum.bootstrap.servers) is formatted "
                                   "with exactly one of --standalone, --initial-controllers, --no-initial-controllers")
    if no_initial:
        return None, None
    from ..cluster.raft import VoterNode, VoterSet
    from ..cluster.settings import parse_initial_controllers
    from ..cluster.snapshot import encode_bootstrap_snapshot
    from ..config import ConfigError
    from ..log.data_dir import new_id
    listeners = settings.controller_listeners
    name = listeners[0].name if listeners else "CONTROLLER"
    if standalone:
        if not listeners:
            raise click.ClickException("--standalone needs this controller's listener (controller.listener.names)")
        host, port = settings.advertised_for(listeners[0], listeners[0].port)
        directory = new_id()
        voters = VoterSet.of([VoterNode(settings.node_id, directory, ((name, host, port),))])
    else:
        try:
            voters = parse_initial_controllers(initial or "", name)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        me = voters.get(settings.node_id)
        if me is None:
            raise click.ClickException(f"node {settings.node_id} is not in --initial-controllers "
                                       f"{','.join(map(str, voters.ids))} (a controller that joins later is "
                                       "formatted with --no-initial-controllers)")
        directory = me.directory_id
    import time
    return encode_bootstrap_snapshot(voters, int(time.time() * 1000)), directory
