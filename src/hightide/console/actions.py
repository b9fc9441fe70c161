"""Offset resets from the console: a dry-run plan first, then its execution on confirm.

The targets are computed by the CLI's own :class:`hightide.cli._common.ResetSpec` (same
clamping, same ``--to-datetime`` rule) and the active-group check is the CLI's
(:func:`hightide.cli.groups._active_state`: Kafka allows a reset only in Empty or Dead,
with Kafka's message). A plan is kept in memory under a random id; executing it applies
exactly the offsets that were previewed (never recomputed: ``latest`` may have moved),
after checking again that the group is inactive.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import click

from ..cli._common import ResetSpec
from ..cli.groups import _active_state
from ..client import TopicPartition

__all__ = ["Plan", "PlanBook", "ResetError", "execute", "plan_reset", "spec_from_form"]

TARGETS = ("earliest", "latest", "datetime", "offset")


class ResetError(Exception):
    """A reset that cannot be planned or executed; the message is for the page."""


@dataclass(frozen=True, slots=True)
class Plan:
    id: str
    group: str
    offsets: dict[TopicPartition, int]
    rows: tuple[dict[str, Any], ...]
    """Per partition: topic, partition, current_offset (None: no commit), new_offset."""
    description: str
    warning: str | None
    created: float


def spec_from_form(form: dict[str, str], topics: list[str]) -> tuple[ResetSpec, str]:
    """A ResetSpec from the page's form (``scope``: ``all`` or a topic name; ``to``: one of
    :data:`TARGETS`; ``value`` for datetime/offset) and its description. Raises
    ResetError on bad input."""
    scope, to, value = form.get("scope", "all"), form.get("to", ""), (form.get("value") or "").strip()
    if to not in TARGETS:
        raise ResetError(f"choose where to reset to: {', '.join(TARGETS)}")
    if scope != "all" and scope not in topics:
        raise ResetError(f"the group has no offsets for topic {scope!r}")
    to_datetime = to_offset = None
    if to == "datetime":
        if not value:
            raise ResetError("give a time: ISO-8601 (UTC if no zone) or ms since the epoch")
        to_datetime = value
    elif to == "offset":
        try:
            to_offset = int(value)
        except ValueError:
            raise ResetError(f"an offset must be an integer, got {value!r}") from None
    spec = ResetSpec((scope,) if scope != "all" else (), scope == "all",
                     to if to in ("earliest", "latest") else None, to_datetime, to_offset)
    what = {"earliest": "the earliest offset", "latest": "the latest offset",
            "datetime": f"the first offset at or after {value}", "offset": f"offset {value} (clamped to the log)"}[to]
    where = "every partition with offsets" if scope == "all" else f"topic {scope}"
    return spec, f"Reset {where} to {what}"


async def plan_reset(admin: Any, group: str, spec: ResetSpec, description: str) -> Plan:
    """The dry run: the new offset of every chosen partition, nothing changed. An active
    group gets a plan with a warning (execution will be refused), as the CLI's dry run."""
    state = await _active_state(admin, group)
    warning = None
    if state is not None:
        warning = (f"Group '{group}' has active members (state {state}): offsets can only be reset "
                   f"when it is inactive.")
    current = await admin.list_consumer_group_offsets(group)
    try:
        new = await spec.targets(admin, list(current))
    except click.ClickException as exc:
        raise ResetError(exc.format_message()) from None
    rows = tuple({"topic": tp.topic, "partition": tp.partition,
                  "current_offset": current[tp].offset if tp in current and current[tp].offset >= 0 else None,
                  "new_offset": off} for tp, off in sorted(new.items()))
    return Plan(secrets.token_urlsafe(16), group, dict(new), rows, description, warning, time.monotonic())


async def execute(admin: Any, plan: Plan) -> None:
    """Apply ``plan``'s offsets. Raises ResetError with Kafka's message when the group is
    active now (nothing is changed then)."""
    state = await _active_state(admin, plan.group)
    if state is not None:
        raise ResetError(f"Assignments can only be reset if the group '{plan.group}' is inactive, "
                         f"but the current state is {state}.")
    if plan.offsets:
        await admin.alter_consumer_group_offsets(plan.group, plan.offsets)


class PlanBook:
    """Plans awaiting confirmation: at most ``max_plans``, each valid ``ttl_s`` seconds,
    each executed at most once."""

    def __init__(self, max_plans: int = 64, ttl_s: float = 600.0) -> None:
        self.max_plans, self.ttl_s = max_plans, ttl_s
        self._plans: OrderedDict[str, Plan] = OrderedDict()

    def add(self, plan: Plan) -> None:
        self._plans[plan.id] = plan
        while len(self._plans) > self.max_plans:
            self._plans.popitem(last=False)

    def take(self, plan_id: str, group: str) -> Plan:
        """Remove and return the plan; ResetError when it is unknown, expired or of another group."""
        plan = self._plans.pop(plan_id, None)
        if plan is None or plan.group != group:
            raise ResetError("This preview is unknown or was already used: preview the reset again.")
        if time.monotonic() - plan.created > self.ttl_s:
            raise ResetError("This preview has expired: preview the reset again.")
        return plan
