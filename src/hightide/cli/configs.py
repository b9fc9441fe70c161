"""``hightide configs``: describe and alter topic, group and broker configs, and client
quotas of users and client ids (:mod:`.quota_configs`), with ``kafka-configs.sh``'s
options and output, against hightide or any Kafka cluster.

::

    hightide configs --describe --entity-type topics --entity-name orders [--all]
    hightide configs --alter --entity-type groups --entity-name readers \\
        --add-config share.auto.offset.reset=earliest
    hightide configs --alter --topic orders --add-config 'retention.ms=60000,cleanup.policy=[compact,delete]' \\
        --delete-config segment.ms
"""

from __future__ import annotations

import json
from typing import Any

import click

from . import main
from ._common import DEFAULT_BOOTSTRAP, command_config_option, kafka_error_line, run_admin, terminal_width, wrap_fields
from .quota_configs import QUOTA_KINDS, alter_quotas, describe_quotas

ENTITY_TYPES = {"topics": "topic", "groups": "group", "brokers": "broker"}
"""--entity-type values (kafka-configs.sh's plural names) and how messages name them."""
UNSUPPORTED = ("ips", "broker-loggers", "client-metrics")


def parse_add_config(value: str) -> list[tuple[str, str]]:
    """``k1=v1,k2=[a,b]`` (kafka-configs.sh's --add-config syntax: commas separate configs
    except inside square brackets, which are removed from a list value) → pairs.
    Raises click.BadParameter naming the bad item."""
    items, depth, cur = [], 0, ""
    for ch in value:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, sep, val = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"all configs to be added must be in the format \"key=val\", got {item!r}",
                                     param_hint="--add-config")
        val = val.strip()
        if val.startswith("[") and val.endswith("]"):
            val = val[1:-1]
        out.append((name.strip(), val))
    return out


@main.command("configs")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=DEFAULT_BOOTSTRAP,
              show_default=True, help="HOST:PORT[,HOST:PORT...] of hightide or any Kafka cluster.")
@command_config_option
@click.option("--describe", "action", flag_value="describe", help="List the entity's configs.")
@click.option("--alter", "action", flag_value="alter", help="Change the entity's configs.")
@click.option("--entity-type", "entity_types", type=click.Choice([*ENTITY_TYPES, *QUOTA_KINDS, *UNSUPPORTED]),
              multiple=True, help="topics, groups, brokers, users or clients (users and clients together: a "
                                  "user + client-id quota).")
@click.option("--entity-name", "entity_names", multiple=True,
              help="Topic or group name, broker id, user principal name or client id (one per --entity-type, "
                   "in order).")
@click.option("--entity-default", is_flag=True,
              help="Brokers: the cluster-wide default; users/clients: the default entity (of the last "
                   "--entity-type without a name).")
@click.option("--topic", default=None, help="Same as --entity-type topics --entity-name TOPIC.")
@click.option("--group", default=None, help="Same as --entity-type groups --entity-name GROUP.")
@click.option("--broker", default=None, help="Same as --entity-type brokers --entity-name ID.")
@click.option("--user", default=None, help="Same as --entity-type users --entity-name USER.")
@click.option("--client", default=None, help="Same as --entity-type clients --entity-name CLIENT_ID.")
@click.option("--user-defaults", is_flag=True, help="Same as --entity-type users --entity-default.")
@click.option("--client-defaults", is_flag=True, help="Same as --entity-type clients --entity-default.")
@click.option("--add-config", "add_configs", multiple=True,
              help="k1=v1,k2=[v1,v2,v2] (list values in square brackets); repeatable.")
