"""A small async Kafka admin client on kio, for hightide's CLI, exporter and Spark parts.

It speaks the plain Kafka protocol (negotiating versions with ApiVersions), so it works
against hightide and any Kafka-compatible broker or cluster, and uses hightide's
protocol extensions (OffsetFetch high watermark tags) when a broker sends them.

    async with AdminClient("127.0.0.1:9092") as admin:
        md = await admin.metadata()
        lag = await admin.lag("my-group")
"""

from .admin import AdminClient, parse_servers
from .connection import BrokerConnection
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
                     GroupDescription,
                     GroupListing,
                     ListOffsetsResult,
                     MemberDescription,
                     NewTopic,
                     OffsetAndMetadata,
                     OffsetSpec,
                     PartitionLag,
                     PartitionMetadata,
                     TopicMetadata,
                     TopicPartition,
)

__all__ = [
                     "EARLIEST",
                     "LATEST",
                     "MAX_TIMESTAMP",
                     "AdminClient",
                     "BrokerConnection",
                     "BrokerMetadata",
                     "ClusterMetadata",
                     "Coordinator",
                     "CoordinatorError",
                     "CoordinatorLoadInProgressError",
                     "CoordinatorNotAvailableError",
                     "ErrorCode",
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
                     "OffsetSpec",
                     "PartitionLag",
                     "PartitionMetadata",
                     "TopicAlreadyExistsError",
                     "TopicMetadata",
                     "TopicPartition",
                     "UnknownTopicOrPartitionError",
                     "UnsupportedVersionError",
                     "error_for",
                     "parse_servers",
]
