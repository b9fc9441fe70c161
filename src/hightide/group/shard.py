"""The group coordinator shard of one ``__consumer_offsets`` partition (sans-IO).

Shaped like Kafka's ``GroupCoordinatorShard``: request methods validate against the
current state and return a :class:`CoordinatorResult` — the records to append and the
response — without touching state; :meth:`GroupCoordinatorShard.replay` is the only
mutator, used both after a successful append and to load the partition at start-up.
Time is an argument, never read here. The runtime (``hightide.server.group_runtime``)
appends the records, replays them, and only then releases the response, so a reader can
never observe state that a failed append would take back.

Classic groups (:mod:`.classic`) also have state that is never persisted (parked
requests, session deadlines). A request works on a clone of the group and returns the
new group as a *live* record ``(LiveGroup(id), group)``: replayed like the others, after
them, but never appended — so a failed append takes that change back too. Parked
responses leave as ``completions``: ``(handle, response)`` pairs for the opaque handles
the runtime passed in with this or earlier requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from . import classic
from .classic import ClassicGroup, Effects, GroupLimits, GroupState, JoinRequest, JoinResponse, SyncResponse
from .offsets import CommitRequest, FetchedOffset, OffsetStore, TopicPartition
from .records import GroupKey, GroupValue, OffsetKey, OffsetValue
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


@dataclass(frozen=True, slots=True)
class LiveGroup:
    """Key of a live record: the value is the group's new in-memory state (None: gone)."""

    group: str


@dataclass
class GroupConfig:
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    classic: GroupLimits = field(default_factory=GroupLimits)


def _uuid_member_id(client_id: str) -> str:
    import uuid
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig | None = None,
                 member_ids: Callable[[str], str] = _uuid_member_id) -> None:
        self.config = config or GroupConfig()
        self.limits = self.config.classic
        self.offsets = OffsetStore(self.config.offset_metadata_max_bytes)
        self.new_member_id = member_ids
        # Classic group metadata as last replayed (GroupValue records) ...
        self.group_metadata: dict[str, GroupValue] = {}
        # ... and the live classic groups (loaded from those, then driven by requests).
        self.groups: dict[str, ClassicGroup] = {}

    # -- membership view -----------------------------------------------------------------
    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the group's members subscribe to (consumer protocol; empty without members)."""
        g = self.groups.get(group_id)
        if g is None or not g.members or g.protocol_type != "consumer":
            return set()
        out: set[str] = set()
        for m in g.members.values():
            meta = m.metadata(g.protocol) if g.protocol else (m.protocols[0][1] if m.protocols else b"")
            out.update(decode_subscription(meta))
        return out

    def group_exists(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.group_metadata or self.offsets.has_offsets(group_id)

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
        current = self.groups.get(req.group_id)
        if current is None and req.member_id:
            return fail(ErrorCode.unknown_member_id)
        g = current.clone() if current else ClassicGroup(req.group_id, state_ts=now_ms)
        fx = Effects()
        classic.join(g, req, handle, now_ms, self.limits, fx, self.new_member_id)
        if current is None and g.state is GroupState.EMPTY and not g.pending:
            return CoordinatorResult(completions=fx.completions)  # nothing to keep
        return self._result(req.group_id, g, fx)

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
        """DescribeGroups fields of a group; None if it does not exist (Kafka: Dead)."""
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
                if gid not in self.groups and self.offsets.has_offsets(gid)]
        return out

    def delete_group(self, group_id: str) -> CoordinatorResult:
        """DeleteGroups for one group. Response: error code (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP); records: tombstones for its offsets and its metadata."""
        g = self.groups.get(group_id)
        if not group_id:
            return CoordinatorResult(response=ErrorCode.invalid_group_id)
        if not self.group_exists(group_id):
            return CoordinatorResult(response=ErrorCode.group_id_not_found)
        if g is not None and g.state is not GroupState.EMPTY:
            return CoordinatorResult(response=ErrorCode.non_empty_group)
        records: list[Record] = [(OffsetKey(group_id, t, p), None) for t, p in self.offsets.offsets.get(group_id, {})]
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

    # -- OffsetCommit ---------------------------------------------------------------------
    def commit_offsets(self, group_id: str, generation: int, member_id: str, commits: Iterable[CommitRequest],
                       now_ms: int, partition_exists: Callable[[str, int], bool],
                       instance_id: str | None = None) -> CoordinatorResult:
        """Response: (group error, {tp: error}). A *simple* commit (generation -1, no
        member) is allowed while the group has no members; otherwise the member and
        generation must match the group's (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION)."""
        commits = list(commits)
        if not group_id:
            return CoordinatorResult([], (ErrorCode.invalid_group_id, {}))
        group_error = self._validate_member(group_id, generation, member_id, instance_id)
        if group_error != ErrorCode.none:
            return CoordinatorResult([], (group_error, {(c.topic, c.partition): group_error for c in commits}))
        errors, records = self.offsets.commit(group_id, commits, now_ms, partition_exists)
        return CoordinatorResult(records, (ErrorCode.none, errors))

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
            code = g.member_check(member_id, instance_id)
            if code != ErrorCode.none:
                return code
            if generation != g.generation:
                return ErrorCode.illegal_generation
        else:
            return ErrorCode.unknown_member_id
        if g.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- OffsetFetch ----------------------------------------------------------------------
    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None) -> list[FetchedOffset]:
        """Committed offsets (-1 for none, and for unknown groups, with no error)."""
        return self.offsets.fetch(group_id, partitions)

    # -- OffsetDelete ---------------------------------------------------------------------
    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                       subscribed_topics: set[str]) -> CoordinatorResult:
        """Response: (group error, {tp: error}). GROUP_ID_NOT_FOUND for an unknown group;
        GROUP_SUBSCRIBED_TO_TOPIC for partitions of topics an active member subscribes to."""
        partitions = list(partitions)
        if not self.group_exists(group_id):
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

    # -- the only mutator -------------------------------------------------------------
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
