"""``hightide acls``: add, remove and list ACLs with ``kafka-acls.sh``'s options and
output, against hightide or any Kafka cluster with an authorizer.

::

    hightide acls --add --allow-principal User:alice --operation Read --operation Describe --topic orders
    hightide acls --add --deny-principal User:bob --deny-host 10.0.0.9 --operation All \\
        --topic secret- --resource-pattern-type prefixed
    hightide acls --add --allow-principal User:app --producer --topic orders --transactional-id app-tx
    hightide acls --list [--topic orders] [--resource-pattern-type match] [--principal User:alice]
    hightide acls --remove --allow-principal User:alice --operation Read --topic orders --force
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from . import main
from ._common import DEFAULT_BOOTSTRAP, command_config_option, run_admin, terminal_width, wrap_fields

OPERATIONS = {"".join(w.capitalize() for w in op.name.split("_")): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
"""kafka-acls.sh's operation names (Read, DescribeConfigs, ...) -> AclOperation."""
PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED, "match": PatternType.MATCH,
                 "any": PatternType.ANY}


def pattern_text(rt: ResourceType, name: str, pt: PatternType) -> str:
    return f"ResourcePattern(resourceType={rt.name}, name={name}, patternType={pt.name})"


def entry_text(b: AclBinding) -> str:
    return f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, permissionType={b.permission.name})"


def resources(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, txn_ids: tuple[str, ...]
              ) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def operations_for(rt: ResourceType, ops: list[AclOperation], producer: bool, consumer: bool,
                   idempotent: bool) -> list[AclOperation]:
    """The operations to grant on a resource: explicit ``--operation`` values, plus the
    ``--producer``/``--consumer`` sets of kafka-acls.sh (producer: WRITE, DESCRIBE,
    CREATE on topics, WRITE and DESCRIBE on transactional ids, IDEMPOTENT_WRITE on the
    cluster with ``--idempotent``; consumer: READ and DESCRIBE on topics, READ on groups)."""
    out = list(ops)
    if producer:
        out += {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE] if idempotent else []}.get(rt, [])
    if consumer:
        out += {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                ResourceType.GROUP: [AclOperation.READ]}.get(rt, [])
    unsupported = [o for o in out if o != AclOperation.ALL and o not in SUPPORTED_OPERATIONS[rt]]
    if unsupported:
        names = ", ".join(sorted(o.name for o in SUPPORTED_OPERATIONS[rt]))
        raise click.UsageError(f"ResourceType {rt.name} only supports operations {names}")
    return list(dict.fromkeys(out))


def bindings(res: list[tuple[ResourceType, str]], pt: PatternType, ops: list[AclOperation], producer: bool,
             consumer: bool, idempotent: bool, allow: list[tuple[str, str]], deny: list[tuple[str, str]]
             ) -> list[AclBinding]:
    """Every (resource, principal, host, operation) binding the options describe."""
    out = []
    for rt, name in res:
        for op in operations_for(rt, ops, producer, consumer, idempotent):
            for perm, entries in ((AclPermissionType.ALLOW, allow), (AclPermissionType.DENY, deny)):
                out += [AclBinding(rt, name, pt, p, h, op, perm) for p, h in entries]
    return out


def _entries(principals: tuple[str, ...], hosts: tuple[str, ...]) -> list[tuple[str, str]]:
    for p in principals:
        if ":" not in p:
            raise click.BadParameter(f"expected a string in format principalType:principalName but got {p}")
    return [(p, h) for p in principals for h in (hosts or (WILDCARD,))]


def _print_grouped(acls: list[AclBinding], heading: str) -> None:
    groups: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in acls:
        groups.setdefault(b.pattern, []).append(b)
    width = terminal_width()  # a terminal's: Kafka's long lines continue, indented, after a comma
    for pattern, entries in groups.items():
        click.echo("\n".join(wrap_fields(f"{heading} `{pattern_text(*pattern)}`: ", width, ", ", "    ")))
        for b in entries:
            click.echo("\n".join(wrap_fields(f" \t{entry_text(b)} ", width, ", ", "\t")))
        click.echo("")


def _json(acls: list[AclBinding]) -> list[dict[str, Any]]:
    return [{"resource_type": b.resource_type.name, "resource_name": b.resource_name,
             "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
             "operation": b.operation.name, "permission_type": b.permission.name} for b in acls]


@main.command("acls")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=DEFAULT_BOOTSTRAP,
              show_default=True, help="HOST:PORT[,HOST:PORT...] of hightide or any Kafka cluster.")
@command_config_option
@click.option("--add", "action", flag_value="add", help="Add the ACLs described by the options.")
@click.option("--remove", "action", flag_value="remove", help="Remove the ACLs described by the options.")
@click.option("--list", "action", flag_value="list", help="List ACLs (of the given resources, or all).")
@click.option("--allow-principal", multiple=True, help="Type:name (e.g. User:alice, User:*); repeatable.")
@click.option("--deny-principal", multiple=True, help="Type:name; repeatable.")
@click.option("--allow-host", multiple=True, help="IP address the allow principals connect from (default *).")
@click.option("--deny-host", multiple=True, help="IP address the deny principals connect from (default *).")
@click.option("--principal", "principals", multiple=True, help="--list: only ACLs of this principal.")
@click.option("--operation", "operations", multiple=True, type=click.Choice(sorted(OPERATIONS), case_sensitive=False),
              help="Operation; repeatable (default All).")
