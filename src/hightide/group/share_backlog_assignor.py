"""The ``backlog`` share group assignor: members spread over share partitions in
proportion to their backlogs (sans-IO; hightide's own, selected with
``group.share.assignors`` / the ``share.assignor`` group config).

Inputs: the members (subscriptions and their partitions in the current target), the
assignable partitions per topic, and a *snapshot* of each partition's backlog taken by
the IO shell (:class:`PartitionBacklog`: its share lag = LEO - SPSO -
DeliveryCompleteCount, which already counts the records in flight, and the records each
member has acquired there). Nothing here reads a clock or a log.

Contract, per subscribed topic with ``M`` subscribed members, the weight ``w(p)`` of a
partition = its lag (an unknown lag weighs the mean of the known positive ones, or 1 if
none is known; never less than the records in flight), ``W`` = the topic's total weight
and ``B`` = the partitions with ``w(p) > 0``:

* ``W == 0`` (no backlog anywhere in the topic): exactly the ``simple`` assignor;
* every partition in ``B`` goes to ``c(p) = min(M, max(1, round(k * M * w(p) / W)))``
  distinct members — ``k * M`` member slots shared in proportion to backlog, at least
  one each; every other assignable partition goes to one member (so new records are
  picked up); nothing else is assigned. ``k`` (slots per member, 1 to
  ``MAX_SLOTS_PER_MEMBER``): of those whose canonical placement's largest load is within
  2% of the best ``k``'s, the one whose smallest load is largest (so 12 equal partitions
  on 8 members are each shared by 2 members, 3 per member, rather than 4 members
  holding 2 and 4 holding 1; and with two heavy partitions every member gets a share
  of one, not only the light ones it would finish early);
* *pins*: a member that has acquired records of a partition (records in flight) keeps
  it, beyond ``c(p)`` if need be — it is mid-way through them;
* with ``M <= |B|`` every member gets at least one partition of ``B``;
* the *load* of a member is ``sum(w(p) / holders(p))`` over its partitions; the result's
  largest load is within ``1 + IMBALANCE`` of the canonical placement's (largest slot
  first onto the least-loaded member: :func:`_ideal`);
* it is sticky: current holders keep their slots while that bound allows (else the
  canonical placement is used, which meets it);
* the result depends only on the inputs.

:func:`acceptable` is the same test applied to the current target: the share group
retargets on lag movement only when the current target fails it (and at most once per
``group.share.backlog.assignor.interval.ms``), so constant lags never churn members.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import share_assignor
from .assignor import Assignment
from .share_assignor import ShareMemberSpec

NAME = "backlog"
IMBALANCE = 0.25
"""The largest member load may exceed the canonical placement's by this fraction."""
MAX_SLOTS_PER_MEMBER = 4
"""The canonical placement tries 1..this many slots per member (see :func:`_ideal`)."""

TP = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class PartitionBacklog:
    """One share partition's backlog at snapshot time."""

    lag: int | None  # share lag (in-flight records included); None while unknown
    in_flight: Mapping[str, int] = field(default_factory=dict)  # member id -> records it has acquired


Backlogs = Mapping[TP, PartitionBacklog]


def weights(topic: uuid.UUID, partitions: list[int], backlogs: Backlogs) -> dict[int, int]:
    """``w(p)`` of each partition (see the module contract)."""
    known = {p: b.lag for p in partitions if (b := backlogs.get((topic, p))) is not None and b.lag is not None}
    positive = [v for v in known.values() if v > 0]
    fill = sum(positive) // len(positive) if positive else 1
    out = {p: max(0, known[p]) if p in known else fill for p in partitions}
    for p in partitions:  # the lag counts the records in flight; a snapshot taken between the two cannot say less
        if (b := backlogs.get((topic, p))) is not None and b.in_flight:
            out[p] = max(out[p], sum(b.in_flight.values()))
    return out