@click.option("--delete-config", "delete_configs", multiple=True, help="k1,k2 config names to remove; repeatable.")
@click.option("--all", "show_all", is_flag=True, help="--describe: every config, not only the dynamic ones.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="kafka-configs.sh's lines, or JSON.")
def configs(bootstrap_server: str, action: str | None, entity_types: tuple[str, ...], entity_names: tuple[str, ...],
            entity_default: bool, topic: str | None, group: str | None, broker: str | None, user: str | None,
            client: str | None, user_defaults: bool, client_defaults: bool,
            add_configs: tuple[str, ...], delete_configs: tuple[str, ...], show_all: bool, output: str) -> None:
    """Describe or alter configs of a topic, a group or a broker, or the client quotas of
    a user, a client id or both (kafka-configs.sh's job).

    Without --all, --describe lists the configs set on the entity (Kafka's "dynamic"
    configs); with --all, every config with its source. For users and clients, --describe
    without a name lists every entity of that type.
    """
    from ..client import ConfigResource, ResourceType
    if action is None:
        raise click.UsageError("give --describe or --alter")
    quota = _quota_entity(entity_types, entity_names, entity_default, user, client, user_defaults, client_defaults)
    if quota is not None:
        if topic is not None or group is not None or broker is not None:
            raise click.UsageError("give one entity: a topic, group or broker, or users/clients")
        _quotas(bootstrap_server, action, quota, add_configs, delete_configs, output)
        return
    if len(entity_types) > 1 or len(entity_names) > 1:
        raise click.UsageError("give one entity: --entity-type TYPE --entity-name NAME, or --topic/--group/--broker")
    kind, name = _entity(entity_types[0] if entity_types else None, entity_names[0] if entity_names else None,
                         entity_default, topic, group, broker)
    rtype = {"topics": ResourceType.TOPIC, "groups": ResourceType.GROUP, "brokers": ResourceType.BROKER}[kind]
    if action == "describe":
        if add_configs or delete_configs:
            raise click.UsageError("--add-config and --delete-config go with --alter")
        _describe(bootstrap_server, kind, rtype, name, show_all, output)
        return
    adds = [kv for item in add_configs for kv in parse_add_config(item)]
    deletes = [n.strip() for item in delete_configs for n in item.split(",") if n.strip()]
    if not adds and not deletes:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    clash = sorted({n for n, _ in adds} & set(deletes))
    if clash:
        raise click.UsageError(f"a config cannot be both added and deleted: {', '.join(clash)}")
    from ..client import AlterOp
    ops = [(n, AlterOp.SET, v) for n, v in adds] + [(n, AlterOp.DELETE, None) for n in deletes]
    run_admin(bootstrap_server, lambda admin: _alter(admin, ConfigResource(rtype, name), ops))
    click.echo(f"Completed updating {_what(kind, name, default_word='default config')}.")


def _quota_entity(entity_types: tuple[str, ...], entity_names: tuple[str, ...], entity_default: bool,
                  user: str | None, client: str | None, user_defaults: bool, client_defaults: bool
                  ) -> list[tuple[str, str | None]] | None:
    """The users/clients entity as [(kind, name or "" for the default or None for all)],
    or None when no users/clients entity is named. Names pair with --entity-type in
    order; --entity-default names the first type left without one."""
    shortcuts = [("users", user), ("clients", client), ("users", "" if user_defaults else None),
                 ("clients", "" if client_defaults else None)]
    given = [(k, n) for k, n in shortcuts if n is not None]
    if not given and not any(t in QUOTA_KINDS for t in entity_types):
        return None
    if any(t not in QUOTA_KINDS for t in entity_types):
        raise click.UsageError("users and clients can only be combined with each other")
    names: list[str | None] = list(entity_names)
    if len(names) > len(entity_types):
        raise click.UsageError("more --entity-name than --entity-type")
    names += [None] * (len(entity_types) - len(names))
    if entity_default:
        if None not in names:
            raise click.UsageError("--entity-default needs an --entity-type without a name")
        names[names.index(None)] = ""
    pairs = [*zip(entity_types, names), *given]
    kinds = [k for k, _ in pairs]
    if len(kinds) != len(set(kinds)):
        raise click.UsageError("each of users and clients can be given once")
    return sorted(pairs, key=lambda p: p[0] != "users")  # users first, as kafka-configs.sh names them


def _quotas(bootstrap: str, action: str, pairs: list[tuple[str, str | None]], add_configs: tuple[str, ...],
            delete_configs: tuple[str, ...], output: str) -> None:
    if action == "describe":
        if add_configs or delete_configs:
            raise click.UsageError("--add-config and --delete-config go with --alter")
        describe_quotas(bootstrap, pairs, output)
        return
    adds = [kv for item in add_configs for kv in parse_add_config(item)]
    deletes = [n.strip() for item in delete_configs for n in item.split(",") if n.strip()]
    if not adds and not deletes:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    scram = sorted({n for n, _ in adds} | set(deletes)) if any(
        n.startswith("SCRAM-") for n in [*(a for a, _ in adds), *deletes]) else []
    if scram:
        raise click.UsageError("SCRAM credentials are set with `hightide users`, not `hightide configs`")
    alter_quotas(bootstrap, pairs, adds, deletes)


async def _alter(admin: Any, resource: Any, ops: list[tuple[str, Any, str | None]]) -> None:
    """IncrementalAlterConfigs; a refusal for an unknown config name gets a "did you mean"
    from the names the cluster describes for this entity (works against any cluster)."""
    from ..client import KafkaError
    from ..client.errors import ErrorCode
    from ..config import did_you_mean
    try:
        await admin.incremental_alter_configs(resource, ops)
    except KafkaError as exc:
        if exc.code != ErrorCode.invalid_config:
            raise
        got = (await admin.describe_configs([resource], raise_on_error=False)).get(resource)
        known = [] if isinstance(got, KafkaError) or got is None else [e.name for e in got]
        hints = "".join(did_you_mean(n, known) for n, _, _ in ops if known and n not in known)
        if not hints:
            raise
        raise click.ClickException(f"{kafka_error_line(exc)}{hints}") from None


def _entity(entity_type: str | None, entity_name: str | None, entity_default: bool, topic: str | None,
            group: str | None, broker: str | None) -> tuple[str, str]:
    """(entity type, name) from --entity-type/--entity-name or a shortcut; '' names the
    cluster-wide broker default."""
    given = [(k, v) for k, v in (("topics", topic), ("groups", group), ("brokers", broker)) if v is not None]
    if entity_type is not None:
        given.append((entity_type, entity_name))
    elif entity_name is not None:
        raise click.UsageError("--entity-name needs --entity-type")
    if entity_default:
        given = [(k, "") for k, _ in given] or [("brokers", "")]
    if len(given) != 1:
        raise click.UsageError("give one entity: --entity-type TYPE --entity-name NAME, or --topic/--group/--broker")
    kind, name = given[0]
    if kind in UNSUPPORTED:
        raise click.UsageError(f"--entity-type {kind} is not supported by hightide configs (topics, groups, brokers)")
    if name is None:
        raise click.UsageError(f"--entity-type {kind} needs --entity-name" +
                               (" (or --entity-default)" if kind == "brokers" else ""))
    if name == "" and kind != "brokers":
        raise click.UsageError("--entity-default applies to brokers only")
    if kind == "brokers" and name and not name.isdigit():
        raise click.BadParameter(f"a broker is named by its id, got {name!r}", param_hint="--entity-name")
    return kind, name


def _what(kind: str, name: str, default_word: str = "configs") -> str:
    if kind == "brokers" and name == "":
        return f"{default_word} for brokers in the cluster"
    return f"config for {ENTITY_TYPES[kind]} {name}" if default_word == "default config" \
        else f"{ENTITY_TYPES[kind]} {name}"


def _describe(bootstrap: str, kind: str, rtype: Any, name: str, show_all: bool, output: str) -> None:
    from ..client import ConfigResource
    res = ConfigResource(rtype, name)
    entries = run_admin(bootstrap, lambda admin: admin.describe_configs([res]))[res]
    shown = [e for e in entries if show_all or e.source.dynamic]
    if output == "json":
        click.echo(json.dumps({"entity_type": kind, "entity_name": name, "configs": [
            {"name": e.name, "value": None if e.sensitive else e.value, "source": e.source.name,
             "sensitive": e.sensitive, "read_only": e.read_only,
             "synonyms": [{"name": n, "value": v, "source": s.name} for n, v, s in e.synonyms]}
            for e in shown]}, indent=2))
        return
    if kind == "brokers" and name == "":
        head = "Default configs for brokers in the cluster are:"
    else:
        head = f"{'All' if show_all else 'Dynamic'} configs for {ENTITY_TYPES[kind]} {name} are:"
    click.echo(head)
    width = terminal_width()
    for e in shown:
        value = "null" if e.sensitive or e.value is None else e.value
        syn = ", ".join(f"{s.name}:{n}={'null' if e.sensitive or v is None else v}" for n, v, s in e.synonyms)
        line = f"  {e.name}={value} sensitive={str(e.sensitive).lower()} synonyms={{{syn}}}"
        click.echo("\n".join(wrap_fields(line, width, " ", "  ")))
