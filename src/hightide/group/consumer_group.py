"""One KIP-848 consumer group: the ConsumerGroupHeartbeat state machine (sans-IO).

Theory of operation
-------------------
Like Kafka's ``ConsumerGroup`` driven by ``GroupMetadataManager``: :meth:`heartbeat`,
:meth:`poll` and the validators read the group and never change it; they return a
:class:`Result` — the response, the records to append (keys and values of
:mod:`.consumer_records`) and *live* records (:class:`TimersKey` → :class:`Timers`, the
session and rebalance deadlines, which are never appended). :meth:`replay` is the only
mutator: the runtime replays the records once they are durable, then the live records,
and replays ``__consumer_offsets`` the same way at start-up (then calls
:meth:`loaded_timers`).

A heartbeat (1) creates or updates the member — a new member, a changed subscription or
changed metadata of the subscribed topics bumps the *group epoch*; a regex subscription is
resolved at each of the member's heartbeats against the current topics, keeping only
those the member's principal may describe (the shell's ``describable`` filter: Kafka's
``filterTopicDescribeAuthorizedTopics``), and kept as live state (:class:`RegexTopicsKey`;
after a reload, until the member's next heartbeat, its regex is resolved within the
group's recorded subscription metadata); (2) if the group epoch
is ahead of the *assignment epoch*, recomputes the target assignment with the group's
server assignor; (3) reconciles the heartbeating member towards its target
(:func:`.consumer_member.reconcile`): revocations first, then partitions no one else
owns. Leaving, session expiry and rebalance timeouts *fence* the member (tombstones) and
bump the group epoch; the next heartbeat of another member recomputes the target.

What consumer and share groups have in common — members, group and assignment epochs,
target assignments, timers, fencing, tombstones and the replay of those records — is
:class:`~.modern_group.ModernGroup`; this module adds the subscription metadata, static
members, server assignors and reconciliation.

Time is an argument (``now_ms``); the topic metadata is a :class:`TopicsView`.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from .assignor import (
    ASSIGNORS,
    Assignment,
    GroupSpec,
    MemberSpec,
    PartitionAssignor,
    compile_regex,
    resolve_subscription,
)
from .consumer_api import (
    ConsumerGroupConfig,
    Describable,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResponse,
    ImageTopics,
    RegexTopicsKey,
    Result,
    StaticTopics,
    Timers,
    TimersKey,
    TopicsView,
)
from .consumer_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    FencedMember,
    Member,
    MemberState,
    from_wire,
    is_subset,
    reconcile,
    to_wire,
)
from .modern_group import ModernGroup, ModernGroups, RecordTypes
from .consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    TopicMetadata,
)

RECORDS = RecordTypes(
    group=ConsumerGroupMetadataKey, subscription=ConsumerGroupPartitionMetadataKey,
    target_epoch=ConsumerGroupTargetAssignmentMetadataKey, target_member=ConsumerGroupTargetAssignmentMemberKey,
    member=ConsumerGroupMemberMetadataKey, assignment=ConsumerGroupCurrentMemberAssignmentKey, timers=TimersKey)

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroups",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "ImageTopics",
    "MemberState",
    "RegexTopicsKey",
    "Result",
    "StaticTopics",
    "Timers",
    "TimersKey",
    "TopicsView",
]

def _new_member_id() -> str:
    return str(uuid.uuid4())


# -- the group ----------------------------------------------------------------------------------
class ConsumerGroup(ModernGroup[Member]):
    """The state of one consumer group, as replayed from its records: the
    :class:`~.modern_group.ModernGroup` state plus the subscription metadata, static
    members and the epoch of every owned partition."""

    RECORDS = RECORDS
    KIND = "consumer"

    def __init__(self, group_id: str, config: ConsumerGroupConfig | None = None,
                 new_member_id: Callable[[], str] = _new_member_id) -> None:
        super().__init__(group_id, config or ConsumerGroupConfig())
        self.config: ConsumerGroupConfig
        self.new_member_id = new_member_id
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        #: member id -> the topics its regex resolved to at its last heartbeat, those it may describe (live)
        self.regex_topics: dict[str, frozenset[str]] = {}

    # -- views ----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """Empty, Assigning, Reconciling or Stable (Kafka's ConsumerGroupState names)."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """Epoch of the member that owns the partition, -1 if free."""
        return self.partition_epochs.get((topic_id, partition), -1)

    def preferred_assignor(self, members: Iterable[Member] | None = None) -> str:
        """The server assignor most members ask for (ties by name), else the default."""
        counts = Counter(m.server_assignor for m in (self.members.values() if members is None else members)
                         if m.server_assignor)
        if not counts:
            return self.config.assignors[0]
        return min(counts, key=lambda name: (-counts[name], name))

    def _new_member(self, member_id: str) -> Member:
        return Member(member_id)

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest, now_ms: int, topics: TopicsView,
                  describable: Describable | None = None) -> Result:
        """Handle one heartbeat. Errors come back as a response with the error code (and
        no records): INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION,
        GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
        UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID. ``describable`` filters the topics
        the member's regex matches down to those its principal may describe (None: all)."""
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req, topics)
            return self._join_or_heartbeat(req, now_ms, topics, describable)
        except HeartbeatError as e:
            return Result(HeartbeatResponse(e.code, str(e)))

    def _validate(self, req: HeartbeatRequest) -> None:
        bad = HeartbeatError.invalid_request
        if not req.group_id:
            raise bad("GroupId can't be empty.")
        if req.instance_id == "" or req.rack_id == "":
            raise bad("InstanceId and RackId can't be empty.")
        if req.api_version >= 1 and not req.member_id:
            raise bad("MemberId can't be empty.")
        epoch = req.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id:
                raise bad("MemberId can't be empty.")
        elif epoch == 0:
            self._validate_join(req)
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not req.member_id or req.instance_id is None:
                raise bad("MemberId can't be empty and InstanceId can't be null.")
        else:
            raise bad("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self._assignors():
            raise HeartbeatError(ErrorCode.unsupported_assignor, f"ServerAssignor {req.server_assignor} is not "
                                 f"supported. Supported assignors: {', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_regex(req.subscribed_topic_regex)
            except re.error as e:
                raise HeartbeatError(ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex: {e}") from None

    @staticmethod
    def _validate_join(req: HeartbeatRequest) -> None:
        if req.rebalance_timeout_ms == -1:
            raise HeartbeatError.invalid_request("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or len(req.topic_partitions) > 0:
            raise HeartbeatError.invalid_request("TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            raise HeartbeatError.invalid_request(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")

    def _assignors(self) -> dict[str, PartitionAssignor]:
        return {n: ASSIGNORS[n] for n in self.config.assignors if n in ASSIGNORS}

    def _join_or_heartbeat(self, req: HeartbeatRequest, now_ms: int, topics: TopicsView,
                           describable: Describable | None) -> Result:
        self._check_capacity(req.member_id)
        member_id = req.member_id or self.new_member_id()
        out = Result()
        members, targets = dict(self.members), dict(self.targets)
        if req.instance_id is None:
            member = self._dynamic_member(member_id, req)
        else:
            member = self._static_member(member_id, req, out, members, targets)
        updated = self._updated(member, req)
        members[member_id] = updated
        resolved, regex_changed = self._resolve_regex(member, updated, topics, describable, out)
        bump = (updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex or regex_changed)
        if updated != member:
            out.records.append(self._member_record(updated))
        bump = self._maybe_new_metadata(members, topics, out, resolved) or bump
        group_epoch = self.group_epoch + 1 if bump else self.group_epoch
        if bump:
            out.records.append((ConsumerGroupMetadataKey(self.group_id), ConsumerGroupMetadataValue(group_epoch)))
        target_epoch = self.assignment_epoch
        if group_epoch > self.assignment_epoch:
            targets = self._new_targets(group_epoch, members, targets, topics, out, resolved)
            target_epoch = group_epoch
        reconciled = self._reconcile(updated, target_epoch, targets.get(member_id, {}), req)
        if reconciled != updated:
            out.records.append(self._assignment_record(reconciled))
        out.live.append((TimersKey(self.group_id, member_id), self._timers(updated, reconciled, now_ms)))
        out.response = self._response(req, member, reconciled)
        return out

    def _dynamic_member(self, member_id: str, req: HeartbeatRequest) -> Member:
        member = self._member_or_new(member_id, req.member_epoch)
        if member_id in self.members:
            self._check_epoch(member, req)
        return member

    def _static_member(self, member_id: str, req: HeartbeatRequest, out: Result,
                       members: dict[str, Member], targets: dict[str, Assignment]) -> Member:
        """The static member for ``req.instance_id``. A rejoin (epoch 0) of an instance
        that left with epoch -2 replaces the old member by a copy under the new id."""
        assert req.instance_id is not None
        existing = self.members.get(self.static_members.get(req.instance_id, ""))
        if req.member_epoch == 0:
            if existing is None:
                return self.members.get(member_id) or Member(member_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(ErrorCode.unreleased_instance_id,
                                     f"Instance id {req.instance_id} is owned by member {existing.member_id}.")
            new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            self._replace_member(existing, new, out, members, targets)
            return new
        if existing is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id,
                                 f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                                 f"member {existing.member_id}.")
        self._check_epoch(existing, req)
        return existing

    def _replace_member(self, old: Member, new: Member, out: Result,
                        members: dict[str, Member], targets: dict[str, Assignment]) -> None:
        out.records += self._member_tombstones(old.member_id)
        out.live.append((TimersKey(self.group_id, old.member_id), None))
        target = targets.pop(old.member_id, {})
        members.pop(old.member_id, None)
        members[new.member_id], targets[new.member_id] = new, target
        out.records += [self._member_record(new), self._target_record(new.member_id, target),
                        self._assignment_record(new)]

    def _check_epoch(self, member: Member, req: HeartbeatRequest) -> None:
        """FENCED_MEMBER_EPOCH unless the epoch is the member's, or its previous one with
        owned partitions all still assigned (the response with the bump was lost)."""
        owned = None if req.topic_partitions is None else from_wire(req.topic_partitions)
        self._check_member_epoch(member, req.member_epoch, is_subset(owned, member.assigned))

    @staticmethod
    def _updated(member: Member, req: HeartbeatRequest) -> Member:
        """The member with the request's non-null fields applied."""
        changes: dict[str, Any] = {"client_id": req.client_id, "client_host": req.client_host}
        if req.instance_id is not None:
            changes["instance_id"] = req.instance_id
        if req.rack_id is not None:
            changes["rack_id"] = req.rack_id
        if req.rebalance_timeout_ms != -1:
            changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            changes["server_assignor"] = req.server_assignor
        if req.subscribed_topic_names is not None:
            changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_regex is not None:
            changes["subscribed_topic_regex"] = req.subscribed_topic_regex or None
        return replace(member, **changes)

    def _reconcile(self, member: Member, target_epoch: int, target: Assignment, req: HeartbeatRequest) -> Member:
        if member.is_reconciled_to(target_epoch):
            return member
        owned = None if req.topic_partitions is None else from_wire(req.topic_partitions)
        try:
            return reconcile(member, target_epoch, target, self.partition_epoch, owned)
        except FencedMember as e:
            raise HeartbeatError(ErrorCode.fenced_member_epoch, str(e)) from None

    def _timers(self, before: Member, after: Member, now_ms: int) -> Timers:
        """Session deadline pushed out; a rebalance deadline armed when the member enters
        UNREVOKED_PARTITIONS, dropped when it leaves it, else kept."""
        session = now_ms + self.config.session_timeout_ms
        current = self.timers.get(after.member_id)
        if after != before and after.state is MemberState.UNREVOKED_PARTITIONS:
            return Timers(session, now_ms + max(after.rebalance_timeout_ms, 0), after.member_epoch)
        if after != before or current is None:
            return Timers(session)
        return replace(current, session_deadline_ms=session)

    def _response(self, req: HeartbeatRequest, before: Member, after: Member) -> HeartbeatResponse:
        """The assignment goes out on a full request (join, or all of rebalance timeout,
        subscription and owned partitions set) or when it changed."""
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                                         and req.topic_partitions is not None)
        assignment = to_wire(after.assigned) if full or after.assigned != before.assigned else None
        return HeartbeatResponse(ErrorCode.none, None, after.member_id, after.member_epoch,
                                 self.config.heartbeat_interval_ms, assignment)

    # -- subscription metadata and target assignment ------------------------------------------
    def _regex_resolution(self, member: Member, resolved: dict[str, frozenset[str]]) -> frozenset[str]:
        """The topics ``member``'s regex stands for: its resolution at its last heartbeat;
        not resolved since a reload, the matches among the group's recorded subscription
        (computed under the members' authorization), never a topic beyond it."""
        topics = resolved.get(member.member_id)
        if topics is None:
            return frozenset(resolve_subscription((), member.subscribed_topic_regex, self.subscription_metadata))
        return topics

    def _resolve_regex(self, before: Member, member: Member, topics: TopicsView, describable: Describable | None,
                       out: Result) -> tuple[dict[str, frozenset[str]], bool]:
        """Resolve the heartbeating member's regex against the current topics with its
        authorization; a live record when the resolution changed. Returns every member's
        resolution and whether this member's changed (which bumps the group epoch)."""
        resolved = dict(self.regex_topics)
        regex = member.subscribed_topic_regex
        if not regex:
            if resolved.pop(member.member_id, None) is not None:
                out.live.append((RegexTopicsKey(self.group_id, member.member_id), None))
            return resolved, False
        matched = frozenset(resolve_subscription((), regex, topics.names()))
        new = matched & frozenset(describable(matched)) if describable is not None else matched
        old = self._regex_resolution(before, self.regex_topics) if before.subscribed_topic_regex == regex else None
        if self.regex_topics.get(member.member_id) != new:
            out.live.append((RegexTopicsKey(self.group_id, member.member_id), new))
        resolved[member.member_id] = new
        return resolved, old is not None and old != new

    def _subscribed_names(self, member: Member, resolved: dict[str, frozenset[str]]) -> set[str]:
        """The topic names the member subscribes to: its names and its regex's resolution
        (callers keep those that exist)."""
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self._regex_resolution(member, resolved)
        return names

    def _metadata_for(self, members: dict[str, Member], topics: TopicsView,
                      resolved: dict[str, frozenset[str]] | None = None) -> dict[str, TopicMetadata]:
        """The subscribed topics that exist, with their ids and partition counts."""
        resolved = self.regex_topics if resolved is None else resolved
        wanted = set().union(*(self._subscribed_names(m, resolved) for m in members.values())) if members else set()
        found = {n: topics.by_name(n) for n in sorted(wanted)}
        return {n: TopicMetadata(t.topic_id, n, t.num_partitions) for n, t in found.items() if t is not None}

    def _maybe_new_metadata(self, members: dict[str, Member], topics: TopicsView, out: Result,
                            resolved: dict[str, frozenset[str]] | None = None) -> bool:
        """Append a partition metadata record if the subscribed topics changed; True then."""
        metadata = self._metadata_for(members, topics, resolved)
        if metadata == self.subscription_metadata:
            return False
        value = ConsumerGroupPartitionMetadataValue(tuple(metadata[n] for n in sorted(metadata)))
        out.records.append((ConsumerGroupPartitionMetadataKey(self.group_id), value))
        return True

    def _new_targets(self, epoch: int, members: dict[str, Member], targets: dict[str, Assignment],
                     topics: TopicsView, out: Result, resolved: dict[str, frozenset[str]]) -> dict[str, Assignment]:
        """Run the preferred assignor; append records for the changed member targets and
        the new assignment epoch. Returns every member's new target."""
        metadata = self._metadata_for(members, topics, resolved)
        specs = {mid: MemberSpec(mid, m.instance_id, frozenset(metadata[n].topic_id
                                                            for n in self._subscribed_names(m, resolved)
                                                            if n in metadata), targets.get(mid, {}))
                 for mid, m in members.items()}
        spec = GroupSpec(specs, {t.topic_id: t.num_partitions for t in metadata.values()})
        new = ASSIGNORS[self.preferred_assignor(members.values())].assign(spec)
        return self._target_records(epoch, new, targets, out)

    # -- leaving and fencing ---------------------------------------------------------------
    def _leave(self, req: HeartbeatRequest, topics: TopicsView) -> Result:
        response = HeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)
        if req.instance_id is None:
            return self._fence(self._existing_member(req.member_id), topics, response)
        member = self.members.get(self.static_members.get(req.instance_id, ""))
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id, f"Instance id {req.instance_id} is owned by "
                                 f"member {member.member_id}.")
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._fence(member, topics, response)
        # A static member leaving "temporarily": it keeps its partitions until its session expires.
        left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
        return Result(response, [self._assignment_record(left)])

    def _fence_bump(self, rest: dict[str, Member], topics: TopicsView, out: Result) -> None:
        """New subscription metadata if it changed, and the group epoch bump."""
        self._maybe_new_metadata(rest, topics, out)
        out.records.append((ConsumerGroupMetadataKey(self.group_id), ConsumerGroupMetadataValue(self.group_epoch + 1)))

    # -- timers ------------------------------------------------------------------------------
    def _rebalance_expired(self, member: Member, timers: Timers, now_ms: int) -> bool:
        """The member did not revoke within its rebalance timeout."""
        return (timers.rebalance_deadline_ms is not None and timers.rebalance_deadline_ms <= now_ms
                and member.member_epoch == timers.rebalance_epoch
                and member.state is MemberState.UNREVOKED_PARTITIONS)

    def _loaded_timer(self, member: Member, now_ms: int, session_timeout_ms: int) -> Timers:
        """A member still revoking gets its rebalance deadline again."""
        t = Timers(now_ms + session_timeout_ms)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            t = replace(t, rebalance_deadline_ms=now_ms + max(member.rebalance_timeout_ms, 0),
                        rebalance_epoch=member.member_epoch)
        return t

    # -- offsets ------------------------------------------------------------------------------
    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int = 9,
                               is_transactional: bool = False) -> ErrorCode:
        """A commit with a negative epoch is a simple (admin) commit: fine while the group
        has no members. Otherwise UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION (OffsetCommit < v9
        from a KIP-848 member, unless transactional) or STALE_MEMBER_EPOCH."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not is_transactional and api_version < 9:
            return ErrorCode.unsupported_version
        return ErrorCode.stale_member_epoch if member_epoch != member.member_epoch else ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """A fetch without member id and a negative epoch (admin, old clients) is fine;
        otherwise UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.stale_member_epoch if member_epoch != member.member_epoch else ErrorCode.none

    # -- ConsumerGroupDescribe ---------------------------------------------------------------
    def _assignor_name(self) -> str:
        return self.preferred_assignor()

    def _describe_member(self, m: Member, topics: TopicsView) -> dict[str, Any]:
        return {"instance_id": m.instance_id, "subscribed_topic_regex": m.subscribed_topic_regex,
                "target_assignment": self._named(self.targets.get(m.member_id, {}), topics)}

    # -- replay (the only mutator; see ModernGroup.replay) ------------------------------------
    def _replay_other(self, key: Any, value: Any) -> None:
        if isinstance(key, RegexTopicsKey):
            if value is None:
                self.regex_topics.pop(key.member_id, None)
            else:
                self.regex_topics[key.member_id] = value

    def _replay_member(self, member_id: str, value: Any) -> None:
        super()._replay_member(member_id, value)
        if value is None:
            self.regex_topics.pop(member_id, None)

    def _replay_subscription(self, value: ConsumerGroupPartitionMetadataValue | None) -> None:
        topics = value.topics if value is not None else ()
        self.subscription_metadata = {t.topic_name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions)
                                      for t in topics}

    def _index(self, member: Member, metadata: bool) -> None:
        """Record the epochs of the member's partitions (and its instance id)."""
        self._set_partition_epochs(member, member)
        if metadata and member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def _unindex(self, member: Member, metadata: bool) -> None:
        self._set_partition_epochs(member, None)
        if metadata and member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]

    def _set_partition_epochs(self, member: Member, owner: Member | None) -> None:
        """Record (owner given) or clear (None) the epochs of the member's partitions."""
        for topic_id, parts in member.owned_partitions().items():
            for p in parts:
                if owner is None:
                    self.partition_epochs.pop((topic_id, p), None)
                else:
                    self.partition_epochs[(topic_id, p)] = owner.member_epoch

    def persisted_state(self) -> dict[str, Any]:
        """Everything the records carry (for reload-equality checks): no timers."""
        return {**super().persisted_state(), "subscription_metadata": dict(self.subscription_metadata),
                "static_members": dict(self.static_members), "partition_epochs": dict(self.partition_epochs)}


class ConsumerGroups(ModernGroups[ConsumerGroup]):
    """The consumer groups of one ``__consumer_offsets`` partition, built by replay."""

    RECORDS = RECORDS

    def __init__(self, config: ConsumerGroupConfig | None = None,
                 new_member_id: Callable[[], str] = _new_member_id) -> None:
        super().__init__()
        self.config = config or ConsumerGroupConfig()
        self.new_member_id = new_member_id

    def _new(self, group_id: str) -> ConsumerGroup:
        return ConsumerGroup(group_id, self.config, self.new_member_id)

    def _creates_group(self, key: Any, value: Any) -> bool:
        """Any record but a cancelled timer or regex resolution of a group not known yet creates it."""
        return not (isinstance(key, (TimersKey, RegexTopicsKey)) and value is None)