def _slots(members: int, w: dict[int, int], k: int) -> dict[int, int]:
    """``c(p)``: ``k * members`` slots shared in proportion to ``w`` (rounded half up),
    at least one and at most ``members`` per backlogged partition; one per other one."""
    total, budget = sum(w.values()), k * members
    return {p: min(members, max(1, (2 * budget * v + total) // (2 * total))) if v > 0 else 1 for p, v in w.items()}


class _Placement:
    """Holders per partition and load per member of one topic, built slot by slot."""

    def __init__(self, members: list[str], w: dict[int, int], c: dict[int, int]) -> None:
        self.w, self.c = w, c
        self.holders: dict[int, list[str]] = {p: [] for p in w}
        self.owned: dict[str, set[int]] = {m: set() for m in members}
        self.load: dict[str, float] = {m: 0.0 for m in members}

    def slot(self, p: int) -> float:
        return self.w[p] / self.c[p]

    def add(self, m: str, p: int) -> None:
        self.holders[p].append(m)
        self.owned[m].add(p)
        self.load[m] += self.slot(p)

    def fill(self) -> None:
        """Place every missing slot: heaviest first, onto the least-loaded member not
        holding the partition (ties: fewest partitions, then member id); zero-weight
        ones onto the member holding fewest. A heap keeps this O(slots · log members)."""
        order = sorted(self.w, key=lambda p: (-self.slot(p), p))
        heap = [(self.load[m], len(self.owned[m]), m) for m in self.owned]
        heapq.heapify(heap)
        for p in (q for q in order if self.w[q] > 0):
            skipped = []
            while len(self.holders[p]) < self.c[p] and heap:
                entry = heapq.heappop(heap)
                m = entry[2]
                if p in self.owned[m]:
                    skipped.append(entry)
                    continue
                self.add(m, p)
                heapq.heappush(heap, (self.load[m], len(self.owned[m]), m))
            for entry in skipped:
                heapq.heappush(heap, entry)
        for p in (q for q in order if self.w[q] == 0):
            while len(self.holders[p]) < self.c[p]:
                free = [m for m in self.owned if p not in self.owned[m]]
                if not free:
                    break
                self.add(min(free, key=lambda x: (len(self.owned[x]), self.load[x], x)), p)


def member_loads(owned: Mapping[str, set[int] | frozenset[int]], w: Mapping[int, int]) -> dict[str, float]:
    """``sum(w(p) / holders(p))`` per member of one topic."""
    holders: dict[int, int] = {}
    for ps in owned.values():
        for p in ps:
            holders[p] = holders.get(p, 0) + 1
    return {m: sum(w.get(p, 0) / holders[p] for p in ps) for m, ps in owned.items()}


def _pins(topic: uuid.UUID, members: list[str], w: dict[int, int], backlogs: Backlogs) -> list[tuple[str, int]]:
    out = []
    for p in sorted(w):
        b = backlogs.get((topic, p))
        if b is not None:
            out += [(m, p) for m in sorted(b.in_flight) if b.in_flight[m] > 0 and m in members]
    return out


def _placed(members: list[str], w: dict[int, int], c: dict[int, int], pins: list[tuple[str, int]]) -> _Placement:
    pl = _Placement(members, w, c)
    for m, p in pins:
        pl.add(m, p)
    pl.fill()
    return pl


def _ideal(members: list[str], w: dict[int, int], pins: list[tuple[str, int]]) -> _Placement:
    """The canonical placement: of ``k`` = 1..``MAX_SLOTS_PER_MEMBER`` slots per member,
    those whose placement's largest load is within 2% of the best, the one whose
    smallest load is largest (a member with little to do idles once it is done; the
    smallest ``k`` on ties)."""
    tries = [_placed(members, w, _slots(len(members), w, k), pins) for k in range(1, MAX_SLOTS_PER_MEMBER + 1)]
    best = min(max(pl.load.values()) for pl in tries)
    good = [pl for pl in tries if max(pl.load.values()) <= best * 1.02 + 1e-9]
    # of those, the least idle capacity (largest smallest load), then the fewest slots
    return max(good, key=lambda pl: min(pl.load.values()) - 1e-9 * sum(pl.c.values()))


def _sticky(topic: uuid.UUID, members: list[str], w: dict[int, int], c: dict[int, int],
            pins: list[tuple[str, int]], specs: Mapping[str, ShareMemberSpec], cap: float) -> _Placement:
    """Pins, then current holders keep their slots (up to ``c(p)`` per partition, a
    member's load up to ``cap`` — its first slot always), then :meth:`_Placement.fill`.
    A placement whose loads are all within ``cap`` is kept whole (so feeding a result
    back returns it unchanged)."""
    pl = _Placement(members, w, c)
    for m, p in pins:
        pl.add(m, p)
    for p in sorted(w, key=lambda q: (-pl.slot(q), q)):
        for m in members:
            if len(pl.holders[p]) >= c[p]:
                break
            if p in specs[m].current.get(topic, ()) and p not in pl.owned[m] \
                    and (pl.load[m] + pl.slot(p) <= cap + 1e-9 or not pl.owned[m]):
                pl.add(m, p)
    pl.fill()
    return pl


def _ok(owned: Mapping[str, set[int] | frozenset[int]], w: dict[int, int], best: float) -> bool:
    """The module contract's bounds on one topic's placement (``best``: the canonical
    placement's largest load): every assignable partition held, nothing else; every
    member holding a backlogged partition when there are enough of them; the largest
    load within ``1 + IMBALANCE`` of ``best``."""
    holders: dict[int, int] = {p: 0 for p in w}
    for ps in owned.values():
        for p in ps:
            if p not in holders:
                return False
            holders[p] += 1
    if any(holders[p] == 0 for p in w):
        return False
    backlogged = {p for p, v in w.items() if v > 0}
    if len(owned) <= len(backlogged) and any(not (ps & backlogged) for ps in owned.values()):
        return False
    loads = member_loads(owned, w)
    return max(loads.values(), default=0.0) <= best * (1 + IMBALANCE) + 1e-9


def _topics(members: Mapping[str, ShareMemberSpec],
            assignable: Mapping[uuid.UUID, frozenset[int]]) -> list[tuple[uuid.UUID, list[int], list[str]]]:
    out = []
    for topic in sorted({t for s in members.values() for t in s.subscribed_topic_ids}, key=lambda t: t.bytes):
        partitions = sorted(assignable.get(topic, ()))
        subscribers = sorted(m for m, s in members.items() if topic in s.subscribed_topic_ids)
        if partitions and subscribers:
            out.append((topic, partitions, subscribers))
    return out


def assign(members: Mapping[str, ShareMemberSpec], assignable: Mapping[uuid.UUID, frozenset[int]],
           backlogs: Backlogs) -> dict[str, Assignment]:
    """The new target assignment of every member (see the module contract)."""
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in members}
    for topic, partitions, subscribers in _topics(members, assignable):
        w = weights(topic, partitions, backlogs)
        if sum(w.values()) == 0:
            sub = {m: members[m] for m in subscribers}
            for m, a in share_assignor.assign(sub, {topic: frozenset(partitions)}).items():
                out[m].update(a)
            continue
        pins = _pins(topic, subscribers, w, backlogs)
        best = _ideal(subscribers, w, pins)
        best_max = max(best.load.values())
        pl = _sticky(topic, subscribers, w, best.c, pins, members, best_max * (1 + IMBALANCE))
        chosen = pl if _ok(pl.owned, w, best_max) else best
        for m, ps in chosen.owned.items():
            if ps:
                out[m][topic] = frozenset(ps)
    return out


def acceptable(members: Mapping[str, ShareMemberSpec], assignable: Mapping[uuid.UUID, frozenset[int]],
               backlogs: Backlogs) -> bool:
    """True when the members' ``current`` assignments meet the module contract's bounds
    for these backlogs (so a retarget would gain too little to be worth the churn).
    Pins are not required: a member only ever holds in flight what it was assigned."""
    for topic, partitions, subscribers in _topics(members, assignable):
        w = weights(topic, partitions, backlogs)
        owned = {m: set(members[m].current.get(topic, ())) for m in subscribers}
        if sum(w.values()) == 0:
            if any(not any(p in ps for ps in owned.values()) for p in partitions):
                return False
            continue
        best = _ideal(subscribers, w, _pins(topic, subscribers, w, backlogs))
        if not _ok(owned, w, max(best.load.values())):
            return False
    return True
