"""The group coordinator shard of one ``__consumer_offsets`` partition (sans-IO).

Shaped like Kafka's ``GroupCoordinatorShard``: request methods validate against the
current state and return a :class:`CoordinatorResult` — the records to append and the
response — without touching state; :meth:`GroupCoordinatorShard.replay` is the only
mutator, used both after a successful append and to load the partition at start-up.
Time is an argument, never read here. The runtime (``hightide.server.group_runtime``)
appends the records, replays them, and only then releases the response, so a reader can
never observe state that a failed append would take back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from .offsets import CommitRequest, FetchedOffset, OffsetStore, TopicPartition
from .records import GroupKey, GroupValue, OffsetKey, OffsetValue

Record = tuple[Any, Any]


@dataclass
class CoordinatorResult:
    """Records to append (key, value-or-None) and the response for the caller."""

    records: list[Record] = field(default_factory=list)
    response: Any = None


@dataclass
class GroupConfig:
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig | None = None) -> None:
        self.config = config or GroupConfig()
        self.offsets = OffsetStore(self.config.offset_metadata_max_bytes)
        # Classic group metadata as last replayed; the classic protocol's live state
        # machine builds on it.
        self.group_metadata: dict[str, GroupValue] = {}

    # -- membership view (used for commit validation) -----------------------------------
    def _members(self, group_id: str) -> tuple[int, set[str]]:
        g = self.group_metadata.get(group_id)
        if g is None:
            return -1, set()
        return g.generation, {m.member_id for m in g.members}

    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the group's active members subscribe to (empty for groups without
        members). Filled in by the classic/consumer protocols from member metadata."""
        g = self.group_metadata.get(group_id)
        if g is None or not g.members:
            return set()
        from .subscriptions import subscribed_topics
        return subscribed_topics(g)

    def group_exists(self, group_id: str) -> bool:
        return group_id in self.group_metadata or self.offsets.has_offsets(group_id)

    # -- OffsetCommit ---------------------------------------------------------------------
    def commit_offsets(self, group_id: str, generation: int, member_id: str, commits: Iterable[CommitRequest],
                       now_ms: int, partition_exists: Callable[[str, int], bool]) -> CoordinatorResult:
        """Response: (group error, {tp: error}). A *simple* commit (generation -1, no
        member) is allowed while the group has no members; otherwise the member and
        generation must match the group's (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION)."""
        commits = list(commits)
        if not group_id:
            return CoordinatorResult([], (ErrorCode.invalid_group_id, {}))
        group_error = self._validate_member(group_id, generation, member_id)
        if group_error != ErrorCode.none:
            return CoordinatorResult([], (group_error, {(c.topic, c.partition): group_error for c in commits}))
        errors, records = self.offsets.commit(group_id, commits, now_ms, partition_exists)
        return CoordinatorResult(records, (ErrorCode.none, errors))

    def _validate_member(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        gen, members = self._members(group_id)
        if generation < 0 and not member_id:
            return ErrorCode.none if not members else ErrorCode.unknown_member_id
        if member_id not in members:
            return ErrorCode.unknown_member_id if members or gen >= 0 else ErrorCode.illegal_generation
        if generation != gen:
            return ErrorCode.illegal_generation
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
        g = self.group_metadata.get(group_id)
        if g is None:
            return 0
        if g.members:
            return None
        return max(g.current_state_timestamp, 0)

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
            else:
                self.group_metadata[key.group] = value
