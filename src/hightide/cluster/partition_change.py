"""Partition changes and leader elections, sans-IO: Kafka's ``PartitionChangeBuilder``
(behaviour, not code), without Eligible Leader Replicas (KIP-966).

Theory of operation
-------------------
Every change to a partition's leader, ISR or replica set — a broker fenced, unfenced,
shutting down or unregistered, an AlterPartition from the leader, an ElectLeaders, a
reassignment starting, completing or being cancelled — is decided by one function,
:func:`build_change`: given the partition as the image has it, the *targets* the caller
wants (ISR, replicas, adding/removing replicas, leader recovery state), the kind of
election and which brokers may lead (``acceptable``: registered, unfenced, not shutting
down, and not the broker being removed), it returns the one
:class:`~.records.PartitionChangeRecord` that gets there, or None when nothing changes.
In order:

1. **Reassignment completion.** While a reassignment is in progress (adding or
   removing replicas), once the target ISR holds every target replica (the replicas less
   those being removed; at least one ISR member must remain), the removing replicas leave
   the replicas and the ISR and the adding/removing lists are cleared.
2. **Election.** The current leader stays if it is still acceptable and in the target
   ISR (PREFERRED: unless the first replica — the preferred leader — is). Otherwise the
   first replica, in replica order, that is in the target ISR and acceptable leads. With
   no such replica: UNCLEAN elects the first acceptable replica outside the ISR, sets the
   ISR to just it and the leader recovery state to RECOVERING (data can be lost); ONLINE
   and PREFERRED leave the partition without a leader (-1). A record that names a leader
   (even the same one) bumps the leader epoch when applied.
3. **Leader epoch bump on reassignment.** A change that drops a replica from the replica
   set names the current leader, so followers see a new leader epoch (Kafka does the same;
   ISR shrinks alone do not bump it, as in Kafka since 3.6).
4. **ISR.** Written when it differs and is not empty: the last ISR member is never removed
   (a partition whose only in-sync replica is fenced keeps it in the ISR and has no
   leader until it returns, so no acknowledged write is lost).

Every applied record bumps the partition epoch (:meth:`PartitionImage.merge`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from enum import Enum

from .image import PartitionImage
from .records import NO_LEADER_CHANGE, RECOVERING, PartitionChangeRecord

log = logging.getLogger("hightide.controller")

NO_LEADER = -1
Acceptable = Callable[[int], bool]


class Election(Enum):
    """Kafka's ``PartitionChangeBuilder.Election``."""
    #: Elect the preferred replica (the first) if it is in the ISR and acceptable.
    PREFERRED = "preferred"
    #: Keep the partition online from the ISR.
    ONLINE = "online"
    #: As ONLINE, else any acceptable replica, even outside the ISR (may lose data).
    UNCLEAN = "unclean"


def complete_reassignment(replicas: Sequence[int], isr: Sequence[int], removing: Sequence[int],
                          adding: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, isr) once the reassignment in progress can complete (Kafka's
    ``PartitionReassignmentReplicas.maybeCompleteReassignment``), else None: not
    reassigning, the ISR would be empty without the removing replicas, or a target replica
    is not in the ISR yet."""
    if not removing and not adding:
        return None
    new_isr = tuple(r for r in isr if r not in removing)
    new_replicas = tuple(r for r in replicas if r not in removing)
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def elect(part: PartitionImage, replicas: Sequence[int], isr: Sequence[int], election: Election,
          acceptable: Acceptable) -> tuple[int, bool]:
    """(leader, unclean) chosen for ``part`` with target ``replicas``/``isr`` (Kafka's
    ``electLeader``): see the module doc, step 2. ``NO_LEADER`` when nobody qualifies."""
    def valid(r: int) -> bool:
        return r in isr and acceptable(r)
    if election is Election.PREFERRED and replicas and valid(replicas[0]):
        return replicas[0], False
    if part.leader != NO_LEADER and valid(part.leader):
        return part.leader, False
    clean = next((r for r in replicas if valid(r)), None)
    if clean is not None:
        return clean, False
    if election is Election.UNCLEAN:
        unclean = next((r for r in replicas if acceptable(r)), None)
        if unclean is not None:
            return unclean, True
    return NO_LEADER, False


def build_change(topic_id: str, part: PartitionImage, acceptable: Acceptable, *,
                 isr: Sequence[int] | None = None, replicas: Sequence[int] | None = None,
                 removing: Sequence[int] | None = None, adding: Sequence[int] | None = None,
                 recovery_state: int | None = None,
                 election: Election = Election.ONLINE) -> PartitionChangeRecord | None:
    """The record moving ``part`` (of topic ``topic_id``) to the targets (None: as it is),
    electing a leader with ``election`` among ``acceptable`` brokers; None when the record
    would change nothing. Never mutates ``part``."""
    t_isr = tuple(part.isr if isr is None else isr)
    t_replicas = tuple(part.replicas if replicas is None else replicas)
    t_removing = tuple(part.removing_replicas if removing is None else removing)
    t_adding = tuple(part.adding_replicas if adding is None else adding)
    done = complete_reassignment(t_replicas, t_isr, t_removing, t_adding)
    if done is not None:
        t_replicas, t_isr = done
        t_removing = t_adding = ()
    leader, unclean = elect(part, t_replicas, t_isr, election, acceptable)
    new_leader = NO_LEADER_CHANGE
    new_isr: tuple[int, ...] | None = None
    new_state = -1
    if leader != part.leader:
        new_leader = leader
        if unclean:
            log.warning("unclean leader election: partition %s-%d led by %d, which is not in the ISR %s "
                        "(records it lacks are lost)", topic_id, part.partition, leader, list(t_isr))
            new_isr = (leader,)
            if part.leader_recovery_state != RECOVERING:
                new_state = RECOVERING
    if new_leader == NO_LEADER_CHANGE and not set(part.replicas) <= set(t_replicas):
        new_leader = part.leader  # a replica leaves: followers must see a new leader epoch
    if new_isr is None and t_isr and t_isr != tuple(part.isr):
        new_isr = t_isr
    target_state = part.leader_recovery_state if recovery_state is None else recovery_state
    if new_state < 0 and target_state != part.leader_recovery_state:
        new_state = target_state
    record = PartitionChangeRecord(
        topic_id, part.partition, new_leader, new_isr,
        t_replicas if t_replicas and t_replicas != tuple(part.replicas) else None,
        t_removing if t_removing != tuple(part.removing_replicas) else None,
        t_adding if t_adding != tuple(part.adding_replicas) else None,
        new_state)
    return None if record == PartitionChangeRecord(topic_id, part.partition) else record


__all__ = ["Election", "NO_LEADER", "Acceptable", "build_change", "elect", "complete_reassignment"]
