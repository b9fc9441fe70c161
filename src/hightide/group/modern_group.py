"""What a KIP-848 consumer group and a KIP-932 share group have in common (sans-IO).

Theory of operation
-------------------
Kafka's ``ModernGroup`` / ``ModernGroupMember``: both kinds of group are a set of
members, each with an epoch, a subscription and the partitions it was given; a *group
epoch* bumped whenever membership or the subscribed topics change; a *target
assignment* (one per member) computed at an *assignment epoch*; and per-member session
timers. Both persist that state as the same six record shapes in ``__consumer_offsets``
(group epoch, subscription/state metadata, member metadata, target assignment epoch,
target assignment per member, current member assignment), keyed by the group or by
group and member. What differs is named by the subclass:

* :attr:`ModernGroup.RECORDS` — its record key classes (:class:`RecordTypes`);
* hooks for what its records carry beyond the shared fields (``_replay_group``,
  ``_replay_subscription``, ``_index`` / ``_unindex`` of members), for the records that
  bump the group epoch after a member is fenced (``_fence_bump``), for a rebalance
  timeout (``_rebalance_expired``, ``_loaded_timer``) and for ``describe``.

As everywhere in ``group/``: request methods read the group and return a
:class:`~.consumer_api.Result` (response, records to append, live records never
appended); :meth:`ModernGroup.replay` is the only mutator, run on the records once they
are durable (then on the live records) and on the whole partition at load.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Self, TypeVar

from kio.schema.errors import ErrorCode

from .assignor import Assignment
from .consumer_api import HeartbeatError, ModernGroupConfig, Record, Result, Timers, TopicsView
from .consumer_records import TargetAssignmentMemberValue, TargetAssignmentMetadataValue, TopicPartitions

LEAVE_GROUP_MEMBER_EPOCH = -1


# -- assignments on the wire --------------------------------------------------------------------
def to_wire(a: Assignment) -> TopicPartitions:
    """Sorted ``((topic_id, (partition, ...)), ...)`` without empty topics."""
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(a.items(), key=lambda kv: kv[0].bytes) if ps)


def from_wire(tps: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> Assignment:
    """The assignment of wire topic-partitions (repeated topics merged, empty ones dropped)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for t, ps in tps:
        merged = out.get(t, frozenset()) | frozenset(ps)
        if merged:
            out[t] = merged
    return out


# -- members ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModernMember:
    """The fields every member has (Kafka's ``ModernGroupMember``). A subclass names its
    record values: ``metadata_value``/``with_metadata`` (member metadata record) and
    ``assignment_value``/``with_assignment`` (current assignment record)."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()  # sorted, deduplicated
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)

    def with_epoch(self, epoch: int) -> Self:
        """Move to ``epoch``, remembering the current one as the previous epoch."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch)

    def metadata_value(self) -> Any:
        """The value of the member metadata record."""
        raise NotImplementedError

    def assignment_value(self) -> Any:
        """The value of the current assignment record."""
        raise NotImplementedError

    def with_metadata(self, value: Any) -> Self:
        """The member as a member metadata record says."""
        raise NotImplementedError

    def with_assignment(self, value: Any) -> Self:
        """The member as a current assignment record says."""
        raise NotImplementedError

    def without_assignment(self) -> Self:
        """After a tombstone of its current assignment: as Kafka, the member keeps its
        subscription and loses its epoch and partitions."""
        return replace(self, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                       assigned={})


@dataclass(frozen=True)
class RecordTypes:
    """The record key classes of one kind of group, and the live timer key."""

    group: type  # {group} -> group epoch
    subscription: type  # {group} -> subscription metadata (consumer) / state partition metadata (share)
    target_epoch: type  # {group} -> TargetAssignmentMetadataValue
    target_member: type  # {group, member} -> TargetAssignmentMemberValue
    member: type  # {group, member} -> member metadata
    assignment: type  # {group, member} -> current assignment
    timers: type  # live: {group, member} -> Timers


M = TypeVar("M", bound=ModernMember)


