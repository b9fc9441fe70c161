"""One share group (KIP-932): the ShareGroupHeartbeat state machine (sans-IO).

Theory of operation
-------------------
Shaped like :mod:`.consumer_group` (Kafka's ``ShareGroup`` driven by
``GroupMetadataManager``): :meth:`ShareGroup.heartbeat` and :meth:`ShareGroup.poll` read
the group and return a :class:`~.consumer_api.Result` — the response, the records to
append (:mod:`.share_records`) and *live* records (member timers, init attempts) that are
never appended. :meth:`ShareGroup.replay` is the only mutator; the runtime replays the
records once they are durable, then the live records, and replays ``__consumer_offsets``
the same way at start-up (then :meth:`ShareGroup.loaded_timers`).

Both stand on :class:`~.modern_group.ModernGroup` (members, epochs, targets, timers,
fencing, tombstones, replay of the shared records); this module adds the metadata hash
and share-partition state initialization.

Simpler than a consumer group: a share partition may be consumed by several members at
once, so there is no revocation and no reconciliation. A heartbeat (1) creates or
updates the member — a new or changed subscription, or a change in the subscribed
topics' metadata (their hash), bumps the *group epoch*; (2) if the group epoch is ahead
of the *assignment epoch*, recomputes every member's target with the group's assignor
— ``simple`` (:mod:`.share_assignor`, the default) or ``backlog``
(:mod:`.share_backlog_assignor`, given a snapshot of the partitions' backlogs by the IO
shell in :class:`ShareAssignorInput`); (3) moves the member straight to its target at
the target epoch.

With the ``backlog`` assignor the target also follows the lag: a heartbeat that finds
the current target no longer :func:`~.share_backlog_assignor.acceptable` for the
snapshot bumps the group epoch and recomputes — at most once per
``ShareGroupConfig.backlog_interval_ms`` after the last recomputation, the check itself
at most once per ``LAG_CHECK_MS`` (soft timers, live records: a reloaded coordinator may
retarget once more at once). Constant lags
never retarget (an assignor result is acceptable for the backlogs it was computed from).

Only partitions whose share-group state is *initialized* are assigned, as in Kafka: a
heartbeat that subscribes to partitions not yet initialized records them as
*initializing* (ShareGroupStatePartitionMetadata) and answers which ones, in
``ShareHeartbeatResponse.to_initialize``; the IO shell initializes their state
(InitializeShareGroupState through the share coordinator), then calls
:meth:`ShareGroup.initialized_result` (records them as initialized) and heartbeats for the
member again so it gets the new partitions at once. A failed initialization is taken
back with :meth:`ShareGroup.uninitialized_result`; an attempt older than
``initialize_retry_ms`` (or from before a restart) is retried by the next heartbeat.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from . import share_assignor, share_backlog_assignor
from .assignor import Assignment
from .consumer_api import (
    HeartbeatError,
    HeartbeatResponse,
    LiveMemberKey,
    ModernGroupConfig,
    Record,
    Result,
    Timers,
    TopicsView,
)
from .consumer_member import MemberState
from .modern_group import LEAVE_GROUP_MEMBER_EPOCH, ModernGroup, ModernGroups, ModernMember, RecordTypes, from_wire, \
    to_wire
from .share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
    TopicInfo,
    TopicPartitionsInfo,
)

PROTOCOL_TYPE = "share"
LAG_CHECK_MS = 1000
"""A ``backlog`` group checks its target against the lag at most once per this long."""
Partitions = dict[uuid.UUID, frozenset[int]]
"""Partitions per topic id (like :data:`.assignor.Assignment`)."""


# -- inputs and outputs -------------------------------------------------------------------------
@dataclass(frozen=True)
class ShareGroupConfig(ModernGroupConfig):
    max_size: int = 200  # group.share.max.size
    initialize_retry_ms: int = 30000  # group.share.initialize.retry.interval.ms
    backlog_interval_ms: int = 15000  # group.share.backlog.assignor.interval.ms


@dataclass(frozen=True)
class ShareAssignorInput:
    """The assignor a heartbeat uses (``share.assignor``) and, for ``backlog``, the
    snapshot of the group's share-partition backlogs taken by the IO shell."""

    name: str = share_assignor.NAME
    backlogs: share_backlog_assignor.Backlogs = field(default_factory=dict)


