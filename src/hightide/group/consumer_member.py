"""A KIP-848 consumer group member and its reconciliation (sans-IO, pure functions).

Theory of operation
-------------------
The coordinator keeps, per member, the partitions it *has been given* (``assigned``) and
those it must give back (``pending_revocation``), plus its epoch. The group's *target
assignment* (computed by an assignor at some assignment epoch) is where each member
should end up. :func:`reconcile` moves a member one step towards its target, and only
ever in an order that keeps every partition with at most one member::

    STABLE ──new target──▶ UNREVOKED_PARTITIONS ──member stops reporting the revoked──┐
       ▲                     (epoch unchanged)        partitions as owned               │
       │                                                                              ▼
       └───── all target partitions free ◀── UNRELEASED_PARTITIONS ◀── assign what is free,
                                             (target epoch; waits for other     epoch = target
                                              members to release partitions)

A partition pending revocation is still owned (its epoch is the member's); a partition
of the target is only given to a member once no other member owns it (``partition_epoch``
returns -1). The member's epoch only reaches the target epoch after its revocations are
acknowledged, so fencing by epoch stays safe.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum

from .assignor import Assignment
from .consumer_records import ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupMemberMetadataValue
from .modern_group import LEAVE_GROUP_MEMBER_EPOCH, ModernMember, from_wire, to_wire

__all__ = ["LEAVE_GROUP_MEMBER_EPOCH", "LEAVE_GROUP_STATIC_MEMBER_EPOCH", "FencedMember", "Member", "MemberState",
           "from_wire", "is_subset", "reconcile", "to_wire", "union"]

LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Owned = Mapping[uuid.UUID, Iterable[int]] | None
"""Partitions a member reports owning in a heartbeat (None: not reported)."""


class MemberState(IntEnum):
    """Values as in Kafka's ``MemberState`` (persisted as int8)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class FencedMember(Exception):
    """The member must drop all its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


@dataclass(frozen=True)
class Member(ModernMember):
    """A consumer group member as persisted by records 5 (subscription) and 8 (current
    assignment): the :class:`~.modern_group.ModernMember` fields and the consumer's own."""

    instance_id: str | None = None
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    pending_revocation: Assignment = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def owned_partitions(self) -> Assignment:
        """What the coordinator counts as held by this member: assigned + pending revocation."""
        return union(self.assigned, self.pending_revocation)

    # -- records ------------------------------------------------------------------------
    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor)

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(self.state),
            to_wire(self.assigned), to_wire(self.pending_revocation))

    def with_metadata(self, v: ConsumerGroupMemberMetadataValue) -> Member:
        return replace(self, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                       client_host=v.client_host, subscribed_topic_names=tuple(sorted(set(v.subscribed_topic_names))),
                       subscribed_topic_regex=v.subscribed_topic_regex, rebalance_timeout_ms=v.rebalance_timeout_ms,
                       server_assignor=v.server_assignor)

    def with_assignment(self, v: ConsumerGroupCurrentMemberAssignmentValue) -> Member:
        return replace(self, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
                       state=MemberState.of(v.state), assigned=from_wire(v.assigned_partitions),
                       pending_revocation=from_wire(v.partitions_pending_revocation))

    def without_assignment(self) -> Member:
        return replace(super().without_assignment(), state=MemberState.STABLE, pending_revocation={})


# -- assignment helpers ---------------------------------------------------------------------------
def union(a: Assignment, b: Assignment) -> Assignment:
    return from_wire(list(a.items()) + list(b.items()))


def is_subset(owned: Owned, assigned: Assignment) -> bool:
    """Kafka's check for a member retrying with its previous epoch: it reported its
    owned partitions and each of them is assigned to it."""
    if owned is None:
        return False
    return all(set(ps) <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    """Whether the member still reports any of ``partitions`` (not reporting: assume yes)."""
    if owned is None:
        return True
    return any(not partitions.get(t, frozenset()).isdisjoint(ps) for t, ps in owned.items())


# -- reconciliation (Kafka's CurrentAssignmentBuilder semantics) ----------------------------------
def reconcile(member: Member, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[uuid.UUID, int], int], owned: Owned) -> Member:
    """The member's next state towards ``target`` at ``target_epoch``.

    ``partition_epoch(topic_id, partition)`` is the epoch of the partition's current
    owner or -1 if free; ``owned`` is what the member reported in this heartbeat.
    Returns the member unchanged when it cannot progress. Raises FencedMember for a
    member in an unknown state that still reports partitions."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or any(owned.values()):
        raise FencedMember("the member is in an unknown state; it must abandon its partitions and rejoin")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(member: Member, epoch: int, target_epoch: int, target: Assignment,
          partition_epoch: Callable[[uuid.UUID, int], int], owned: Owned) -> Member:
    """Compute the next assignment: keep assigned ∩ target, revoke the rest first; else
    add the target partitions no one else owns."""
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic in set(target) | set(member.assigned):
        want, have = target.get(topic, frozenset()), member.assigned.get(topic, frozenset())
        kept[topic], revoke[topic] = have & want, have - want
        missing = want - have
        free = frozenset(p for p in missing if partition_epoch(topic, p) == -1)
        unreleased = unreleased or free != missing
        add[topic] = free
    kept_a, revoke_a, add_a = (from_wire(x.items()) for x in (kept, revoke, add))
    base = member.with_epoch(epoch)
    if revoke_a and _owns_any(owned, revoke_a):
        return replace(base, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept_a, pending_revocation=revoke_a)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return replace(member.with_epoch(target_epoch), state=state, assigned=union(kept_a, add_a),
                   pending_revocation={})
