"""The server-side assignor of share groups: ``simple`` (Kafka's ``SimpleAssignor``).

Share partitions are consumed by several members at once, so unlike a consumer group
assignor a partition may go to more than one member. Contract, per subscribed topic
with ``P`` assignable partitions and ``M`` subscribed members:

* every assignable partition goes to ``sharing = ceil(M / P)`` distinct subscribed
  members (so with more members than partitions, partitions are shared — 3 members on
  1 partition all get it); nothing else is assigned;
* the assignments of the topic's members differ in size by at most one;
* it is sticky: a member keeps the partitions it holds in the current target while it
  stays subscribed and balance allows;
* the result depends only on the inputs (members and partitions are walked in sorted
  order).

Topics are assigned independently (Kafka's heterogeneous builder balances across topics
too; for members with identical subscriptions the results have the same shape).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from .assignor import Assignment

NAME = "simple"


@dataclass(frozen=True, slots=True)
class ShareMemberSpec:
    subscribed_topic_ids: frozenset[uuid.UUID]
    current: Assignment = field(default_factory=dict)  # its partitions in the current target


def _quotas(members: list[str], slots: int) -> dict[str, int]:
    base, extra = divmod(slots, len(members))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}


def _assign_topic(topic: uuid.UUID, partitions: list[int], members: list[str],
                  specs: Mapping[str, ShareMemberSpec]) -> dict[str, set[int]]:
    """Holders per member for one topic (see the module contract)."""
    sharing = -(-len(members) // len(partitions))
    holders: dict[int, list[str]] = {p: [] for p in partitions}
    owned: dict[str, set[int]] = {m: set() for m in members}
    # Members keeping most first get their quota of one more, so stickiness costs least.
    kept = {m: sorted(p for p in specs[m].current.get(topic, ()) if p in holders) for m in members}
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = _quotas(order, sharing * len(partitions))
    for m in order:
        for p in kept[m]:
            if len(owned[m]) < quota[m] and len(holders[p]) < sharing:
                holders[p].append(m)
                owned[m].add(p)
    for p in partitions:
        while len(holders[p]) < sharing:
            candidates = [m for m in order if p not in owned[m] and len(owned[m]) < quota[m]]
            if not candidates:  # the quotas are exhausted by an unlucky sticky layout
                candidates = [m for m in order if p not in owned[m]]
            m = min(candidates, key=lambda c: (len(owned[c]) - quota[c], len(owned[c]), c))
            holders[p].append(m)
            owned[m].add(p)
    return owned


def assign(members: Mapping[str, ShareMemberSpec], assignable: Mapping[uuid.UUID, frozenset[int]]) -> dict[str, Assignment]:
    """The new target assignment of every member. ``assignable`` holds, per topic, the
    partitions that may be assigned (the share partitions whose state is initialized)."""
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in members}
    topics = sorted({t for s in members.values() for t in s.subscribed_topic_ids}, key=lambda t: t.bytes)
    for topic in topics:
        partitions = sorted(assignable.get(topic, ()))
        subscribers = sorted(m for m, s in members.items() if topic in s.subscribed_topic_ids)
        if not partitions or not subscribers:
            continue
        for m, parts in _assign_topic(topic, partitions, subscribers, members).items():
            if parts:
                out[m][topic] = frozenset(parts)
    return out
