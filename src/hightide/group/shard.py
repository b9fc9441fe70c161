"""The group coordinator shard of one ``__consumer_offsets`` partition (sans-IO).

Shaped like Kafka's ``GroupCoordinatorShard``: request methods validate against the
current state and return a :class:`CoordinatorResult` — the records to append and the
response — without touching state; :meth:`GroupCoordinatorShard.replay` is the only
mutator, used both after a successful append and to load the partition at start-up.
Time is an argument, never read here. The runtime (``hightide.coordinator.groups``)
appends the records, replays them, and only then releases the response, so a reader can
never observe state that a failed append would take back.

Classic groups (:mod:`.classic`) also have state that is never persisted (parked
requests, session deadlines). A request works on a clone of the group and returns the
new group as a *live* record ``(LiveGroup(id), group)``: replayed like the others, after
them, but never appended — so a failed append takes that change back too. Parked
responses leave as ``completions``: ``(handle, response)`` pairs for the opaque handles
the runtime passed in with this or earlier requests.

KIP-848 consumer groups (:mod:`.consumer_group`) live next to the classic groups, in a
:class:`ConsumerGroups` fed by the same :meth:`GroupCoordinatorShard.replay` (record key
versions 3–8, and live :class:`TimersKey` records for their session and rebalance
deadlines). A group id is of one type at a time, as in Kafka 4.0: a ConsumerGroupHeartbeat
for a classic group with members answers GROUP_ID_NOT_FOUND, a JoinGroup for a consumer
group with members INCONSISTENT_GROUP_PROTOCOL; an *empty* group of the other type is
converted (its records tombstoned, its committed offsets kept). Offsets are shared.

KIP-932 share groups (:mod:`.share_group`) live in a :class:`ShareGroups` fed by the same
replay (record key versions 10–15, live :class:`ShareTimersKey` / :class:`ShareInitKey` /
:class:`ShareRetargetKey` records). As in Kafka, a share group id is never converted: a ShareGroupHeartbeat for any
other group answers GROUP_ID_NOT_FOUND ("not a share group"), a ConsumerGroupHeartbeat
for a share group GROUP_ID_NOT_FOUND, a JoinGroup INCONSISTENT_GROUP_PROTOCOL, and the
offset APIs GROUP_ID_NOT_FOUND (share groups have no committed offsets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from ..txn.batch import TxnBatch
from . import classic
from . import consumer_records as CR
from . import records as R
from . import share_records as SR
from .classic import (
    ClassicGroup,
    Effects,
    GroupLimits,
    GroupState,
    JoinRequest,
    JoinResponse,
    SyncResponse,
)
from .consumer_api import (
    ConsumerGroupConfig,
    Describable,
    HeartbeatRequest,
    HeartbeatResponse,
    RegexTopicsKey,
    Result,
    TimersKey,
    TopicsView,
)
from .consumer_group import ConsumerGroup, ConsumerGroups
from .modern_group import ModernGroup
from .offsets import CommitRequest, CommitTuple, FetchedOffset, OffsetStore, TopicPartition
from .records import GroupKey, GroupValue, OffsetKey, OffsetValue
from .share_group import (
    ShareAssignorInput,
    ShareGroupConfig,
    ShareGroups,
    ShareHeartbeatRequest,
    ShareHeartbeatResponse,
    ShareInitKey,
    ShareRetargetKey,
    ShareTimersKey,
)
from .subscriptions import decode_subscription

Record = tuple[Any, Any]


@dataclass
class CoordinatorResult:
    """Records to append (key, value-or-None), the response for the caller, completions
    of parked requests ``(handle, response)``, and live (never appended) records."""

    records: list[Record] = field(default_factory=list)
    response: Any = None
    completions: list[tuple[Any, Any]] = field(default_factory=list)
    live: list[Record] = field(default_factory=list)
    txn_batch: TxnBatch | None = None  # a transactional batch / marker (hightide.txn.batch)


@dataclass(frozen=True, slots=True)
class LiveGroup:
    """Key of a live record: the value is the group's new in-memory state (None: gone)."""

    group: str


