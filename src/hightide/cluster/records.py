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
from .security_records import SECURITY_RECORD_TYPES, SecurityRecord

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32  # group configs (share.*), Kafka's ConfigResource.Type.GROUP


@dataclass(frozen=True)
class TopicRecord:
    type: ClassVar[str] = "topic"
    name: str
    topic_id: str  # UUID string


@dataclass(frozen=True)
class PartitionRecord:
    type: ClassVar[str] = "partition"
    topic_id: str
    partition: int
    leader: int
    leader_epoch: int = 0
    replicas: tuple[int, ...] = ()


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


MetadataRecord = (TopicRecord | PartitionRecord | RemoveTopicRecord | ConfigRecord | ProducerIdsRecord
                  | FeatureLevelRecord | BrokerRecord | SecurityRecord)
_TYPES = {cls.type: cls for cls in (TopicRecord, PartitionRecord, RemoveTopicRecord, ConfigRecord, ProducerIdsRecord,
                                    FeatureLevelRecord, *BROKER_RECORD_TYPES, *SECURITY_RECORD_TYPES)}


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
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in body.items() if k in names}
    return cls(**kwargs)
