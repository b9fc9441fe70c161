"""The in-memory metadata image: what every handler reads.

It changes only through :meth:`MetadataImage.apply` of metadata records, in log order,
so replaying the metadata log at start-up rebuilds exactly the state that was served.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from .broker_image import BrokerRegistration, apply_broker_record
from .broker_records import BROKER_RECORD_TYPES, NoOpRecord
from .quota_image import ClientQuotasImage
from .quota_records import ClientQuotaRecord
from .security_image import SecurityImage, apply_security_record
from .security_records import SECURITY_RECORD_TYPES
from .records import (
    BROKER_RESOURCE,
    GROUP_RESOURCE,
    NO_LEADER_CHANGE,
    RECOVERED,
    TOPIC_RESOURCE,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
)


@dataclass
class PartitionImage:
    """One partition as the controller last recorded it (Kafka's ``PartitionRegistration``):
    ``isr`` never empty (defaults to ``replicas``); during a reassignment ``replicas``
    holds the target replicas followed by those being removed, ``adding_replicas`` and
    ``removing_replicas`` the difference; ``partition_epoch`` counts every change."""
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...] = ()
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED

    def __post_init__(self) -> None:
        if not self.isr:
            self.isr = tuple(self.replicas)

    @property
    def preferred_leader(self) -> int:
        """The first replica (Kafka's preferred replica); -1 without replicas."""
        return self.replicas[0] if self.replicas else -1

    @property
    def reassigning(self) -> bool:
        """True while a reassignment is in progress."""
        return bool(self.adding_replicas or self.removing_replicas)

    def merge(self, change: PartitionChangeRecord) -> PartitionImage:
        """This partition after ``change`` (Kafka's ``PartitionRegistration.merge``): the
        partition epoch + 1, the leader epoch + 1 when the record names a leader."""
        leader_changed = change.leader != NO_LEADER_CHANGE
        return PartitionImage(
            self.partition,
            change.leader if leader_changed else self.leader,
            self.leader_epoch + 1 if leader_changed else self.leader_epoch,
            self.replicas if change.replicas is None else tuple(change.replicas),
            self.isr if change.isr is None else tuple(change.isr),
            self.partition_epoch + 1,
            self.removing_replicas if change.removing_replicas is None else tuple(change.removing_replicas),
            self.adding_replicas if change.adding_replicas is None else tuple(change.adding_replicas),
            self.leader_recovery_state if change.leader_recovery_state < 0 else change.leader_recovery_state)

    @classmethod
    def of(cls, record: PartitionRecord) -> PartitionImage:
        """The partition a ``PartitionRecord`` describes."""
        return cls(record.partition, record.leader, record.leader_epoch, tuple(record.replicas), tuple(record.isr),
                   record.partition_epoch, tuple(record.removing_replicas), tuple(record.adding_replicas),
                   record.leader_recovery_state)


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionImage] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


@dataclass
class MetadataImage:
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    broker_configs: dict[str, str] = field(default_factory=dict)
    #: Dynamic broker configs by resource name: "" (cluster default) or a broker id.
    broker_dynamic: dict[str, dict[str, str]] = field(default_factory=dict)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # group id -> overrides
    next_producer_id: int = 0
    offset: int = -1  # metadata log offset of the last applied record
    #: Offset of the last applied record that is not a NoOp (-1: none): what a broker's
    #: read gate waits for (a NoOp changes nothing a reader can see).
    content_offset: int = -1
    #: Finalized feature levels by name (FeatureLevelRecord; UpdateFeatures).
    features: dict[str, int] = field(default_factory=dict)
    #: Registered brokers by id (cluster mode; see hightide.cluster.broker_image).
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    #: ACLs and SCRAM credentials (see hightide.cluster.security_image).
    security: SecurityImage = field(default_factory=SecurityImage)
    #: Client quotas by entity (ClientQuotaRecord; see hightide.cluster.quota_image).
    quotas: ClientQuotasImage = field(default_factory=ClientQuotasImage)
    #: The names of the topics that records applied since the last :meth:`take_changes`
    #: touched (created, removed, a partition added or changed, a config); None: anything
    #: may have changed (a fresh image, replayed or loaded from a snapshot; a change of
    #: the brokers or of broker configs), so whoever follows the image looks at all of it.
    #: Not part of the image's value (not compared).
    changed_topics: set[str] | None = field(default=None, compare=False, repr=False)
    #: The names of topics with "." or "_", by their name with "." as "_" (Kafka's
    #: ``topicsWithCollisionChars``), built at the first :meth:`colliding_topic` and kept
    #: by :meth:`apply` from then on (a copy builds its own). Not part of the value.
    _collision_index: dict[str, set[str]] | None = field(default=None, init=False, compare=False, repr=False)

    def colliding_topic(self, name: str) -> str | None:
        """Another topic whose name differs from ``name`` only in "." and "_" (Kafka
        refuses such a topic: their metric names collide), or None. A name with neither
        character collides with nothing; for the others one lookup, not a pass over every
        topic (a CreateTopics at 100,000 topics)."""
        norm = _collision_key(name)
        if norm is None:
            return None
        index = self._collision_index
        if index is None:
            index = {}
            for other in self.topics:
                key = _collision_key(other)
                if key is not None:
                    index.setdefault(key, set()).add(other)
            self._collision_index = index
        return next((other for other in sorted(index.get(norm, ())) if other != name), None)

    #: What Kafka's periodic elections look for, as (topic, partition) pairs: the
    #: leaderless partitions that have replicas, and the partitions with replicas not led
    #: by their first one (the leaderless among them). Built at the first
    #: :meth:`election_candidates` and kept by :meth:`apply` from then on (a copy builds
    #: its own), so the controller's timer does not walk every partition at each wake.
    _elections: tuple[set[tuple[str, int]], set[tuple[str, int]]] | None = field(
        default=None, init=False, compare=False, repr=False)

    def election_candidates(self) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
        """(leaderless partitions with replicas, partitions with replicas not led by the
        first one): see ``_elections``. The sets are the image's: read them, never change them."""
        if self._elections is None:
            self._elections = (set(), set())
            for t in self.topics.values():
                for p, pimg in t.partitions.items():
                    self._index_partition(t.name, p, pimg)
        return self._elections

    def _index_partition(self, name: str, partition: int, pimg: PartitionImage | None) -> None:
        """Put a partition's new state (None: gone) in the election index, if built."""
        if self._elections is None:
            return
        leaderless, unpreferred = self._elections
        key = (name, partition)
        if pimg is not None and pimg.replicas:
            (leaderless.add if pimg.leader == -1 else leaderless.discard)(key)
            (unpreferred.add if pimg.leader != pimg.replicas[0] else unpreferred.discard)(key)
        else:
            leaderless.discard(key)
            unpreferred.discard(key)

    def _index_topic(self, name: str, present: bool) -> None:
        index, key = self._collision_index, _collision_key(name)
        if index is None or key is None:
            return
        if present:
            index.setdefault(key, set()).add(name)
        else:
            names = index.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del index[key]

    def take_changes(self) -> set[str] | None:
        """The topics changed since the last call (None: look at everything; see
        ``changed_topics``), and start collecting afresh. One consumer per image: the
        node's hook that puts metadata changes in force on what it hosts."""
        changed, self.changed_topics = self.changed_topics, set()
        return changed

    def _touch(self, topic: str) -> None:
        if self.changed_topics is not None:
            self.changed_topics.add(topic)

    def apply(self, record: MetadataRecord, offset: int) -> None:
        """Apply one record (the only mutator)."""
        match record:
            case TopicRecord(name=name, topic_id=tid):
                if (old := self.topics.get(name)) is not None:  # (a name is removed before it is reused)
                    for p in old.partitions:
                        self._index_partition(name, p, None)
                t = TopicImage(name, uuid.UUID(tid))
                self.topics[name] = t
                self.topics_by_id[t.topic_id] = t
                self._index_topic(name, True)
                self._touch(name)
            case PartitionRecord():
                t = self.topics_by_id[uuid.UUID(record.topic_id)]
                t.partitions[record.partition] = pimg = PartitionImage.of(record)
                self._index_partition(t.name, record.partition, pimg)
                self._touch(t.name)
            case PartitionChangeRecord():
                changed = self.topics_by_id.get(uuid.UUID(record.topic_id))
                current = changed.partitions.get(record.partition) if changed is not None else None
                if changed is not None and current is not None:  # a change of a deleted topic: nothing left
                    changed.partitions[record.partition] = pimg = current.merge(record)
                    self._index_partition(changed.name, record.partition, pimg)
                    self._touch(changed.name)
            case RemoveTopicRecord(topic_id=tid):
                removed = self.topics_by_id.pop(uuid.UUID(tid), None)
                if removed is not None:
                    self.topics.pop(removed.name, None)
                    self._index_topic(removed.name, False)
                    for p in removed.partitions:
                        self._index_partition(removed.name, p, None)
                    self._touch(removed.name)
            case ConfigRecord(resource_type=rt, resource_name=rn, name=n, value=v):
                target = self._config_target(rt, rn)
                if target is not None:
                    if v is None:
                        target.pop(n, None)
                    else:
                        target[n] = v
                    if rt == GROUP_RESOURCE and not target:
                        self.group_configs.pop(rn, None)
                if rt == BROKER_RESOURCE:
                    self._apply_broker_config(rn, n, v)
                    self.changed_topics = None
                elif rt == TOPIC_RESOURCE:
                    self._touch(rn)
            case ProducerIdsRecord(next_producer_id=nxt):
                self.next_producer_id = max(self.next_producer_id, nxt)
            case FeatureLevelRecord(name=name, feature_level=level):
                if level > 0:
                    self.features[name] = level
                else:
                    self.features.pop(name, None)
            case _ if isinstance(record, BROKER_RECORD_TYPES):
                apply_broker_record(self.brokers, record, offset)
                if not isinstance(record, NoOpRecord):  # who may lead changed
                    self.changed_topics = None
            case ClientQuotaRecord():
                self.quotas.apply(record)
            case _ if isinstance(record, SECURITY_RECORD_TYPES):
                apply_security_record(self.security, record)
        self.offset = offset
        if not isinstance(record, NoOpRecord):
            self.content_offset = offset

    def _apply_broker_config(self, resource_name: str, name: str, value: str | None) -> None:
        configs = self.broker_dynamic.setdefault(resource_name, {})
        if value is None:
            configs.pop(name, None)
        else:
            configs[name] = value
        if not configs:
            del self.broker_dynamic[resource_name]

    def _config_target(self, resource_type: int, name: str) -> dict[str, str] | None:
        if resource_type == TOPIC_RESOURCE:
            t = self.topics.get(name)
            return t.configs if t else None
        if resource_type == BROKER_RESOURCE:
            return self.broker_configs
        if resource_type == GROUP_RESOURCE:
            return self.group_configs.setdefault(name, {})
        return None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)


def _collision_key(name: str) -> str | None:
    """``name`` with "." as "_", or None when it has neither (it can collide with no
    other name: one that maps to it would have to be itself)."""
    if "." not in name and "_" not in name:
        return None
    return name.replace(".", "_")
