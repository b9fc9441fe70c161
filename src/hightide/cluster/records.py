"""Cluster metadata records: the entries of the metadata log.

Every change to cluster metadata (topics, partitions, configs, producer-id blocks) is
one of these records, appended to ``__cluster_metadata`` and applied to the
:class:`~hightide.cluster.image.MetadataImage` by :func:`MetadataImage.apply`. Each is
stored as the value of one Kafka record (JSON with a ``type`` and a ``v`` version), so
the log is a regular partition log readable by any tool that reads record batches.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from .broker_records import BROKER_RECORD_TYPES, BrokerRecord
from .quota_records import QUOTA_RECORD_TYPES, ClientQuotaRecord
from .security_records import SECURITY_RECORD_TYPES, SecurityRecord

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32  # group configs (share.*), Kafka's ConfigResource.Type.GROUP


@dataclass(frozen=True)
class TopicRecord:
    type: ClassVar[str] = "topic"
    name: str
    topic_id: str  # UUID string


#: ``PartitionChangeRecord.leader`` when the leader does not change (Kafka's NO_LEADER_CHANGE).
NO_LEADER_CHANGE = -2
#: Kafka's LeaderRecoveryState: RECOVERED (0), RECOVERING (1: elected uncleanly, the
#: leader has not yet confirmed recovery with AlterPartition); -1 in a change: unchanged.
RECOVERED = 0
RECOVERING = 1


@dataclass(frozen=True)
class PartitionRecord:
    """Kafka's ``PartitionRecord``: the whole state of one partition. ``isr`` empty means
    "the replicas" (records written before replication was tracked carry no ISR, and an
    ISR is never empty), so it is normalized to ``replicas`` on construction."""
    type: ClassVar[str] = "partition"
    topic_id: str
    partition: int
    leader: int
    leader_epoch: int = 0
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED

    def __post_init__(self) -> None:
        if not self.isr:
            object.__setattr__(self, "isr", tuple(self.replicas))


@dataclass(frozen=True)
class PartitionChangeRecord:
    """Kafka's ``PartitionChangeRecord``: a change of one partition; a field left at its
    default (None, ``NO_LEADER_CHANGE``, -1) is unchanged. Applying it bumps the partition
    epoch; a ``leader`` other than ``NO_LEADER_CHANGE`` (even the same broker) also bumps
    the leader epoch (Kafka's ``PartitionRegistration.merge``)."""
    type: ClassVar[str] = "partition_change"
    topic_id: str
    partition: int
    leader: int = NO_LEADER_CHANGE
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1


@dataclass(frozen=True)
class RemoveTopicRecord:
    type: ClassVar[str] = "remove_topic"
    topic_id: str


@dataclass(frozen=True)
class ConfigRecord:
    """Set (value not None) or delete (value None) one config of a resource."""
    type: ClassVar[str] = "config"
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True)
class ProducerIdsRecord:
    """Producer ids below ``next_producer_id`` have been handed out."""
    type: ClassVar[str] = "producer_ids"
    next_producer_id: int


@dataclass(frozen=True)
class FeatureLevelRecord:
    """Kafka's ``FeatureLevelRecord``: the finalized level of feature ``name`` (UpdateFeatures);
    level 0 removes the feature (Kafka's rule)."""
    type: ClassVar[str] = "feature_level"
    name: str
    feature_level: int


MetadataRecord = (TopicRecord | PartitionRecord | PartitionChangeRecord | RemoveTopicRecord | ConfigRecord
                  | ProducerIdsRecord | FeatureLevelRecord | BrokerRecord | SecurityRecord | ClientQuotaRecord)
_TYPES = {cls.type: cls for cls in (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord, ConfigRecord,
                                    ProducerIdsRecord, FeatureLevelRecord, *BROKER_RECORD_TYPES,
                                    *SECURITY_RECORD_TYPES, *QUOTA_RECORD_TYPES)}


def encode(record: MetadataRecord) -> bytes:
    body = asdict(record)
    body["type"] = record.type
    body["v"] = 0
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode(value: bytes) -> MetadataRecord:
    """Decode one record value; raise ValueError for an unknown type."""
    body = json.loads(value)
    cls = _TYPES.get(body.pop("type", None))
    if cls is None:
        raise ValueError(f"unknown metadata record {value[:80]!r}")
    body.pop("v", None)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    kwargs: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in body.items() if k in names}
    return cls(**kwargs)


#: Each record class's field names (decode runs once per record at start-up: 100,000s).
_FIELD_NAMES: dict[type, frozenset[str]] = {}