# -- the group ----------------------------------------------------------------------------------
class ModernGroup(Generic[M]):
    """Members, epochs, targets and timers of one group, as replayed from its records."""

    RECORDS: ClassVar[RecordTypes]
    KIND: ClassVar[str]  # "consumer" or "share", for messages

    def __init__(self, group_id: str, config: ModernGroupConfig) -> None:
        self.group_id = group_id
        self.config = config
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, M] = {}
        self.targets: dict[str, Assignment] = {}
        self.timers: dict[str, Timers] = {}

    # -- views ----------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        """The earliest timer, for the runtime to call :meth:`poll` then (None: no timer)."""
        deadlines = [d for t in self.timers.values() for d in (t.session_deadline_ms, t.rebalance_deadline_ms)
                     if d is not None]
        return min(deadlines, default=None)

    def copy(self) -> Self:
        """A deep copy (what :meth:`poll` fences members on, one after the other)."""
        return copy.deepcopy(self)

    def _new_member(self, member_id: str) -> M:
        raise NotImplementedError

    def _member_or_new(self, member_id: str, member_epoch: int) -> M:
        """The member, or a new one for a join (epoch 0). Raises UNKNOWN_MEMBER_ID."""
        member = self.members.get(member_id)
        if member is not None:
            return member
        if member_epoch != 0:
            raise self._unknown_member(member_id)
        return self._new_member(member_id)

    def _existing_member(self, member_id: str) -> M:
        """The member. Raises UNKNOWN_MEMBER_ID."""
        member = self.members.get(member_id)
        if member is None:
            raise self._unknown_member(member_id)
        return member

    def _unknown_member(self, member_id: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group "
                              f"{self.group_id}.")

    def _check_member_epoch(self, member: M, epoch: int, previous_ok: bool = True) -> None:
        """Raises FENCED_MEMBER_EPOCH unless ``epoch`` is the member's, or its previous one
        (the response with the bump was lost) while ``previous_ok``. Kafka's message."""
        if epoch > member.member_epoch or (epoch < member.member_epoch
                                           and (epoch != member.previous_member_epoch or not previous_ok)):
            which = "greater" if epoch > member.member_epoch else "smaller"
            raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                 f"The {self.KIND} group member has a {which} member epoch ({epoch}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 "all its partitions and rejoin.")

    def _check_capacity(self, member_id: str) -> None:
        """GROUP_MAX_SIZE_REACHED for a new member of a full group (Kafka's message)."""
        if len(self.members) >= self.config.max_size and member_id not in self.members:
            raise HeartbeatError(ErrorCode.group_max_size_reached, f"The {self.KIND} group has reached its maximum "
                                 f"capacity of {self.config.max_size} members.")

    # -- records ----------------------------------------------------------------------------
    def _member_record(self, m: M) -> Record:
        return self.RECORDS.member(self.group_id, m.member_id), m.metadata_value()

    def _assignment_record(self, m: M) -> Record:
        return self.RECORDS.assignment(self.group_id, m.member_id), m.assignment_value()

    def _target_record(self, member_id: str, target: Assignment) -> Record:
        return self.RECORDS.target_member(self.group_id, member_id), TargetAssignmentMemberValue(to_wire(target))

    def _target_records(self, epoch: int, new: dict[str, Assignment], old: dict[str, Assignment],
                        out: Result) -> dict[str, Assignment]:
        """Append the records of a new target assignment at ``epoch``: the members whose
        target changed, then the assignment epoch. Returns ``new``."""
        out.records += [self._target_record(mid, new[mid]) for mid in sorted(new) if new[mid] != old.get(mid, {})]
        out.records.append((self.RECORDS.target_epoch(self.group_id), TargetAssignmentMetadataValue(epoch)))
        return new

    def _member_tombstones(self, member_id: str) -> list[Record]:
        r, gid = self.RECORDS, self.group_id
        return [(r.assignment(gid, member_id), None), (r.target_member(gid, member_id), None),
                (r.member(gid, member_id), None)]

    def tombstones(self) -> list[Record]:
        """Tombstones for every record of the group (DeleteGroups, conversion), in Kafka's
        order: current assignments, targets, target epoch, member metadata, subscription
        metadata, and the group epoch last — replaying it drops the group."""
        r, gid, members = self.RECORDS, self.group_id, sorted(self.members)
        out: list[Record] = [(r.assignment(gid, m), None) for m in members]
        out += [(r.target_member(gid, m), None) for m in sorted(set(members) | set(self.targets))]
        out.append((r.target_epoch(gid), None))
        out += [(r.member(gid, m), None) for m in members]
        out.append((r.subscription(gid), None))
        out.append((r.group(gid), None))
        return out

    # -- fencing and timers -----------------------------------------------------------------
    def _fence(self, member: M, topics: TopicsView, response: Any = None) -> Result:
        """Remove the member: its tombstones, its timers cancelled, and the records that
        bump the group epoch without it (the target is recomputed on the next heartbeat)."""
        out = Result(response, self._member_tombstones(member.member_id),
                     [(self.RECORDS.timers(self.group_id, member.member_id), None)])
        rest = {mid: m for mid, m in self.members.items() if mid != member.member_id}
        self._fence_bump(rest, topics, out)
        return out

    def _fence_bump(self, rest: dict[str, M], topics: TopicsView, out: Result) -> None:
        """Append the group epoch bump (and metadata) for the group of ``rest``."""
        raise NotImplementedError

    def _rebalance_expired(self, member: M, timers: Timers, now_ms: int) -> bool:
        """Whether the member missed its rebalance deadline (consumer groups only)."""
        return False

    def _expired(self, now_ms: int) -> list[str]:
        return [mid for mid, t in sorted(self.timers.items()) if mid in self.members
                and (t.session_deadline_ms <= now_ms or self._rebalance_expired(self.members[mid], t, now_ms))]

    def poll(self, now_ms: int, topics: TopicsView) -> Result:
        """Fence members whose session expired (no heartbeat for the session timeout) or,
        in a consumer group, that did not revoke within their rebalance timeout. Records
        as for a leave, for each member in member id order."""
        expired = self._expired(now_ms)
        if not expired:
            return Result()
        work, out = self.copy(), Result()
        for mid in expired:
            r = work._fence(work.members[mid], topics)
            work.apply(r)
            out.records += r.records
            out.live += r.live
        return out

    def _loaded_timer(self, member: M, now_ms: int, session_timeout_ms: int) -> Timers:
        return Timers(now_ms + session_timeout_ms)

    def loaded_timers(self, now_ms: int, session_timeout_ms: int | None = None) -> Result:
        """After loading by replay: live records arming every member's timers (as Kafka
        schedules them on load). The session timeout defaults to the group config's."""
        timeout = session_timeout_ms or self.config.session_timeout_ms
        return Result(live=[(self.RECORDS.timers(self.group_id, mid), self._loaded_timer(m, now_ms, timeout))
                            for mid, m in sorted(self.members.items())])

    # -- describe ---------------------------------------------------------------------------
    @staticmethod
    def _named(a: Assignment, topics: TopicsView) -> list[tuple[uuid.UUID, str, list[int]]]:
        """``[(topic_id, topic_name, [partitions])]``; topics no longer in the metadata left out."""
        return [(tid, t.topic_name, list(parts)) for tid, parts in to_wire(a) if (t := topics.by_id(tid)) is not None]

    @property
    def state(self) -> str:
        raise NotImplementedError

    def _assignor_name(self) -> str:
        raise NotImplementedError

    def _describe_member(self, m: M, topics: TopicsView) -> dict[str, Any]:
        """Describe fields of a member beyond the shared ones."""
        return {}

    def describe(self, topics: TopicsView) -> dict[str, Any]:
        """The DescribedGroup fields of ConsumerGroupDescribe / ShareGroupDescribe (error
        fields excluded); assignments as ``[(topic_id, topic_name, [partitions])]``."""
        members = [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "assignment": self._named(m.assigned, topics), **self._describe_member(m, topics)}
                   for _, m in sorted(self.members.items())]
        return {"group_id": self.group_id, "group_state": self.state, "group_epoch": self.group_epoch,
                "assignment_epoch": self.assignment_epoch, "assignor_name": self._assignor_name(),
                "members": members}

    # -- the only mutator -------------------------------------------------------------------
    def apply(self, result: Result) -> None:
        """Replay a result's records, then its live records (what the runtime does once
        the records are durable)."""
        for key, value in result.records + result.live:
            self.replay(key, value)

    def replay(self, key: Any, value: Any) -> None:
        """Apply one record of this group (or a live record)."""
        r, kind = self.RECORDS, type(key)
        if kind is r.group:
            self._replay_group(value)
        elif kind is r.subscription:
            self._replay_subscription(value)
        elif kind is r.target_epoch:
            self.assignment_epoch = value.assignment_epoch if value is not None else 0
        elif kind is r.target_member:
            if value is None:
                self.targets.pop(key.member_id, None)
            else:
                self.targets[key.member_id] = from_wire(value.topic_partitions)
        elif kind is r.member:
            self._replay_member(key.member_id, value)
        elif kind is r.assignment:
            self._replay_assignment(key.member_id, value)
        elif kind is r.timers:
            if value is None:
                self.timers.pop(key.member_id, None)
            else:
                self.timers[key.member_id] = value
        else:
            self._replay_other(key, value)

    def _replay_group(self, value: Any) -> None:
        self.group_epoch = value.epoch if value is not None else 0

    def _replay_subscription(self, value: Any) -> None:
        raise NotImplementedError

    def _replay_other(self, key: Any, value: Any) -> None:
        """A record of a type only the subclass knows (ignored here)."""

    def _index(self, member: M, metadata: bool) -> None:
        """Index a member just replayed (its metadata record if ``metadata``, else its
        assignment). Nothing to index here."""

    def _unindex(self, member: M, metadata: bool) -> None:
        """Undo :meth:`_index` for the member about to be replaced."""

    def _replay_member(self, member_id: str, value: Any) -> None:
        old = self.members.get(member_id)
        if old is not None:
            self._unindex(old, True)
        if value is None:
            self.members.pop(member_id, None)
            self.timers.pop(member_id, None)
            return
        member = (old or self._new_member(member_id)).with_metadata(value)
        self.members[member_id] = member
        self._index(member, True)

    def _replay_assignment(self, member_id: str, value: Any) -> None:
        old = self.members.get(member_id) or self._new_member(member_id)
        self._unindex(old, False)
        new = old.without_assignment() if value is None else old.with_assignment(value)
        self.members[member_id] = new
        self._index(new, False)

    def persisted_state(self) -> dict[str, Any]:
        """Everything the records carry (for reload-equality checks): no timers."""
        return {"group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "members": dict(self.members), "targets": {k: v for k, v in self.targets.items() if v}}


G = TypeVar("G", bound=ModernGroup)


class ModernGroups(Generic[G]):
    """The groups of one kind in one ``__consumer_offsets`` partition, built by replay."""

    RECORDS: ClassVar[RecordTypes]

    def __init__(self) -> None:
        self.groups: dict[str, G] = {}

    def _new(self, group_id: str) -> G:
        raise NotImplementedError

    def _creates_group(self, key: Any, value: Any) -> bool:
        """Whether a record of a group not known yet creates it."""
        return True

    def get(self, group_id: str) -> G | None:
        return self.groups.get(group_id)

    def get_or_new(self, group_id: str) -> G:
        """The group, or a fresh empty one that is *not* kept (its records create it)."""
        return self.groups.get(group_id) or self._new(group_id)

    def replay(self, key: Any, value: Any) -> None:
        """Route a record (or live record) to its group, creating the group on its first
        record and dropping it on the group epoch tombstone."""
        group_id = key.group_id
        if isinstance(key, self.RECORDS.group) and value is None:
            self.groups.pop(group_id, None)
            return
        group = self.groups.get(group_id)
        if group is None:
            if not self._creates_group(key, value):
                return
            group = self.groups[group_id] = self._new(group_id)
        group.replay(key, value)

    def next_deadline(self) -> int | None:
        """The earliest timer of any group (None: none armed)."""
        return min((d for g in self.groups.values() if (d := g.next_deadline()) is not None), default=None)
