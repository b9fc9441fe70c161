"""Plain value types returned by :class:`hightide.client.AdminClient`.

All are immutable; none refers to kio classes, so callers do not depend on a protocol
version. Offsets and timestamps use Kafka's conventions: ``-1`` means "none".
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from .errors import ErrorCode

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_TIMESTAMP",
    "BrokerMetadata",
    "ClusterMetadata",
    "Coordinator",
    "FetchResult",
    "GroupDescription",
    "GroupListing",
    "ListOffsetsResult",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionLag",
    "PartitionMetadata",
    "ProducerId",
    "TopicMetadata",
    "TopicPartition",
    "spec_timestamp",
]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int
    """Leader broker id, -1 when there is none (election in progress, offline)."""
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: dict[int, PartitionMetadata]
    topic_id: uuid.UUID | None = None
    is_internal: bool = False
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One Metadata response. ``controller_id`` is -1 when the broker did not say."""
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]
    controller_id: int = -1
    cluster_id: str | None = None

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader id of ``tp``; -1 if the topic, partition or leader is unknown."""
        t = self.topics.get(tp.topic)
        p = t.partitions.get(tp.partition) if t is not None else None
        return -1 if p is None else p.leader


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. -1 partitions / replication factor: the broker's defaults."""
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)
    assignments: dict[int, list[int]] | None = None


EARLIEST: Literal["earliest"] = "earliest"
LATEST: Literal["latest"] = "latest"
MAX_TIMESTAMP: Literal["max_timestamp"] = "max_timestamp"
OffsetSpec = Literal["earliest", "latest", "max_timestamp"] | int
"""``"earliest"`` (log start), ``"latest"`` (HW, or LSO for read_committed),
``"max_timestamp"`` (record with the largest timestamp; needs ListOffsets v7), or a
timestamp in ms (first offset whose timestamp is ≥ it)."""

_SPECS = {"earliest": -2, "latest": -1, "max_timestamp": -3}


def spec_timestamp(spec: OffsetSpec) -> int:
    """The ListOffsets ``timestamp`` for ``spec``. Raises ValueError for an unknown spec
    or a negative int (negative values are Kafka's special specs: use the names)."""
    if isinstance(spec, str):
        if spec not in _SPECS:
            raise ValueError(f"unknown offset spec {spec!r}")
        return _SPECS[spec]
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
        raise ValueError(f"offset spec must be a name or a timestamp >= 0, got {spec!r}")
    return spec


class ListOffsetsResult(NamedTuple):
    """``(offset, timestamp)``; both -1 when no record matches."""
    offset: int
    timestamp: int


class FetchResult(NamedTuple):
    """One partition's answer to :meth:`~hightide.client.AdminClient.fetch`.

    ``records`` holds the raw record batches exactly as the broker sent them (Kafka
    wire format, possibly empty; the last batch may be cut short by the byte limit);
    it is the decoded response's own ``bytes`` object, not a copy. The offsets are
    the partition's as the leader reported them with this answer.
    """
    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    """-1 when the broker did not report it."""
    aborted: tuple[tuple[int, int], ...] = ()
    """read_committed: ``(producer id, first offset)`` of the aborted transactions the
    batches overlap (skip their data with :class:`hightide.protocol.aborted.AbortedFilter`)."""


class ProducerId(NamedTuple):
    """An idempotent producer's id and epoch (:meth:`~hightide.client.AdminClient.init_producer_id`)."""
    producer_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset. ``offset`` is -1 when the group has no commit for the partition.

    The last three fields come from hightide's OffsetFetch extension (tags 10000–10002);
    None when the broker did not send them (any non-hightide broker).
    """
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1
    high_watermark: int | None = None
    log_start_offset: int | None = None
    last_stable_offset: int | None = None


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None
    """None when the broker is too old to report it (ListGroups < v4)."""
    group_type: str | None = None
    """None when the broker is too old to report it (ListGroups < v5)."""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None = None
    metadata: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int = -1


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Lag of one partition for one group, raw values (never clamped).

    ``committed`` is None when the group has no commit for the partition; ``lag`` is
    ``end_offset - committed`` (None without a commit or without an end offset), where
    ``end_offset`` is the high watermark, or the last stable offset for read_committed.
    ``source`` is ``"extension"`` when the offsets came in the OffsetFetch response
    (hightide's one-round-trip path) and ``"list_offsets"`` otherwise.
    """
    committed: int | None
    high_watermark: int | None
    log_start_offset: int | None
    lag: int | None
    last_stable_offset: int | None = None
    metadata: str | None = None
    source: str = "list_offsets"
    error: ErrorCode = ErrorCode.none
    """Why the end offsets are unknown (e.g. UNKNOWN_TOPIC_OR_PARTITION), else NONE."""
    read_committed: bool = False
    """True: the end offset is ``last_stable_offset`` (and ``high_watermark`` may be None)."""

    @property
    def end_offset(self) -> int | None:
        """The offset lag is measured to: LSO for read_committed, else the high watermark."""
        return self.last_stable_offset if self.read_committed else self.high_watermark

    @property
    def anomalies(self) -> tuple[str, ...]:
        """Conditions a lag report should flag: ``no_commit``, ``committed_past_end``,
        ``committed_before_log_start`` (records lost to retention), ``end_unknown``."""
        out = []
        if self.committed is None:
            out.append("no_commit")
        if self.end_offset is None:
            out.append("end_unknown")
        elif self.committed is not None:
            if self.lag is not None and self.lag < 0:
                out.append("committed_past_end")
            if self.log_start_offset is not None and self.committed < self.log_start_offset:
                out.append("committed_before_log_start")
        return tuple(out)
