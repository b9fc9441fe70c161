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

from .admin import AdminClient, parse_servers
from .configs import AlterOp, ConfigEntry, ConfigResource, ConfigSource, ResourceType
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
                     "ResourceType",
                     "TopicAlreadyExistsError",
                     "TopicMetadata",
                     "TopicPartition",
                     "UnknownTopicOrPartitionError",
                     "UnsupportedVersionError",
                     "error_for",
                     "parse_servers",
]
