"""Inputs and outputs of the KIP-848 consumer group state machine (:mod:`.consumer_group`).

Version-independent: the server handlers translate ConsumerGroupHeartbeat requests
(kio entities) into a :class:`HeartbeatRequest` and a :class:`HeartbeatResponse` back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..cluster.image import MetadataImage
from .consumer_records import TopicMetadata, TopicPartitions

Record = tuple[Any, Any]


# -- inputs and outputs -------------------------------------------------------------------------
class TopicsView(Protocol):
    """The topics of the metadata image, as the group needs them."""

    def by_name(self, name: str) -> TopicMetadata | None: ...
    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...
    def names(self) -> Iterable[str]: ...


class StaticTopics:
    """A :class:`TopicsView` over ``{name: (topic_id, partition_count)}`` (tests, adapters)."""

    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]]) -> None:
        self._by_name = {n: TopicMetadata(tid, n, count) for n, (tid, count) in topics.items()}
        self._by_id = {t.topic_id: t for t in self._by_name.values()}

    def by_name(self, name: str) -> TopicMetadata | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def names(self) -> Iterable[str]:
        return self._by_name.keys()


class ImageTopics:
    """A :class:`TopicsView` over the cluster's ``MetadataImage`` (read live, not copied)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def by_name(self, name: str) -> TopicMetadata | None:
        t = self.image.topics.get(name)
        return None if t is None else TopicMetadata(t.topic_id, t.name, len(t.partitions))

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        t = self.image.topics_by_id.get(topic_id)
        return None if t is None else TopicMetadata(t.topic_id, t.name, len(t.partitions))

    def names(self) -> Iterable[str]:
        return self.image.topics.keys()


@dataclass(frozen=True)
class ModernGroupConfig:
    """What every KIP-848 / KIP-932 group is configured with (``group.<kind>.session.timeout.ms``,
    ``group.<kind>.heartbeat.interval.ms``, ``group.<kind>.max.size``)."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1


@dataclass(frozen=True)
class ConsumerGroupConfig(ModernGroupConfig):
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors (first = default)


@dataclass(frozen=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat fields (None = unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: TopicPartitions | None = None  # owned partitions
    client_id: str = ""
    client_host: str = ""
    api_version: int = 0


@dataclass(frozen=True)
class HeartbeatResponse:
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged


@dataclass(frozen=True, slots=True)
class LiveMemberKey:
    """Key of a live record about one member: replayed after the appended records,
    never appended itself. A subclass per kind of group."""

    group_id: str
    member_id: str


class TimersKey(LiveMemberKey):
    """Key of a live record: the value is the consumer group member's :class:`Timers`
    (None: cancelled)."""

    __slots__ = ()


class RegexTopicsKey(LiveMemberKey):
    """Key of a live record: the value is the frozenset of topic names the consumer
    group member's regex resolved to at its last heartbeat, only those its principal may
    describe (None: the member has no regex, or is gone). Live state, never appended."""

    __slots__ = ()


#: What the shell passes a heartbeat to resolve a regex with the member's authorization:
#: given topic names, the subset the member's principal may DESCRIBE (Kafka's
#: ``filterTopicDescribeAuthorizedTopics``). None: no authorizer, every topic.
Describable = Callable[[Collection[str]], Collection[str]]


@dataclass(frozen=True, slots=True)
class Timers:
    session_deadline_ms: int
    rebalance_deadline_ms: int | None = None  # while UNREVOKED_PARTITIONS at rebalance_epoch
    rebalance_epoch: int = -1


@dataclass
class Result:
    """The response, records to append (then replay), live records to replay after them."""

    response: Any = None
    records: list[Record] = field(default_factory=list)
    live: list[Record] = field(default_factory=list)


class HeartbeatError(Exception):
    """A request the group refuses, with the Kafka error code to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def invalid_request(cls, message: str) -> HeartbeatError:
        """INVALID_REQUEST (a request that breaks the API's rules) with ``message``."""
        return cls(ErrorCode.invalid_request, message)
