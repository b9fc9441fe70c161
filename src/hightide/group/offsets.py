"""Committed offsets of every group in one ``__consumer_offsets`` partition (sans-IO).

State changes only through :meth:`OffsetStore.replay`; the request methods validate and
return the records to append. Validation of *who* may commit (generation, member) is the
group's business (see :mod:`.shard`); this module knows offsets, metadata limits and
expiry.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

from kio.schema.errors import ErrorCode

from .records import OffsetKey, OffsetValue

TopicPartition = tuple[str, int]
Record = tuple[object, object | None]


class CommitRequest(NamedTuple):
    """One partition of an OffsetCommit (a tuple: a request builds one per partition)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    expected_offset: int | None = None  # hightide extension: commit only if stored == expected


# What a commit reads: a CommitRequest, or any tuple of its fields in its order (the
# broker's OffsetCommit decoder yields such tuples, see hightide.protocol.offset_commit_request).
CommitTuple = tuple[str, int, int, int, "str | None", "int | None"]


class FetchedOffset(NamedTuple):
    """A tuple (cheap to build: OffsetFetch answers thousands per request)."""

    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error_code: ErrorCode = ErrorCode.none


class OffsetStore:
    def __init__(self, metadata_max_bytes: int = 4096) -> None:
        self.metadata_max_bytes = metadata_max_bytes
        self.offsets: dict[str, dict[TopicPartition, OffsetValue]] = {}
        # Kafka's pendingTransactionalOffsetCommits: producer id -> group -> offsets that
        # TxnOffsetCommit wrote (with their replay position), visible in ``offsets`` only
        # once the COMMIT marker is replayed.
        self.pending: dict[int, dict[str, dict[TopicPartition, tuple[OffsetValue, int]]]] = {}
        # While transactions hold offsets: the replay position of the offset committed for
        # (group, topic, partition). Replay follows log order, so a position compares as
        # Kafka compares record offsets: the commit later in the log wins.
        self._position = 0
        self._committed_at: dict[tuple[str, str, int], int] = {}

    # -- reads ------------------------------------------------------------------------
    def fetch(self, group: str, partitions: Iterable[TopicPartition] | None) -> list[FetchedOffset]:
        """Committed offsets; an unknown group or partition answers -1 with no error (as
        Kafka does). ``partitions=None`` means every partition the group committed."""
        committed = self.offsets.get(group, {})
        if partitions is None:
            partitions = sorted(committed)
        out = []
        for tp in partitions:
            v = committed.get(tp)
            if v is None:
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, ""))
            else:
                out.append(FetchedOffset(tp[0], tp[1], v.offset, v.leader_epoch, v.metadata))
        return out

    def has_offsets(self, group: str) -> bool:
        return bool(self.offsets.get(group))

    def has_pending(self, group: str, tp: TopicPartition | None = None) -> bool:
        """Whether an open transaction holds an offset of ``group`` (for ``tp``, or any)."""
        for groups in self.pending.values():
            offsets = groups.get(group)
            if offsets and (tp is None or tp in offsets):
                return True
        return False

    # -- writes (return records; never mutate) ------------------------------------------
    def commit(self, group: str, commits: Iterable[CommitTuple], now_ms: int,
               partition_exists: Callable[[str, int], bool]) -> tuple[dict[TopicPartition, ErrorCode], list[Record]]:
        """Validate commits; return per-partition errors and the records to append.

        Per partition: OFFSET_METADATA_TOO_LARGE (metadata longer than
        ``offset.metadata.max.bytes``); UNKNOWN_TOPIC_OR_PARTITION (no such partition: a
        commit nobody could ever consume from is refused, as Kafka's KafkaApis does);
        :data:`EXPECTED_OFFSET_MISMATCH` when the ExpectedOffset extension is set and
        the stored offset (-1 if none) differs. Other partitions still commit."""
        errors: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        current = self.offsets.get(group, {})
        limit = self.metadata_max_bytes
        none, new = ErrorCode.none, tuple.__new__  # (the NamedTuples without their Python-level __new__)
        for topic, partition, offset, leader_epoch, metadata, expected_offset in commits:
            tp = (topic, partition)
            if metadata is None:
                metadata = ""
            # (UTF-8 takes at most 4 bytes per character: most metadata needs no encoding)
            if 4 * len(metadata) > limit and len(metadata.encode()) > limit:
                errors[tp] = ErrorCode.offset_metadata_too_large
            elif not partition_exists(topic, partition):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif expected_offset is not None and \
                    (current[tp].offset if tp in current else -1) != expected_offset:
                errors[tp] = EXPECTED_OFFSET_MISMATCH
            else:
                errors[tp] = none
                records.append((new(OffsetKey, (group, topic, partition)),
                                new(OffsetValue, (offset, leader_epoch, metadata, now_ms, -1))))
        return errors, records

    def delete(self, group: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """Tombstones for the committed offsets among ``partitions``."""
        committed = self.offsets.get(group, {})
        return [(OffsetKey(group, t, p), None) for t, p in partitions if (t, p) in committed]

    def delete_group(self, group: str) -> list[Record]:
        return [(OffsetKey(group, t, p), None) for t, p in sorted(self.offsets.get(group, {}))]

    def expired(self, group: str, now_ms: int, retention_ms: int, since_ms: int | None) -> list[Record]:
        """Tombstones for offsets past ``offsets.retention.minutes``: measured from the
        time the group became empty (``since_ms``) or, for groups without members and
        state, from each commit's timestamp (Kafka ≥ 2.1)."""
        out: list[Record] = []
        for (t, p), v in sorted(self.offsets.get(group, {}).items()):
            base = since_ms if since_ms is not None and since_ms > 0 else v.commit_timestamp
            if v.expire_timestamp >= 0 and now_ms >= v.expire_timestamp or now_ms - base >= retention_ms:
                out.append((OffsetKey(group, t, p), None))
        return out

    # -- the only mutators --------------------------------------------------------------
    def replay_pending(self, producer_id: int, key: OffsetKey, value: OffsetValue | None) -> None:
        """An offset record of ``producer_id``'s transaction: pending until its marker."""
        if value is not None:
            self._position += 1
            self.pending.setdefault(producer_id, {}).setdefault(key.group, {})[(key.topic, key.partition)] = \
                (value, self._position)

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended: its pending offsets become committed
        (COMMIT) or are dropped (ABORT). As in Kafka, a pending offset replaces the
        committed one only if it is later in the log (a plain OffsetCommit, or another
        transaction's offset, written after it wins)."""
        groups = self.pending.pop(producer_id, {})
        if commit:
            for group, offsets in groups.items():
                committed = self.offsets.setdefault(group, {})
                for (t, p), (v, position) in offsets.items():
                    if position > self._committed_at.get((group, t, p), 0):
                        committed[(t, p)] = v
                        self._committed_at[(group, t, p)] = position
                if not committed:
                    del self.offsets[group]
        if not self.pending:
            self._committed_at.clear()

    def replay_values(self, records: Iterable[tuple[OffsetKey, OffsetValue]]) -> None:
        """:meth:`replay` of each record (none a tombstone), in order: an OffsetCommit's."""
        if self.pending:
            for key, value in records:
                self.replay(key, value)
            return
        offsets = self.offsets
        last, group = None, None
        for key, value in records:
            if key.group != last:
                last = key.group
                group = offsets.get(last)
                if group is None:
                    group = offsets[last] = {}
            assert group is not None
            group[(key.topic, key.partition)] = value

    def replay(self, key: OffsetKey, value: OffsetValue | None) -> None:
        tp = (key.topic, key.partition)
        if value is None:
            group = self.offsets.get(key.group)
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self.offsets[key.group]
        else:
            group = self.offsets.get(key.group)
            if group is None:
                group = self.offsets[key.group] = {}
            group[tp] = value
        if self.pending:  # transactions hold offsets: remember where this commit is in the log
            self._position += 1
            if value is None:
                self._committed_at.pop((key.group, key.topic, key.partition), None)
            else:
                self._committed_at[(key.group, key.topic, key.partition)] = self._position


# The ExpectedOffset extension's error: the stored offset differs from the one the
# client expected (someone else committed in between). OFFSET_NOT_AVAILABLE is the
# closest existing code ("not available at this offset"); docs/offsets.md explains.
EXPECTED_OFFSET_MISMATCH = ErrorCode.offset_not_available