@dataclass
class GroupConfig:
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    classic: GroupLimits = field(default_factory=GroupLimits)
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    share: ShareGroupConfig = field(default_factory=ShareGroupConfig)


# -- record codec ---------------------------------------------------------------------------------
def encode_record(key: Any, value: Any) -> tuple[bytes, bytes | None]:
    """Key and value bytes of a shard record (any ``__consumer_offsets`` record type)."""
    return R.encode_key(key), R.encode_value(value)


def encode_records(records: list[Record]) -> list[tuple[bytes | None, bytes | None]]:
    """:func:`encode_record` of each record; the offset records of an OffsetCommit share
    the encoding of their group and topic (:func:`.records.encode_offset_records`)."""
    if all(type(k) is OffsetKey for k, _ in records):
        return R.encode_offset_records(records)
    return [encode_record(k, v) for k, v in records]


def decode_record(key: bytes, value: bytes | None) -> Record | None:
    """The (key, value) of a ``__consumer_offsets`` record; None for a record type
    hightide does not interpret. Raises RecordFormatError for a malformed record."""
    k = R.decode_key(key)
    if k is None:
        return None
    return k, R.decode_value(k, value)


def _coordinator_result(r: Result) -> CoordinatorResult:
    """A modern group's :class:`~.consumer_api.Result` as the shard answers it."""
    return CoordinatorResult(list(r.records), r.response, live=list(r.live))


