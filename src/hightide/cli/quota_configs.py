"""``hightide configs --entity-type users|clients``: client quotas in ``kafka-configs.sh``'s
form (DescribeClientQuotas / AlterClientQuotas), against hightide or any Kafka cluster.

::

    hightide configs --describe --entity-type users [--entity-name alice | --entity-default]
    hightide configs --alter --entity-type clients --entity-name app \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    hightide configs --alter --entity-type users --entity-name alice --entity-type clients --entity-default \\
        --delete-config request_percentage
    hightide configs --describe --user alice --client app     # the same shortcuts as kafka-configs.sh

An entity is one or two (type, name) pairs: a name, ``""`` for the default entity
(``--entity-default``, ``--user-defaults``, ``--client-defaults``), or None (describe
only: every entity of that type). Output lines are kafka-configs.sh's: ``Quota configs
for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0``.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import click

from ._common import run_admin

QUOTA_KINDS = {"users": "user", "clients": "client-id"}
"""--entity-type values of client quotas → Kafka's quota entity types."""
_LABEL = {"user": "user-principal", "client-id": "client-id"}


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` prints it (``1024.0``, ``1.5E7``), as
    kafka-configs.sh shows quota values."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(map(str, digits))
    mantissa = ds[0] + "." + (ds[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{exponent + len(ds) - 1}"


def describe_text(entity: tuple[tuple[str, str | None], ...], values: dict[str, float]) -> str:
    """kafka-configs.sh's line for one entity."""
    names = dict(entity)
    parts = [(f"{_LABEL[t]} '{names[t]}'" if names[t] is not None else f"the default {_LABEL[t]}")
             for t in ("user", "client-id") if t in names]
    items = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
    return f"Quota configs for {', '.join(parts)} are {items}"


def describe_quotas(bootstrap: str, pairs: list[tuple[str, str | None]], output: str) -> None:
    """Describe the quotas of exactly these entity types (kafka-configs.sh's
    ``ClientQuotaFilter.containsOnly``)."""
    from ..client import QuotaFilterComponent as F
    components = [F.of_type(QUOTA_KINDS[k]) if n is None else F.of_default(QUOTA_KINDS[k]) if n == ""
                  else F.of_entity(QUOTA_KINDS[k], n) for k, n in pairs]
    found = run_admin(bootstrap, lambda admin: admin.describe_client_quotas(components, strict=True))
    if output == "json":
        click.echo(json.dumps({"entities": [{"entity": dict(e), "configs": v} for e, v in found.items()]}, indent=2))
        return
    for entity, values in found.items():
        click.echo(describe_text(entity, values))


def alter_quotas(bootstrap: str, pairs: list[tuple[str, str | None]], adds: list[tuple[str, str]],
                 deletes: list[str]) -> None:
    """Set and delete quota keys of one entity, as kafka-configs.sh: a deleted key must be
    set ("Invalid config(s): k"), a value must parse as a number."""
    if any(n is None for _, n in pairs):
        raise click.UsageError("--alter of users/clients needs --entity-name or --entity-default for each entity type")
    entity = {QUOTA_KINDS[k]: (n or None) for k, n in pairs}
    ops: dict[str, float | None] = {}
    for key, raw in adds:
        try:
            ops[key] = float(raw)
        except ValueError:
            raise click.ClickException(f"Cannot parse quota configuration value for {key}: {raw}") from None
    from ..client import QuotaFilterComponent as F

    async def go(admin: Any) -> None:
        if deletes:
            components = [F.of_default(t) if n is None else F.of_entity(t, n) for t, n in entity.items()]
            current = next(iter((await admin.describe_client_quotas(components, strict=True)).values()), {})
            missing = [k for k in deletes if k not in current]
            if missing:
                raise click.ClickException(f"Invalid config(s): {','.join(missing)}")
        await admin.alter_client_quotas([(entity, {**ops, **dict.fromkeys(deletes)})])
    run_admin(bootstrap, go)
    kind, name = pairs[0]
    if name:
        click.echo(f"Completed updating config for {kind[:-1]} {name}.")
    else:
        click.echo(f"Completed updating default config for {kind} in the cluster.")
