"""``hightide storage``: Kafka's ``kafka-storage.sh``.

``random-uuid`` prints a new cluster id; ``format`` formats one node's data dir for a
cluster id from the flags that start the node (``--data-dir``, ``--config``, ``--node-id``,
``--set``, as ``hightide serve``): ``meta.properties`` and, on a controller, the voter set
(:func:`hightide.log.data_dir.format_new_dir`, the code ``dev-cluster`` formats with). A
controller quorum's voters are formatted with one cluster id before their first start;
an unformatted voter refuses to start. Errors: one line, exit 1.
"""

from __future__ import annotations

import os

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
def format_dir(cluster_id: str, data_dir: str, config_file: str | None, node_id: int | None,
               overrides: tuple[str, ...], ignore_formatted: bool) -> None:
    """Format a node's data dir for the --cluster-id: meta.properties and, on a controller, the
    voter set of controller.quorum.voters. Give the flags that start the node with
    `hightide serve`. A dir already formatted is refused (--ignore-formatted: accepted if
    it is the same cluster's and node's, and left as it is)."""
    if not cluster_id.strip() or any(c.isspace() or c in "=#" for c in cluster_id):
        raise click.ClickException(f"invalid cluster id {cluster_id!r}: print one with `hightide storage random-uuid`")
    config = load_node_config(config_file, node_id, overrides)
    voters = config.cluster_settings().formatted_voters
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
                                  ignore_formatted=ignore_formatted)
        finally:
            lock.release()
    except (DataDirMismatch, DataDirLocked) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot format data dir {data_dir}: {exc.strerror or exc}"
                                   + (f": {exc.filename}" if exc.filename else "")) from None
    click.echo(line)