def _uuid_member_id(client_id: str) -> str:
    import uuid
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig | None = None,
                 member_ids: Callable[[str], str] = _uuid_member_id,
                 consumer_member_ids: Callable[[], str] | None = None,
                 consumer_timeouts: Callable[[str], tuple[int, int]] | None = None) -> None:
        """``consumer_timeouts(group_id)``: a consumer group's (session timeout, heartbeat
        interval) from its group configs (None: ``config.consumer``'s for every group)."""
        self.config = config or GroupConfig()
        self.consumer_timeouts = consumer_timeouts
        self.limits = self.config.classic
        self.offsets = OffsetStore(self.config.offset_metadata_max_bytes)
        self.new_member_id = member_ids
        # Classic group metadata as last replayed (GroupValue records) ...
        self.group_metadata: dict[str, GroupValue] = {}
        # ... and the live classic groups (loaded from those, then driven by requests).
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 consumer groups.
        self.consumer = (ConsumerGroups(self.config.consumer) if consumer_member_ids is None
                         else ConsumerGroups(self.config.consumer, consumer_member_ids))
        # KIP-932 share groups.
        self.share = ShareGroups(self.config.share)

    # -- membership view -----------------------------------------------------------------
    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the group's members subscribe to (consumer protocol; empty without members)."""
        cg = self.consumer.get(group_id)
        if cg is not None:
            return set(cg.subscription_metadata) if cg.members else set()
        g = self.groups.get(group_id)
        if g is None or not g.members or g.protocol_type != "consumer":
            return set()
        out: set[str] = set()
        for m in g.members.values():
            meta = m.metadata(g.protocol) if g.protocol else (m.protocols[0][1] if m.protocols else b"")
            out.update(decode_subscription(meta))
        return out

    def group_exists(self, group_id: str) -> bool:
        return (group_id in self.groups or group_id in self.group_metadata or group_id in self.consumer.groups
                or group_id in self.share.groups or self.offsets.has_offsets(group_id))

    def _result(self, group_id: str, g: ClassicGroup, fx: Effects, response: Any = None) -> CoordinatorResult:
        records: list[Record] = [(GroupKey(group_id), g.to_record())] if fx.persist else []
        return CoordinatorResult(records, response, fx.completions, [(LiveGroup(group_id), g)])

    # -- classic protocol --------------------------------------------------------------------
    def join_group(self, req: JoinRequest, handle: Any, now_ms: int) -> CoordinatorResult:
        """JoinGroup; the answer arrives as a completion for ``handle`` (now or later)."""
        def fail(code: ErrorCode) -> CoordinatorResult:
            return CoordinatorResult(completions=[(handle, JoinResponse(code, req.member_id))])

        if not req.group_id:
            return fail(ErrorCode.invalid_group_id)
        if req.group_id in self.share.groups:
            return CoordinatorResult(completions=[(handle, JoinResponse(ErrorCode.inconsistent_group_protocol, ""))])
        cg = self.consumer.get(req.group_id)
        if cg is not None and cg.members:
            return fail(ErrorCode.inconsistent_group_protocol)
        current = self.groups.get(req.group_id)
        if current is None and req.member_id:
            return fail(ErrorCode.unknown_member_id)
        g = current.clone() if current else ClassicGroup(req.group_id, state_ts=now_ms)
        fx = Effects()
        classic.join(g, req, handle, now_ms, self.limits, fx, self.new_member_id)
        if current is None and g.state is GroupState.EMPTY and not g.pending:
            return CoordinatorResult(completions=fx.completions)  # nothing to keep
        result = self._result(req.group_id, g, fx)
        if cg is not None:  # an empty consumer group becomes this classic group
            result.records[:0] = cg.tombstones()
        return result

    def sync_group(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                   protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes],
                   handle: Any, now_ms: int) -> CoordinatorResult:
        """SyncGroup; the answer arrives as a completion for ``handle``."""
        current = self.groups.get(group_id)
        if current is None:
            code = ErrorCode.invalid_group_id if not group_id else ErrorCode.unknown_member_id
            return CoordinatorResult(completions=[(handle, SyncResponse(code))])
        g, fx = current.clone(), Effects()
        classic.sync(g, member_id, instance_id, generation, protocol_type, protocol, assignments, handle,
                     now_ms, self.limits, fx)
        return self._result(group_id, g, fx)

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                  now_ms: int) -> CoordinatorResult:
        """Response: an error code."""
        current = self.groups.get(group_id)
        if current is None:
            return CoordinatorResult(response=ErrorCode.invalid_group_id if not group_id
                                     else ErrorCode.unknown_member_id)
        g = current.clone()
        code = classic.heartbeat(g, member_id, instance_id, generation, now_ms)
        return self._result(group_id, g, Effects(), code)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]], now_ms: int) -> CoordinatorResult:
        """Response: (group error, [member error, ...])."""
        current = self.groups.get(group_id)
        if current is None:
            return CoordinatorResult(response=(ErrorCode.unknown_member_id, [ErrorCode.unknown_member_id] * len(members)))
        g, fx = current.clone(), Effects()
        codes = classic.leave(g, members, now_ms, self.limits, fx)
        return self._result(group_id, g, fx, (ErrorCode.none, codes))

    def describe_group(self, group_id: str) -> dict | None:
        """DescribeGroups fields of a group; None if it does not exist or is a consumer
        group (Kafka: Dead, "not a classic group")."""
        if group_id in self.consumer.groups:
            return None
        g = self.groups.get(group_id)
        if g is not None:
            return classic.describe(g)
        if self.offsets.has_offsets(group_id):
            return {"group_state": "Empty", "protocol_type": "", "protocol_data": "", "members": []}
        return None

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, incl. offsets-only (simple) groups."""
        out = [(gid, g.protocol_type or "", g.state.value) for gid, g in self.groups.items()]
        out += [(gid, "", "Empty") for gid in self.offsets.offsets
                if gid not in self.groups and gid not in self.consumer.groups and self.offsets.has_offsets(gid)]
        return out

    def list_consumer_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every consumer group: Empty, Assigning, Reconciling, Stable."""
        return [(gid, g.state) for gid, g in self.consumer.groups.items()]

    def delete_group(self, group_id: str) -> CoordinatorResult:
        """DeleteGroups for one group. Response: error code (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP); records: tombstones for its offsets and its metadata."""
        g = self.groups.get(group_id)
        if not group_id:
            return CoordinatorResult(response=ErrorCode.invalid_group_id)
        if not self.group_exists(group_id):
            return CoordinatorResult(response=ErrorCode.group_id_not_found)
        sg = self.share.get(group_id)
        if sg is not None:
            if sg.members:
                return CoordinatorResult(response=ErrorCode.non_empty_group)
            return CoordinatorResult(sg.tombstones(), ErrorCode.none)
        cg = self.consumer.get(group_id)
        if (g is not None and g.state is not GroupState.EMPTY) or (cg is not None and cg.members):
            return CoordinatorResult(response=ErrorCode.non_empty_group)
        records: list[Record] = [(OffsetKey(group_id, t, p), None) for t, p in self.offsets.offsets.get(group_id, {})]
        if cg is not None:
            return CoordinatorResult(records + cg.tombstones(), ErrorCode.none)
        records.append((GroupKey(group_id), None))
        return CoordinatorResult(records, ErrorCode.none, live=[(LiveGroup(group_id), None)])

    def poll(self, now_ms: int) -> CoordinatorResult:
        """Timers of every classic group: session and rebalance timeouts, initial delay."""
        out = CoordinatorResult()
        for gid, current in self.groups.items():
            due = current.next_deadline()
            if due is None or due > now_ms:
                continue
            g, fx = current.clone(), Effects()
            classic.poll(g, now_ms, self.limits, fx)
            r = self._result(gid, g, fx)
            out.records += r.records
            out.completions += r.completions
            out.live += r.live
        return out

    # -- KIP-848 consumer groups --------------------------------------------------------------
    def consumer_group_heartbeat(self, req: HeartbeatRequest, now_ms: int, topics: TopicsView,
                                 describable: Describable | None = None) -> CoordinatorResult:
        """ConsumerGroupHeartbeat. Response: a :class:`HeartbeatResponse`; records and live
        (timer, regex resolution) records as :meth:`ConsumerGroup.heartbeat` returns them
        (``describable``: the member's DESCRIBE filter for its regex). A classic group
        with members answers GROUP_ID_NOT_FOUND; an empty one is converted (its metadata
        tombstoned before the consumer group's first records)."""
        if req.group_id in self.share.groups:
            return CoordinatorResult(response=HeartbeatResponse(
                ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group."))
        classic_group = self.groups.get(req.group_id)
        if classic_group is not None and (classic_group.members or classic_group.pending
                                          or classic_group.state is not GroupState.EMPTY):
            return CoordinatorResult(response=HeartbeatResponse(
                ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group."))
        r = self._configured(self.consumer.get_or_new(req.group_id)).heartbeat(req, now_ms, topics, describable)
        records = list(r.records)
        if records and (classic_group is not None or req.group_id in self.group_metadata):
            records.insert(0, (GroupKey(req.group_id), None))
        return CoordinatorResult(records, r.response, live=list(r.live))

    def describe_consumer_group(self, group_id: str, topics: TopicsView) -> dict | None:
        """ConsumerGroupDescribe fields of a consumer group; None if it is not one."""
        cg = self.consumer.get(group_id)
        return None if cg is None else cg.describe(topics)

    def consumer_poll(self, now_ms: int, topics: TopicsView) -> CoordinatorResult:
        """Consumer group timers that are due: fence members whose session expired or
        that did not revoke in time."""
        return self._poll_modern(self.consumer.groups.values(), now_ms, topics)

    def consumer_next_deadline(self) -> int | None:
        """The earliest consumer group timer (None: none armed)."""
        return self.consumer.next_deadline()

    @staticmethod
    def _poll_modern(groups: Iterable[ModernGroup], now_ms: int, topics: TopicsView) -> CoordinatorResult:
        """The records of :meth:`.ModernGroup.poll` of every group with a timer due."""
        out = CoordinatorResult()
        for g in list(groups):
            due = g.next_deadline()
            if due is None or due > now_ms:
                continue
            r = g.poll(now_ms, topics)
            out.records += r.records
            out.live += r.live
        return out

    def loaded(self, now_ms: int, share_session_timeout: Callable[[str], int] | None = None) -> CoordinatorResult:
        """After loading by replay: live records arming the consumer and share group
        members' timers (share groups: ``share_session_timeout(group_id)``, else the
        default)."""
        out = CoordinatorResult()
        for g in self.consumer.groups.values():
            out.live += self._configured(g).loaded_timers(now_ms).live
        for sg in self.share.groups.values():
            out.live += sg.loaded_timers(now_ms, share_session_timeout(sg.group_id) if share_session_timeout else None).live
        return out

    # -- KIP-932 share groups -------------------------------------------------------------------
    def share_group_heartbeat(self, req: ShareHeartbeatRequest, now_ms: int, topics: TopicsView,
                              session_timeout_ms: int | None = None,
                              heartbeat_interval_ms: int | None = None,
                              assignor: ShareAssignorInput | None = None) -> CoordinatorResult:
        """ShareGroupHeartbeat (validated with :func:`.share_group.validate`). Response: a
        :class:`ShareHeartbeatResponse`. Any other group with this id answers
        GROUP_ID_NOT_FOUND. ``assignor``: the group's assignor and backlog snapshot
        (default ``simple``)."""
        gid = req.group_id
        if gid not in self.share.groups and self.group_exists(gid):
            return CoordinatorResult(response=ShareHeartbeatResponse(
                ErrorCode.group_id_not_found, f"Group {gid} is not a share group."))
        r = self.share.get_or_new(gid).heartbeat(req, now_ms, topics, session_timeout_ms, heartbeat_interval_ms,
                                                 assignor)
        return _coordinator_result(r)

    def share_initialized(self, group_id: str, parts: dict, topics: TopicsView, ok: bool) -> CoordinatorResult:
        """After InitializeShareGroupState for ``parts`` ({topic id: partitions}):
        record them initialized (``ok``) or no longer initializing."""
        sg = self.share.get(group_id)
        if sg is None:
            return CoordinatorResult()
        r = sg.initialized_result(parts, topics) if ok else sg.uninitialized_result(parts, topics)
        return _coordinator_result(r)

    def share_state_deleted(self, group_id: str, topic_ids: Iterable, topics: TopicsView) -> CoordinatorResult:
        """After the share-partition state of these topics was deleted: record them as
        no longer initialized (see :meth:`.ShareGroup.state_deleted_result`)."""
        sg = self.share.get(group_id)
        if sg is None:
            return CoordinatorResult()
        r = sg.state_deleted_result(topic_ids, topics)
        return _coordinator_result(r)

    def describe_share_group(self, group_id: str, topics: TopicsView) -> dict | None:
        """ShareGroupDescribe fields of a share group; None if it is not one."""
        sg = self.share.get(group_id)
        return None if sg is None else sg.describe(topics)

    def list_share_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group: Empty or Stable."""
        return [(gid, g.state) for gid, g in self.share.groups.items()]

    def share_poll(self, now_ms: int, topics: TopicsView) -> CoordinatorResult:
        """Share group members whose session expired are fenced."""
        return self._poll_modern(self.share.groups.values(), now_ms, topics)

    def _configured(self, group: ConsumerGroup) -> ConsumerGroup:
        """The group with its group-config timeouts (consumer.session.timeout.ms,
        consumer.heartbeat.interval.ms) in its config; configs are not state, so this is
        no mutation of what the records say."""
        if self.consumer_timeouts is not None:
            session, interval = self.consumer_timeouts(group.group_id)
            if (session, interval) != (group.config.session_timeout_ms, group.config.heartbeat_interval_ms):
                group.config = replace(group.config, session_timeout_ms=session, heartbeat_interval_ms=interval)
        return group

    # -- OffsetCommit ---------------------------------------------------------------------
    def commit_offsets(self, group_id: str, generation: int, member_id: str, commits: Iterable[CommitTuple],
                       now_ms: int, partition_exists: Callable[[str, int], bool],
                       instance_id: str | None = None, api_version: int = 9) -> CoordinatorResult:
        """Response: (group error, {tp: error}). A *simple* commit (generation -1, no
        member) is allowed while the group has no members; otherwise the member and
        generation must match the group's (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION). For a
        consumer group ``generation`` is the member epoch (STALE_MEMBER_EPOCH,
        UNSUPPORTED_VERSION below v9; :meth:`ConsumerGroup.validate_offset_commit`)."""
        commits = list(commits)
        if not group_id:
            return CoordinatorResult([], (ErrorCode.invalid_group_id, {}))
        cg = self.consumer.get(group_id)
        if group_id in self.share.groups:
            group_error = ErrorCode.group_id_not_found
        elif cg is not None:
            group_error = cg.validate_offset_commit(member_id, generation, api_version, False)
        else:
            group_error = self._validate_member(group_id, generation, member_id, instance_id)
        if group_error != ErrorCode.none:
            return CoordinatorResult([], (group_error, {(c[0], c[1]): group_error for c in commits}))
        errors, records = self.offsets.commit(group_id, commits, now_ms, partition_exists)
        return CoordinatorResult(records, (ErrorCode.none, errors))

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                           member_id: str, instance_id: str | None, commits: Iterable[CommitRequest],
                           now_ms: int, partition_exists: Callable[[str, int], bool]) -> CoordinatorResult:
        """TxnOffsetCommit: validated like an OffsetCommit (a consumer group's member epoch,
        a classic group's member and generation; no group and no generation: a simple
        commit), and written as a transactional batch of the producer: pending until the
        transaction's marker (:meth:`replay_marker`). Response: (group error, {tp: error})."""
        commits = list(commits)
        cg = self.consumer.get(group_id)
        if not group_id:
            group_error = ErrorCode.invalid_group_id
        elif group_id in self.share.groups:
            group_error = ErrorCode.group_id_not_found
        elif cg is not None:
            group_error = cg.validate_offset_commit(member_id, generation, 9, True)
        else:
            group_error = self._validate_member(group_id, generation, member_id, instance_id)
        if group_error != ErrorCode.none:
            return CoordinatorResult([], (group_error, {(c[0], c[1]): group_error for c in commits}))
        errors, records = self.offsets.commit(group_id, commits, now_ms, partition_exists)
        return CoordinatorResult(records, (ErrorCode.none, errors),
                                 txn_batch=TxnBatch(producer_id, producer_epoch) if records else None)

    def has_pending_offsets(self, group_id: str, tp: TopicPartition | None = None) -> bool:
        """Whether an open transaction holds an offset of the group (OffsetFetch's
        UNSTABLE_OFFSET_COMMIT when the client requires stable offsets)."""
        return self.offsets.has_pending(group_id, tp)

    def _validate_member(self, group_id: str, generation: int, member_id: str,
                         instance_id: str | None = None) -> ErrorCode:
        """Kafka's classic ``validateOffsetCommit``: a simple commit (generation < 0, no
        member) only while the group is Empty; a member's commit must name a current
        member (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) of the current generation
        (ILLEGAL_GENERATION), and not while the group awaits its assignment
        (REBALANCE_IN_PROGRESS). No group at all: ILLEGAL_GENERATION for a member commit."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.none if generation < 0 and not member_id else ErrorCode.illegal_generation
        if g.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and g.state is GroupState.EMPTY:
            return ErrorCode.none
        if generation >= 0 or member_id or instance_id is not None:
            code = g.generation_check(member_id, instance_id, generation)
            if code != ErrorCode.none:
                return code
        else:
            return ErrorCode.unknown_member_id
        if g.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- OffsetFetch ----------------------------------------------------------------------
    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None,
                      require_stable: bool = False) -> list[FetchedOffset]:
        """Committed offsets (-1 for none, and for unknown groups, with no error). With
        ``require_stable`` (OffsetFetch v7+, KIP-447) a partition whose offset is pending
        in an open transaction answers UNSTABLE_OFFSET_COMMIT (offset -1) instead, so the
        client retries rather than start from an offset about to change."""
        out = self.offsets.fetch(group_id, partitions)
        if not require_stable or not self.offsets.pending:
            return out
        return [FetchedOffset(f.topic, f.partition, -1, -1, "", ErrorCode.unstable_offset_commit)
                if self.offsets.has_pending(group_id, (f.topic, f.partition)) else f for f in out]

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9 from a consumer group member: UNKNOWN_MEMBER_ID or
        STALE_MEMBER_EPOCH; NONE for other groups and for fetches without a member."""
        if group_id in self.share.groups:
            return ErrorCode.group_id_not_found
        cg = self.consumer.get(group_id)
        return ErrorCode.none if cg is None else cg.validate_offset_fetch(member_id, member_epoch)

    # -- OffsetDelete ---------------------------------------------------------------------
    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                       subscribed_topics: set[str]) -> CoordinatorResult:
        """Response: (group error, {tp: error}). GROUP_ID_NOT_FOUND for an unknown group;
        GROUP_SUBSCRIBED_TO_TOPIC for partitions of topics an active member subscribes to."""
        partitions = list(partitions)
        if not self.group_exists(group_id) or group_id in self.share.groups:
            return CoordinatorResult([], (ErrorCode.group_id_not_found, {}))
        errors = {}
        deletable = []
        for tp in partitions:
            if tp[0] in subscribed_topics:
                errors[tp] = ErrorCode.group_subscribed_to_topic
            else:
                errors[tp] = ErrorCode.none
                deletable.append(tp)
        return CoordinatorResult(self.offsets.delete(group_id, deletable), (ErrorCode.none, errors))

    # -- timers ---------------------------------------------------------------------------
    def empty_since(self, group_id: str) -> int | None:
        """None while the group has members; else when it became empty (0 if unknown,
        meaning each offset's commit timestamp counts, as for simple groups)."""
        cg = self.consumer.get(group_id)
        if cg is not None:
            return None if cg.members else 0
        g = self.groups.get(group_id)
        if g is None:
            return 0
        if g.members:
            return None
        return max(g.state_ts, 0)

    def expire_offsets(self, now_ms: int) -> CoordinatorResult:
        """Tombstones for offsets of groups without members past offsets.retention.minutes."""
        records: list[Record] = []
        for group_id in list(self.offsets.offsets):
            since = self.empty_since(group_id)
            if since is None:
                continue  # the group has members: its offsets never expire
            records += self.offsets.expired(group_id, now_ms, self.config.offsets_retention_ms, since)
        return CoordinatorResult(records)

    # -- the only mutators -------------------------------------------------------------
    def replay_txn(self, txn: TxnBatch, key: Any, value: Any) -> None:
        """A record of a transactional batch (pending offsets), or ``txn``'s marker
        (``key`` None): the producer's pending offsets committed or dropped."""
        if txn.marker is not None:
            self.offsets.replay_marker(txn.producer_id, txn.marker)
        elif isinstance(key, OffsetKey):
            self.offsets.replay_pending(txn.producer_id, key, value)

    def replay_all(self, records: list[Record]) -> None:
        """:meth:`replay` of each record, in order (the offset records of an OffsetCommit
        in one call to the offset store)."""
        if all(type(k) is OffsetKey and type(v) is OffsetValue for k, v in records):
            self.offsets.replay_values(records)
            return
        for key, value in records:
            self.replay(key, value)

    def replay(self, key: Any, value: Any) -> None:
        if isinstance(key, OffsetKey):
            self.offsets.replay(key, value if isinstance(value, OffsetValue) or value is None else None)
        elif isinstance(key, GroupKey):
            if value is None:
                self.group_metadata.pop(key.group, None)
                self.groups.pop(key.group, None)
            else:
                self.group_metadata[key.group] = value
                self.groups[key.group] = ClassicGroup.from_record(key.group, value)
        elif isinstance(key, LiveGroup):
            if value is None:
                self.groups.pop(key.group, None)
            else:
                self.groups[key.group] = value
        elif isinstance(key, (*SR.SHARE_KEY_TYPES, ShareTimersKey, ShareInitKey, ShareRetargetKey)):
            self.share.replay(key, value)
        elif isinstance(key, (TimersKey, RegexTopicsKey, CR.ConsumerKey)):
            if value is None and key.group_id not in self.consumer.groups:
                return  # a tombstone of a group already gone must not bring it back
            self.consumer.replay(key, value)