@dataclass(frozen=True)
class ShareHeartbeatRequest:
    """ShareGroupHeartbeat fields (None = unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class ShareHeartbeatResponse(HeartbeatResponse):
    """The ConsumerGroupHeartbeat response fields (the same in ShareGroupHeartbeat), and
    the partitions the IO shell must initialize (not on the wire)."""

    to_initialize: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)


class ShareTimersKey(LiveMemberKey):
    """Key of a live record: the value is the member's :class:`Timers` (None: cancelled)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ShareRetargetKey:
    """Key of a live record: the value is (what, when): an assignor name — the target was
    recomputed with it; "lag" — a recomputation because the lag moved follows; "checked"
    — the target was checked against the lag and kept."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ShareInitKey:
    """Key of a live record: the value maps (topic id, partition) to when its
    initialization was asked for (merged into the group's)."""

    group_id: str


@dataclass(frozen=True)
class ShareMember(ModernMember):
    """A member as persisted by records 10 (metadata) and 14 (current assignment): just
    the :class:`~.modern_group.ModernMember` fields (always STABLE)."""

    def metadata_value(self) -> ShareGroupMemberMetadataValue:
        return ShareGroupMemberMetadataValue(self.rack_id, self.client_id, self.client_host,
                                             self.subscribed_topic_names)

    def assignment_value(self) -> ShareGroupCurrentMemberAssignmentValue:
        return ShareGroupCurrentMemberAssignmentValue(self.member_epoch, self.previous_member_epoch,
                                                      int(MemberState.STABLE), to_wire(self.assigned))

    def with_metadata(self, v: ShareGroupMemberMetadataValue) -> ShareMember:
        return replace(self, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
                       subscribed_topic_names=tuple(sorted(set(v.subscribed_topic_names))))

    def with_assignment(self, v: ShareGroupCurrentMemberAssignmentValue) -> ShareMember:
        return replace(self, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
                       assigned=from_wire(v.assigned_partitions))


RECORDS = RecordTypes(
    group=ShareGroupMetadataKey, subscription=ShareGroupStatePartitionMetadataKey,
    target_epoch=ShareGroupTargetAssignmentMetadataKey, target_member=ShareGroupTargetAssignmentMemberKey,
    member=ShareGroupMemberMetadataKey, assignment=ShareGroupCurrentMemberAssignmentKey, timers=ShareTimersKey)


def metadata_hash(topic_names: Iterable[str], topics: TopicsView) -> int:
    """A stable 64-bit hash of the subscribed topics that exist (name, id, partition
    count): it changes when one is created, deleted or gets partitions. (Kafka hashes
    the same facts plus racks with its own function; the value only ever meets itself.)"""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(set(topic_names)):
        t = topics.by_name(name)
        if t is not None:
            h.update(name.encode() + b"\0" + t.topic_id.bytes + struct.pack(">i", t.num_partitions))
    return struct.unpack(">q", h.digest())[0]


def _info(parts: Partitions, topics: TopicsView, names: dict[uuid.UUID, str]) -> tuple[TopicPartitionsInfo, ...]:
    out = []
    for tid in sorted(parts, key=lambda t: t.bytes):
        if parts[tid]:
            t = topics.by_id(tid)
            out.append(TopicPartitionsInfo(tid, t.topic_name if t else names.get(tid, ""), tuple(sorted(parts[tid]))))
    return tuple(out)


def _merge(a: Partitions, b: Partitions) -> Partitions:
    return {t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in set(a) | set(b)}


def _minus(a: Partitions, b: Partitions) -> Partitions:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


# -- the group ----------------------------------------------------------------------------------
class ShareGroup(ModernGroup[ShareMember]):
    """The state of one share group, as replayed from its records: the
    :class:`~.modern_group.ModernGroup` state plus the subscribed topics' metadata hash
    and which share partitions have their state initialized."""

    RECORDS = RECORDS
    KIND = "share"

    def __init__(self, group_id: str, config: ShareGroupConfig | None = None) -> None:
        super().__init__(group_id, config or ShareGroupConfig())
        self.config: ShareGroupConfig
        self.metadata_hash = 0
        self.initializing: Partitions = {}
        self.initialized: Partitions = {}
        self.deleting: dict[uuid.UUID, str] = {}
        self.topic_names: dict[uuid.UUID, str] = {}  # names as the state metadata record last named them
        self.init_asked: dict[tuple[uuid.UUID, int], int] = {}  # soft: when initialization was asked for
        self.assignor_used: str | None = None  # soft: the assignor of the last recomputation
        self.retarget_ms = -2**62  # soft: when the target was last recomputed
        self.lag_retargets = 0  # soft: recomputations because the lag moved
        self.lag_checked_ms = -2**62  # soft: when the target was last checked against the lag

    # -- views ----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """Empty or Stable (Kafka's ShareGroupState names)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self, members: Iterable[ShareMember] | None = None) -> set[str]:
        return {n for m in (self.members.values() if members is None else members) for n in m.subscribed_topic_names}

    def _new_member(self, member_id: str) -> ShareMember:
        return ShareMember(member_id)

    # -- ShareGroupHeartbeat ----------------------------------------------------------------
    def heartbeat(self, req: ShareHeartbeatRequest, now_ms: int, topics: TopicsView,
                  session_timeout_ms: int | None = None, heartbeat_interval_ms: int | None = None,
                  assignor: ShareAssignorInput | None = None) -> Result:
        """Handle one validated heartbeat (see :func:`validate`). Errors come back as a
        response with the error code and no records: GROUP_ID_NOT_FOUND (epoch ≠ 0 for
        a group that does not exist), GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID,
        FENCED_MEMBER_EPOCH. The timeouts default to the group config's; the assignor to
        ``simple``."""
        try:
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(req, topics)
            return self._join_or_heartbeat(req, now_ms, topics, session_timeout_ms or self.config.session_timeout_ms,
                                           heartbeat_interval_ms or self.config.heartbeat_interval_ms,
                                           assignor or ShareAssignorInput())
        except HeartbeatError as e:
            return Result(ShareHeartbeatResponse(e.code, str(e)))

    def _member(self, req: ShareHeartbeatRequest) -> ShareMember:
        if not self.members and self.group_epoch == 0 and req.member_epoch != 0:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Share group {self.group_id} not found.")
        self._check_capacity(req.member_id)
        member = self._member_or_new(req.member_id, req.member_epoch)
        if req.member_id in self.members:
            self._check_member_epoch(member, req.member_epoch)
        return member

    def _join_or_heartbeat(self, req: ShareHeartbeatRequest, now_ms: int, topics: TopicsView,
                           session_timeout_ms: int, heartbeat_interval_ms: int, assignor: ShareAssignorInput) -> Result:
        member = self._member(req)
        out = Result()
        updated = replace(member, client_id=req.client_id, client_host=req.client_host)
        if req.rack_id is not None:
            updated = replace(updated, rack_id=req.rack_id)
        if req.subscribed_topic_names is not None:
            updated = replace(updated, subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names))))
        members = {**self.members, updated.member_id: updated}
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        if updated != member:
            out.records.append(self._member_record(updated))
        names = self.subscribed_topic_names(members.values())
        new_hash = metadata_hash(names, topics)
        bump = subscription_changed or new_hash != self.metadata_hash or self._assignment_pending(names, topics) \
            or (self.assignor_used is not None and assignor.name != self.assignor_used)
        if not bump and self._lag_check_due(now_ms, assignor):
            bump = self._lag_moved(members, topics, assignor)
            out.live.append((ShareRetargetKey(self.group_id), ("lag" if bump else "checked", now_ms)))
        group_epoch = self.group_epoch + 1 if bump else self.group_epoch
        if bump:
            out.records.append((ShareGroupMetadataKey(self.group_id), ShareGroupMetadataValue(group_epoch, new_hash)))
        targets = self.targets
        target_epoch = self.assignment_epoch
        if group_epoch > self.assignment_epoch:
            targets = self._new_targets(group_epoch, members, topics, out, assignor)
            out.live.append((ShareRetargetKey(self.group_id), (assignor.name, now_ms)))
            target_epoch = group_epoch
        reconciled = self._reconcile(updated, target_epoch, targets.get(updated.member_id, {}), subscription_changed,
                                     topics)
        if reconciled != updated:
            out.records.append(self._assignment_record(reconciled))
        out.live.append((ShareTimersKey(self.group_id, updated.member_id), Timers(now_ms + session_timeout_ms)))
        to_init = self._to_initialize(names, topics, now_ms, out)
        full = req.member_epoch == 0 or req.subscribed_topic_names is not None
        assignment = to_wire(reconciled.assigned) if full or reconciled.assigned != member.assigned else None
        out.response = ShareHeartbeatResponse(ErrorCode.none, None, reconciled.member_id, reconciled.member_epoch,
                                              heartbeat_interval_ms, assignment, to_init)
        return out

    def _assignable(self, names: set[str], topics: TopicsView) -> Partitions:
        """Initialized partitions of subscribed topics that still exist."""
        out: Partitions = {}
        for name in names:
            t = topics.by_name(name)
            if t is not None and t.topic_id in self.initialized:
                parts = frozenset(p for p in self.initialized[t.topic_id] if p < t.num_partitions)
                if parts:
                    out[t.topic_id] = parts
        return out

    def _assignment_pending(self, names: set[str], topics: TopicsView) -> bool:
        """Kafka's ``initializedAssignmentPending``: initialized partitions of subscribed
        topics differ from what the current target assigns."""
        assigned: dict[uuid.UUID, set[int]] = {}
        for a in self.targets.values():
            for t, ps in a.items():
                assigned.setdefault(t, set()).update(ps)
        return any(assigned.get(t, set()) != set(ps) for t, ps in self._assignable(names, topics).items())

    def _specs(self, members: dict[str, ShareMember],
               topics: TopicsView) -> tuple[dict[str, share_assignor.ShareMemberSpec], Partitions]:
        """The assignor's view of ``members`` (current = their targets) and the
        assignable partitions."""
        ids = {n: t.topic_id for n in self.subscribed_topic_names(members.values()) if (t := topics.by_name(n))}
        specs = {mid: share_assignor.ShareMemberSpec(
            frozenset(ids[n] for n in m.subscribed_topic_names if n in ids), self.targets.get(mid, {}))
            for mid, m in members.items()}
        return specs, self._assignable(set(ids), topics)

    def _new_targets(self, epoch: int, members: dict[str, ShareMember], topics: TopicsView,
                     out: Result, assignor: ShareAssignorInput) -> dict[str, Assignment]:
        specs, assignable = self._specs(members, topics)
        if assignor.name == share_backlog_assignor.NAME:
            new = share_backlog_assignor.assign(specs, assignable, assignor.backlogs)
        else:
            new = share_assignor.assign(specs, assignable)
        return self._target_records(epoch, new, self.targets, out)

    def _lag_check_due(self, now_ms: int, assignor: ShareAssignorInput) -> bool:
        """Whether this heartbeat of a ``backlog`` group checks the target against the
        lag: the last recomputation is at least ``backlog_interval_ms`` old (the
        hysteresis bounding reassignments) and the last check at least
        ``LAG_CHECK_MS`` (so a large group's heartbeats do not each pay for it)."""
        return assignor.name == share_backlog_assignor.NAME and self.group_epoch == self.assignment_epoch \
            and now_ms - self.retarget_ms >= self.config.backlog_interval_ms \
            and now_ms - self.lag_checked_ms >= LAG_CHECK_MS

    def _lag_moved(self, members: dict[str, ShareMember], topics: TopicsView, assignor: ShareAssignorInput) -> bool:
        """True when the current target is no longer acceptable for the backlog snapshot."""
        specs, assignable = self._specs(members, topics)
        return not share_backlog_assignor.acceptable(specs, assignable, assignor.backlogs)

    @staticmethod
    def _reconcile(member: ShareMember, target_epoch: int, target: Assignment, subscription_changed: bool,
                   topics: TopicsView) -> ShareMember:
        """Kafka's ``ShareGroupAssignmentBuilder``: straight to the target (only topics
        the member subscribes to) at the target epoch."""
        if target_epoch == member.member_epoch and not subscription_changed:
            return member
        ids = {t.topic_id for n in member.subscribed_topic_names if (t := topics.by_name(n)) is not None}
        assigned = {t: ps for t, ps in target.items() if t in ids}
        if target_epoch != member.member_epoch:
            return replace(member.with_epoch(target_epoch), assigned=assigned)
        return replace(member, assigned=assigned)

    # -- share-group state initialization ----------------------------------------------------
    def _to_initialize(self, names: set[str], topics: TopicsView, now_ms: int, out: Result) -> Partitions:
        """Partitions of subscribed topics neither initialized nor recently asked for;
        appends the state metadata record marking them initializing (and forgetting
        topics that no longer exist: a topic recreated under the same name has a new id)
        and a live record of the attempt."""
        stale = {t for t in set(self.initialized) | set(self.initializing) if topics.by_id(t) is None}
        want: Partitions = {}
        for name in names:
            t = topics.by_name(name)
            if t is None:
                continue
            done = self.initialized.get(t.topic_id, frozenset())
            fresh = {p for p in range(t.num_partitions) if p not in done
                     and now_ms - self.init_asked.get((t.topic_id, p), -2**62) < self.config.initialize_retry_ms}
            parts = frozenset(range(t.num_partitions)) - done - fresh
            if parts:
                want[t.topic_id] = parts
        if want or stale:
            initializing = {t: ps for t, ps in _merge(self.initializing, want).items() if t not in stale}
            initialized = {t: ps for t, ps in self.initialized.items() if t not in stale}
            out.records.append(self._state_record(initializing, initialized, topics,
                                                  {t: d for t, d in self.deleting.items() if t not in want}))
        if want:
            out.live.append((ShareInitKey(self.group_id), {(t, p): now_ms for t, ps in want.items() for p in ps}))
        return want

    def _state_record(self, initializing: Partitions, initialized: Partitions, topics: TopicsView,
                      deleting: dict[uuid.UUID, str]) -> Record:
        value = ShareGroupStatePartitionMetadataValue(
            _info(initializing, topics, self.topic_names), _info(initialized, topics, self.topic_names),
            tuple(TopicInfo(t, deleting[t]) for t in sorted(deleting, key=lambda t: t.bytes)))
        return ShareGroupStatePartitionMetadataKey(self.group_id), value

    def initialized_result(self, parts: Partitions, topics: TopicsView) -> Result:
        """Records moving ``parts`` from initializing to initialized (Kafka's
        ``initializeShareGroupState``)."""
        if not parts:
            return Result()
        return Result(records=[self._state_record(_minus(self.initializing, parts), _merge(self.initialized, parts),
                                                  topics, self.deleting)])

    def uninitialized_result(self, parts: Partitions, topics: TopicsView) -> Result:
        """Records dropping ``parts`` from initializing (their initialization failed) and
        forgetting the attempt, so the next heartbeat asks again."""
        if not parts:
            return Result()
        forget = {(t, p): None for t, ps in parts.items() for p in ps}
        return Result(records=[self._state_record(_minus(self.initializing, parts), self.initialized, topics,
                                                  self.deleting)], live=[(ShareInitKey(self.group_id), forget)])

    def state_deleted_result(self, topic_ids: Iterable[uuid.UUID], topics: TopicsView) -> Result:
        """Records forgetting that the state of these topics' partitions is initialized
        (their state was deleted, e.g. by DeleteShareGroupOffsets): a later heartbeat
        initializes them again before they are assigned, as in Kafka."""
        gone = set(topic_ids)
        known = set(self.initialized) | set(self.initializing) | set(self.deleting)
        if not known & set(gone):
            return Result()
        forget = {(t, p): None for t, p in self.init_asked if t in gone}
        return Result(records=[self._state_record(
            {t: ps for t, ps in self.initializing.items() if t not in gone},
            {t: ps for t, ps in self.initialized.items() if t not in gone}, topics,
            {t: n for t, n in self.deleting.items() if t not in gone})],
            live=[(ShareInitKey(self.group_id), forget)] if forget else [])

    def state_partitions(self) -> Partitions:
        """Partitions whose share-group state may exist (initialized or initializing)."""
        return _merge(self.initialized, self.initializing)

    # -- leaving and fencing ---------------------------------------------------------------
    def _leave(self, req: ShareHeartbeatRequest, topics: TopicsView) -> Result:
        if not self.members and self.group_epoch == 0:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Share group {self.group_id} not found.")
        return self._fence(self._existing_member(req.member_id), topics,
                           ShareHeartbeatResponse(member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH))

    def _fence_bump(self, rest: dict[str, ShareMember], topics: TopicsView, out: Result) -> None:
        """The group epoch bump with the metadata hash of the remaining subscriptions."""
        value = ShareGroupMetadataValue(self.group_epoch + 1,
                                        metadata_hash(self.subscribed_topic_names(rest.values()), topics))
        out.records.append((ShareGroupMetadataKey(self.group_id), value))

    # -- ShareGroupDescribe ---------------------------------------------------------------------
    def _assignor_name(self) -> str:
        return self.assignor_used or share_assignor.NAME

    # -- replay (the only mutator; see ModernGroup.replay) ------------------------------------------
    def _replay_group(self, value: ShareGroupMetadataValue | None) -> None:
        super()._replay_group(value)
        self.metadata_hash = value.metadata_hash if value is not None else 0

    def _replay_other(self, key: Any, value: Any) -> None:
        if isinstance(key, ShareRetargetKey):
            name, ms = value
            self.lag_checked_ms = ms
            if name == "lag":
                self.lag_retargets += 1
            elif name != "checked":
                self.assignor_used, self.retarget_ms = name, ms
        elif isinstance(key, ShareInitKey):
            for tp, ms in value.items():
                if ms is None:
                    self.init_asked.pop(tp, None)
                else:
                    self.init_asked[tp] = ms

    def _replay_subscription(self, value: ShareGroupStatePartitionMetadataValue | None) -> None:
        value = value or ShareGroupStatePartitionMetadataValue()
        for t in value.initializing_topics + value.initialized_topics + value.deleting_topics:
            self.topic_names[t.topic_id] = t.topic_name
        self.initializing = {t.topic_id: frozenset(t.partitions) for t in value.initializing_topics if t.partitions}
        self.initialized = {t.topic_id: frozenset(t.partitions) for t in value.initialized_topics if t.partitions}
        self.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}

    def persisted_state(self) -> dict[str, Any]:
        """Everything the records carry (for reload-equality checks): no timers."""
        return {**super().persisted_state(), "metadata_hash": self.metadata_hash,
                "initializing": dict(self.initializing), "initialized": dict(self.initialized),
                "deleting": dict(self.deleting)}