@click.option("--topic", "topics", multiple=True, help="Topic name (or prefix, or *); repeatable.")
@click.option("--group", "groups", multiple=True, help="Consumer/share group id (or prefix, or *); repeatable.")
@click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster).")
@click.option("--transactional-id", "txn_ids", multiple=True, help="Transactional id (or prefix, or *); repeatable.")
@click.option("--resource-pattern-type", type=click.Choice(sorted(PATTERN_TYPES)), default="literal",
              show_default=True, help="--add: literal or prefixed; --list/--remove also match or any.")
@click.option("--producer", is_flag=True, help="--add/--remove: the producer ACLs on the topics/transactional ids.")
@click.option("--consumer", is_flag=True, help="--add/--remove: the consumer ACLs on the topics and groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster.")
@click.option("--force", is_flag=True, help="--remove without asking.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="kafka-acls.sh's lines, or JSON.")
def acls(bootstrap_server: str, action: str | None, allow_principal: tuple[str, ...], deny_principal: tuple[str, ...],
         allow_host: tuple[str, ...], deny_host: tuple[str, ...], principals: tuple[str, ...],
         operations: tuple[str, ...], topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
         txn_ids: tuple[str, ...], resource_pattern_type: str, producer: bool, consumer: bool, idempotent: bool,
         force: bool, output: str) -> None:
    """Add, remove or list ACLs (kafka-acls.sh's job)."""
    if action is None:
        raise click.UsageError("one of --add, --remove or --list is required")
    pt = PATTERN_TYPES[resource_pattern_type]
    ops = [OPERATIONS[next(k for k in OPERATIONS if k.lower() == o.lower())] for o in operations]
    if not (ops or producer or consumer):
        ops = [AclOperation.ALL]  # kafka-acls.sh's default --operation
    res = resources(topics, groups, cluster, txn_ids)
    if action == "list":
        _list(bootstrap_server, res, pt, principals, output)
        return
    allow, deny = _entries(allow_principal, allow_host), _entries(deny_principal, deny_host)
    if action == "add":
        _add(bootstrap_server, res, pt, ops, producer, consumer, idempotent, allow, deny, output)
    else:
        _remove(bootstrap_server, res, pt, ops, producer, consumer, idempotent, allow, deny, force, output)


def _add(bootstrap: str, res: list[tuple[ResourceType, str]], pt: PatternType, ops: list[AclOperation],
         producer: bool, consumer: bool, idempotent: bool, allow: list[tuple[str, str]], deny: list[tuple[str, str]],
         output: str) -> None:
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.UsageError("A '--resource-pattern-type' value of 'literal' or 'prefixed' is required for --add")
    if not res:
        raise click.UsageError("You must specify one of: --topic, --cluster, --group, --transactional-id")
    if not (allow or deny):
        raise click.UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs")
    todo = bindings(res, pt, ops, producer, consumer, idempotent, allow, deny)
    results = run_admin(bootstrap, lambda admin: admin.create_acls(todo, raise_on_error=False))
    failed = {b: e for b, e in results.items() if e is not None}
    if output == "json":
        click.echo(json.dumps({"created": _json([b for b in todo if b not in failed]),
                               "errors": [{"acl": _json([b])[0], "error": str(e)} for b, e in failed.items()]}))
    else:
        _print_grouped([b for b in todo if b not in failed], "Adding ACLs for resource")
        for b, e in failed.items():
            click.echo(f"Error while adding ACLs {entry_text(b)} on `{pattern_text(*b.pattern)}`: {e}", err=True)
    if failed:
        raise SystemExit(1)


def _remove(bootstrap: str, res: list[tuple[ResourceType, str]], pt: PatternType, ops: list[AclOperation],
            producer: bool, consumer: bool, idempotent: bool, allow: list[tuple[str, str]],
            deny: list[tuple[str, str]], force: bool, output: str) -> None:
    if not res:
        raise click.UsageError("You must specify one of: --topic, --cluster, --group, --transactional-id")
    if allow or deny:  # exactly these bindings (operation All unless named, as kafka-acls.sh)
        flts = [AclBindingFilter(b.resource_type, b.resource_name, pt, b.principal, b.host, b.operation, b.permission)
                for b in bindings(res, PatternType.LITERAL, ops, producer, consumer, idempotent, allow, deny)]
    else:  # every ACL on the resources
        flts = [AclBindingFilter(rt, name, pt) for rt, name in res]
    if not force and not click.confirm(f"Are you sure you want to remove ACLs from {len(res)} resource(s)?"):
        return
    results = run_admin(bootstrap, lambda admin: admin.delete_acls(list(dict.fromkeys(flts))))
    removed = [b for v in results.values() for b in v]
    if output == "json":
        click.echo(json.dumps({"removed": _json(removed)}))
    else:
        _print_grouped(removed, "Removed ACLs for resource")


def _list(bootstrap: str, res: list[tuple[ResourceType, str]], pt: PatternType, principals: tuple[str, ...],
          output: str) -> None:
    flts = [AclBindingFilter(rt, name, pt if res else PatternType.ANY) for rt, name in res] or [AclBindingFilter()]
    if principals:
        flts = [AclBindingFilter(f.resource_type, f.resource_name, f.pattern_type, p) for f in flts for p in principals]

    async def go(admin: Any) -> list[AclBinding]:
        found: list[AclBinding] = []
        for f in flts:
            found += [b for b in await admin.describe_acls(f) if b not in found]
        return found
    found = run_admin(bootstrap, go)
    if output == "json":
        click.echo(json.dumps(_json(found)))
    else:
        _print_grouped(found, "Current ACLs for resource")
