"""``hightide users``: SCRAM credentials, the ``--entity-type users`` part of
``kafka-configs.sh``, against hightide or any Kafka cluster.

::

    hightide users --alter --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    hightide users --describe [--entity-name alice]
    hightide users --alter --entity-name alice --delete-config SCRAM-SHA-256

The password is salted and hashed here (PBKDF2, as Kafka's admin client does); only the
salt, the iteration count and the salted password travel, and the broker keeps StoredKey
and ServerKey. ``iterations`` defaults to 4096 (Kafka's minimum; at most 16384).
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..security.scram import MIN_ITERATIONS, ScramMechanism
from . import main
from ._common import DEFAULT_BOOTSTRAP, command_config_option, run_admin, terminal_width, wrap_fields
from .configs import parse_add_config


def parse_scram_configs(values: tuple[str, ...]) -> list[tuple[ScramMechanism, int, str]]:
    """``SCRAM-SHA-512=[iterations=8192,password=secret]`` items -> (mechanism,
    iterations, password). Raises click.BadParameter for an unknown mechanism, a missing
    password or a bad iteration count."""
    out = []
    for value in values:
        for name, body in parse_add_config(value):
            mechanism = ScramMechanism.from_name(name)
            if mechanism is None:
                raise click.BadParameter(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)",
                                         param_hint="--add-config")
            fields = dict(kv.partition("=")[::2] for kv in body.split(",") if kv)
            if not fields.get("password"):
                raise click.BadParameter(f"{name}: a password=... is required", param_hint="--add-config")
            try:
                iterations = int(fields.get("iterations", MIN_ITERATIONS))
            except ValueError:
                raise click.BadParameter(f"{name}: iterations must be a number", param_hint="--add-config") from None
            out.append((mechanism, iterations, fields["password"]))
    return out


def _mechanisms(values: tuple[str, ...]) -> list[ScramMechanism]:
    out = []
    for value in values:
        for name in (n.strip() for n in value.split(",") if n.strip()):
            mechanism = ScramMechanism.from_name(name)
            if mechanism is None:
                raise click.BadParameter(f"unknown SCRAM mechanism {name!r}", param_hint="--delete-config")
            out.append(mechanism)
    return out


@main.command("users")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=DEFAULT_BOOTSTRAP,
              show_default=True, help="HOST:PORT[,HOST:PORT...] of hightide or any Kafka cluster.")
@command_config_option
@click.option("--describe", "action", flag_value="describe", help="List users' SCRAM mechanisms and iterations.")
@click.option("--alter", "action", flag_value="alter", help="Set or delete a user's SCRAM credentials.")
@click.option("--entity-type", type=click.Choice(["users"]), default="users", show_default=True,
              help="Accepted for kafka-configs.sh compatibility.")
@click.option("--entity-name", "--user", "user", default=None, help="The user name.")
@click.option("--add-config", "add_configs", multiple=True,
              help="SCRAM-SHA-256=[iterations=N,password=P],SCRAM-SHA-512=[password=P]; repeatable.")
@click.option("--delete-config", "delete_configs", multiple=True, help="SCRAM-SHA-256,SCRAM-SHA-512; repeatable.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="kafka-configs.sh's lines, or JSON.")
def users(bootstrap_server: str, action: str | None, entity_type: str, user: str | None,
          add_configs: tuple[str, ...], delete_configs: tuple[str, ...], output: str) -> None:
    """Describe or alter SCRAM credentials (kafka-configs.sh --entity-type users)."""
    if action is None:
        raise click.UsageError("one of --describe or --alter is required")
    if action == "describe":
        _describe(bootstrap_server, user, output)
        return
    if not user:
        raise click.UsageError("--alter needs --entity-name USER")
    upserts, deletions = parse_scram_configs(add_configs), _mechanisms(delete_configs)
    if not (upserts or deletions):
        raise click.UsageError("--alter needs --add-config and/or --delete-config")
    from ..client.security import ScramUpsert
    ups = [ScramUpsert(user, m, password, iterations) for m, iterations, password in upserts]

    async def alter(admin: Any) -> Exception | None:
        # One request per change: Kafka's controller refuses a second change of the same
        # user in one request (DUPLICATE_RESOURCE), so kafka-configs.sh's single call with
        # two mechanisms fails on KRaft; separate requests apply them in order.
        changes = [([u], []) for u in ups] + [([], [(user, m)]) for m in deletions]
        for up, deletion in changes:
            result = await admin.alter_user_scram_credentials(up, deletion, raise_on_error=False)
            if result.get(user) is not None:
                return result[user]  # type: ignore[no-any-return]
        return None
    error = run_admin(bootstrap_server, alter)
    if error is not None:
        raise click.ClickException(f"{type(error).__name__}: {error}")
    if output == "json":
        click.echo(json.dumps({"user": user, "updated": True}))
    else:
        click.echo(f"Completed updating config for user {user}.")


def _describe(bootstrap: str, user: str | None, output: str) -> None:
    result: dict[str, Any] = run_admin(bootstrap, lambda admin: admin.describe_user_scram_credentials(
        [user] if user else None, raise_on_error=False))
    if output == "json":
        click.echo(json.dumps({u: (str(v) if isinstance(v, Exception) else
                                   [{"mechanism": c.mechanism.mechanism_name if c.mechanism else None,
                                     "iterations": c.iterations} for c in v]) for u, v in result.items()}))
        return
    for u, infos in result.items():
        if isinstance(infos, Exception):
            if user:
                raise click.ClickException(f"{type(infos).__name__}: {infos}")
            continue
        text = ", ".join(f"{c.mechanism.mechanism_name if c.mechanism else 'UNKNOWN'}=iterations={c.iterations}"
                         for c in infos)
        click.echo("\n".join(wrap_fields(f"SCRAM credential configs for user-principal '{u}' are {text}",
                                          terminal_width(), " ", "    ")))