def validate(req: ShareHeartbeatRequest) -> HeartbeatError | None:
    """Kafka's request validation (INVALID_REQUEST), before any group is looked at."""
    bad = HeartbeatError.invalid_request
    if not req.member_id:
        return bad("MemberId can't be empty.")
    if not req.group_id:
        return bad("GroupId can't be empty.")
    if req.rack_id == "":
        return bad("RackId can't be empty.")
    if req.member_epoch == 0 and not req.subscribed_topic_names:
        return bad("SubscribedTopicNames must be set in first request.")
    if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return bad("MemberEpoch is invalid.")
    return None


class ShareGroups(ModernGroups[ShareGroup]):
    """The share groups of one ``__consumer_offsets`` partition, built by replay."""

    RECORDS = RECORDS

    def __init__(self, config: ShareGroupConfig | None = None) -> None:
        super().__init__()
        self.config = config or ShareGroupConfig()

    def _new(self, group_id: str) -> ShareGroup:
        return ShareGroup(group_id, self.config)

    def _creates_group(self, key: Any, value: Any) -> bool:
        """A record (not a tombstone, not a live record) of a group not known yet creates it."""
        return value is not None and not isinstance(key, (ShareTimersKey, ShareInitKey, ShareRetargetKey))


SessionTimeouts = Callable[[str], tuple[int, int]]
"""group id -> (session timeout ms, heartbeat interval ms): the group config or default."""
