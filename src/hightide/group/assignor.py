"""Server-side partition assignors of the KIP-848 consumer group protocol.

An assignor maps a :class:`GroupSpec` — the members with the topic ids they subscribe
to and the partitions they currently hold in the target assignment — and the partition
counts of the subscribed topics to a new target assignment. Contracts shared by both:

* every partition of a topic that at least one member subscribes to goes to exactly one
  member that subscribes to it; nothing else is assigned;
* the result depends only on the inputs (no randomness, no dict-order dependence).

``uniform`` (Kafka's default) balances the partition counts and is sticky: a member keeps
the partitions it holds while it stays subscribed, and only the partitions needed to
restore balance move. With identical subscriptions counts differ by at most one.

``range`` assigns, per topic, contiguous ranges of partitions to the subscribed members
sorted by instance id (members without one by member id), the first ``n % members``
getting one more, so members subscribed to the same co-partitioned topics get the
same partition numbers (like Kafka's RangeAssignor; it is not sticky).

Subscriptions are resolved from names and a regex by :func:`resolve_subscription`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[uuid.UUID, frozenset[int]]
"""Partitions per topic id; topics with no partitions are left out."""

TP = tuple[uuid.UUID, int]


class AssignorError(ValueError):
    """The assignor was given inputs it cannot assign (a bug in the caller)."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as the assignor sees it."""

    member_id: str
    instance_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    current: Assignment = field(default_factory=dict)  # its partitions in the current target


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    partition_counts: Mapping[uuid.UUID, int]  # of every subscribed topic


class PartitionAssignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        """The new target assignment of every member in ``spec`` (possibly empty)."""
        ...


def compile_regex(pattern: str) -> re.Pattern[str]:
    """Compile a subscription regex (Kafka uses RE2/J; the common subset is the same in
    ``re``). Raises ``re.error`` for an invalid one."""
    return re.compile(pattern)


def resolve_subscription(names: Iterable[str], regex: str | None, topic_names: Iterable[str]) -> set[str]:
    """The topic names a member subscribes to: its explicit names plus every existing
    topic the regex matches in full (internal ``__`` topics excluded from regex matches).
    An invalid regex matches nothing."""
    out = set(names)
    if regex:
        try:
            pattern = compile_regex(regex)
        except re.error:
            return out
        out.update(t for t in topic_names if not t.startswith("__") and pattern.fullmatch(t))
    return out


def _as_tps(a: Assignment) -> set[TP]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _as_assignment(tps: Iterable[TP]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def _all_partitions(spec: GroupSpec) -> list[TP]:
    topics = set().union(*(m.subscribed_topic_ids for m in spec.members.values())) if spec.members else set()
    return sorted((t, p) for t in topics for p in range(spec.partition_counts.get(t, 0)))


# -- uniform --------------------------------------------------------------------------------------
class _Uniform:
    """Working state of one uniform assignment: owner per partition, partitions per member."""

    def __init__(self, spec: GroupSpec) -> None:
        self.ids = sorted(spec.members)
        self.subs = {m: spec.members[m].subscribed_topic_ids for m in self.ids}
        self.owned: dict[str, set[TP]] = {m: set() for m in self.ids}
        self.owner: dict[TP, str] = {}
        self.partitions = _all_partitions(spec)
        valid = set(self.partitions)
        for m in self.ids:  # sticky: keep what is still valid and not claimed already
            for tp in sorted(_as_tps(spec.members[m].current)):
                if tp in valid and tp[0] in self.subs[m] and tp not in self.owner:
                    self._give(tp, m)

    def _give(self, tp: TP, member: str) -> None:
        previous = self.owner.get(tp)
        if previous is not None:
            self.owned[previous].discard(tp)
        self.owner[tp] = member
        self.owned[member].add(tp)

    def eligible(self, tp: TP) -> list[str]:
        return [m for m in self.ids if tp[0] in self.subs[m]]

    def fill(self) -> None:
        """Give each unowned partition to its least-loaded eligible member (the most
        constrained partitions first)."""
        free = [tp for tp in self.partitions if tp not in self.owner]
        free.sort(key=lambda tp: (len(self.eligible(tp)), tp))
        for tp in free:
            candidates = self.eligible(tp)
            if candidates:
                self._give(tp, min(candidates, key=lambda m: (len(self.owned[m]), m)))

    def _best_move(self) -> tuple[TP, str] | None:
        """A partition to move from a member to an eligible one with at least two fewer."""
        for receiver in sorted(self.ids, key=lambda m: (len(self.owned[m]), m)):
            need = len(self.owned[receiver]) + 2
            donors = [m for m in self.ids if len(self.owned[m]) >= need]
            for donor in sorted(donors, key=lambda m: (-len(self.owned[m]), m)):
                movable = [tp for tp in self.owned[donor] if tp[0] in self.subs[receiver]]
                if movable:
                    return max(movable), receiver
        return None

    def balance(self) -> None:
        """Move single partitions from loaded to light members until no move helps. Each
        move lowers the sum of squared counts, so this terminates."""
        while (move := self._best_move()) is not None:
            self._give(*move)

    def result(self) -> dict[str, Assignment]:
        return {m: _as_assignment(self.owned[m]) for m in self.ids}


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        work = _Uniform(spec)
        work.fill()
        work.balance()
        return work.result()


# -- range ----------------------------------------------------------------------------------------
class RangeAssignor:
    name = "range"

    @staticmethod
    def _order(member: MemberSpec) -> tuple[int, str, str]:
        return (0, member.instance_id, member.member_id) if member.instance_id is not None \
            else (1, member.member_id, "")

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        out: dict[str, set[TP]] = {m: set() for m in spec.members}
        topics = sorted({t for m in spec.members.values() for t in m.subscribed_topic_ids})
        for topic in topics:
            subscribers = sorted((m for m in spec.members.values() if topic in m.subscribed_topic_ids),
                                 key=self._order)
            count = spec.partition_counts.get(topic, 0)
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                size = quota + (1 if i < extra else 0)
                out[member.member_id].update((topic, p) for p in range(start, start + size))
                start += size
        return {m: _as_assignment(tps) for m, tps in out.items()}


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
"""The assignors by name, the default (``group.consumer.assignors``'s first) first."""
