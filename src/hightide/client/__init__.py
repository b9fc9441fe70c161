"""A small async Kafka admin client on kio, for hightide's CLI, exporter and Spark parts.

It speaks the plain Kafka protocol (negotiating versions with ApiVersions), so it works
against hightide and any Kafka-compatible broker or cluster, and uses hightide's
protocol extensions (OffsetFetch high watermark tags) when a broker sends them.

    async with AdminClient("127.0.0.1:9092") as admin:
        md = await admin.metadata()
        lag = await admin.lag("my-group")

Besides admin calls it has a few data-plane primitives (:mod:`.data`): partition
leaders, Fetch of raw record batches, InitProducerId and idempotent Produce of raw
record batches, which hightide's Spark source and sink use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admin import AdminClient, parse_servers
    from .configs import AlterOp, ConfigEntry, ConfigResource, ConfigSource, QuotaFilterComponent, ResourceType
    from .connection import BrokerConnection
    from .data import PartitionLeaders
    from .errors import (
                         CoordinatorError,
                         CoordinatorLoadInProgressError,
                         CoordinatorNotAvailableError,
                         ErrorCode,
                         GroupIdNotFoundError,
                         KafkaConnectionError,
                         KafkaError,
                         KafkaTimeoutError,
                         NonEmptyGroupError,
                         NotControllerError,
                         NotCoordinatorError,
                         NotLeaderOrFollowerError,
                         OffsetOutOfRangeError,
                         TopicAlreadyExistsError,
                         UnknownTopicOrPartitionError,
                         UnsupportedVersionError,
                         error_for,
    )
    from .types import (
                         EARLIEST,
                         LATEST,
                         MAX_TIMESTAMP,
                         BrokerMetadata,
                         ClusterMetadata,
                         Coordinator,
                         FetchResult,
                         GroupDescription,
                         GroupListing,
                         ListOffsetsResult,
                         MemberDescription,
                         NewTopic,
                         OffsetAndMetadata,
                         OffsetSpec,
                         PartitionLag,
                         PartitionMetadata,
                         ProducerId,
                         TopicMetadata,
                         TopicPartition,
    )

_HOME = {
    "AdminClient": "admin",
    "parse_servers": "admin",
    "AlterOp": "configs",
    "ConfigEntry": "configs",
    "ConfigResource": "configs",
    "ConfigSource": "configs",
    "QuotaFilterComponent": "configs",
    "ResourceType": "configs",
    "BrokerConnection": "connection",
    "PartitionLeaders": "data",
    "CoordinatorError": "errors",
    "CoordinatorLoadInProgressError": "errors",
    "CoordinatorNotAvailableError": "errors",
    "ErrorCode": "errors",
    "GroupIdNotFoundError": "errors",
    "KafkaConnectionError": "errors",
    "KafkaError": "errors",
    "KafkaTimeoutError": "errors",
    "NonEmptyGroupError": "errors",
    "NotControllerError": "errors",
    "NotCoordinatorError": "errors",
    "NotLeaderOrFollowerError": "errors",
    "OffsetOutOfRangeError": "errors",
    "TopicAlreadyExistsError": "errors",
    "UnknownTopicOrPartitionError": "errors",
    "UnsupportedVersionError": "errors",
    "error_for": "errors",
    "EARLIEST": "types",
    "LATEST": "types",
    "MAX_TIMESTAMP": "types",
    "BrokerMetadata": "types",
    "ClusterMetadata": "types",
    "Coordinator": "types",
    "FetchResult": "types",
    "GroupDescription": "types",
    "GroupListing": "types",
    "ListOffsetsResult": "types",
    "MemberDescription": "types",
    "NewTopic": "types",
    "OffsetAndMetadata": "types",
    "OffsetSpec": "types",
    "PartitionLag": "types",
    "PartitionMetadata": "types",
    "ProducerId": "types",
    "TopicMetadata": "types",
    "TopicPartition": "types",
}


def __getattr__(name: str) -> Any:
    """Names are imported from their module on first use: the broker imports
    :mod:`.errors` (cluster mode's channels raise :class:`KafkaError`) and must not pay
    for the admin client, its connection and data-plane modules at start-up (~60 ms)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'hightide.client' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
                     "EARLIEST",
                     "LATEST",
                     "MAX_TIMESTAMP",
                     "AdminClient",
                     "AlterOp",
                     "BrokerConnection",
                     "BrokerMetadata",
                     "ClusterMetadata",
                     "ConfigEntry",
                     "ConfigResource",
                     "ConfigSource",
                     "Coordinator",
                     "CoordinatorError",
                     "CoordinatorLoadInProgressError",
                     "CoordinatorNotAvailableError",
                     "ErrorCode",
                     "FetchResult",
                     "GroupDescription",
                     "GroupIdNotFoundError",
                     "GroupListing",
                     "KafkaConnectionError",
                     "KafkaError",
                     "KafkaTimeoutError",
                     "ListOffsetsResult",
                     "MemberDescription",
                     "NewTopic",
                     "NonEmptyGroupError",
                     "NotControllerError",
                     "NotCoordinatorError",
                     "NotLeaderOrFollowerError",
                     "OffsetAndMetadata",
                     "OffsetOutOfRangeError",
                     "OffsetSpec",
                     "PartitionLag",
                     "PartitionLeaders",
                     "PartitionMetadata",
                     "ProducerId",
                     "QuotaFilterComponent",
                     "ResourceType",
                     "TopicAlreadyExistsError",
                     "TopicMetadata",
                     "TopicPartition",
                     "UnknownTopicOrPartitionError",
                     "UnsupportedVersionError",
                     "error_for",
                     "parse_servers",
]
