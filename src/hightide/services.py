"""The narrow interfaces the shell's parts are built from (never the ``Broker``).

Each part of the asyncio shell — the handlers (``server``), the coordinators, the
replicas, the cluster node — is constructed with the few things it uses, named by what
they do, so it can be built, tested and simulated without a whole broker:

* :class:`MetadataAccess`: the current metadata image, the controller core, the commit
  path (``write_metadata``/``commit_metadata``) and the node's own topic creations;
* :class:`PartitionLogs`: partition log lookup, and putting changed configs in force
  on the logs;
* :class:`BrokerIdentity`: node id, cluster id, advertised address, whether stopping;
* :class:`ProducerIdSource`: new producer ids;
* :class:`CoordinatorUnavailable` (and :class:`CoordinatorLoadInProgress`): the error
  every shell package raises or catches when a coordinator or the metadata write path
  cannot serve a request;
* :class:`ClusterView`: a broker-only node's view of the controller (caught up,
  ApiVersions' forwarded ranges, finalized features).

The node's components satisfy them (``MetadataAccess``: ``node.metadata_writer.MetadataWriter``;
``PartitionLogs``: ``disk.hosted_logs.HostedLogs``; ``ProducerIdSource``:
``node.producer_ids.ProducerIdManager``; ``BrokerIdentity``: the broker object, see
``server/broker.py``); handing one out typed as its interface keeps each user to that
interface (the type checker enforces it) without a wrapper. This module imports no shell
package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .protocol.errors import ErrorCode

if TYPE_CHECKING:
    from .cluster.controller import Controller, NewTopic, TopicResult
    from .cluster.image import MetadataImage, TopicImage
    from .cluster.records import MetadataRecord
    from .log.partition_log import PartitionLog

T = TypeVar("T")


class CoordinatorUnavailable(Exception):
    """The coordinator (or the metadata write path it depends on) cannot serve this
    request; answer :attr:`error_code` (COORDINATOR_NOT_AVAILABLE unless said otherwise).
    Defined here, below every shell package, because all of them raise or catch it."""

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.coordinator_not_available) -> None:
        super().__init__(message)
        self.error_code = error_code


class CoordinatorLoadInProgress(CoordinatorUnavailable):
    """The partition's log is still being replayed (COORDINATOR_LOAD_IN_PROGRESS)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.coordinator_load_in_progress)

#: A metadata operation: ``op(image) -> (response, records)``, run on the metadata log
#: with every earlier change applied (see :meth:`MetadataAccess.write_metadata`).
MetadataOp = Callable[["MetadataImage"], tuple[T, Sequence["MetadataRecord"]]]


class MetadataAccess(Protocol):
    """The metadata image (replaced on every commit: read it when needed, do not keep
    it across an await), the controller core, and the commit path."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def controller(self) -> Controller: ...

    @property
    def metadata_committed_end(self) -> int:
        """The offset below which the metadata log is committed and applied to the image
        (past its control batches too, e.g. Raft's LeaderChange)."""
        ...

    async def write_metadata(self, op: MetadataOp) -> Any:
        """Run ``op(image) -> (response, records)`` on the metadata log, wait until its
        records are durable and applied, return the response."""
        ...

    async def commit_metadata(self, records: Iterable[MetadataRecord]) -> None: ...

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicResult]:
        """Create topics for the node's own use (Metadata's auto-creation, internal
        topics): through the local metadata log, or the controller on a broker-only node
        (no closure crosses a process). Returns once the image shows them; raises
        CoordinatorUnavailable when the write fails."""
        ...


class ClusterView(Protocol):
    """What ApiVersions and the leadership checks need from a broker-only node
    (``BrokerNode``)."""

    #: True once the node acts on its metadata image (caught up with the controller's
    #: log); before, it leads and coordinates nothing.
    caught_up: bool

    def narrow(self, ranges: list[dict[str, int]]) -> list[dict[str, int]]:
        """ApiVersions' ranges with the forwarded APIs narrowed to the controller's."""
        ...

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        """(epoch, finalized feature levels) as every unfenced broker has applied them
        (acknowledged consistency), else as applied here."""
        ...


class PartitionLogs(Protocol):
    #: The absolute path of the data directory: hightide's one log directory.
    data_dir: str

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None (unknown, or its files cannot be opened)."""
        ...

    def loading(self, topic: str, partition: int) -> bool:
        """True while the partition's log is still being loaded at start-up (its data
        requests answer NOT_LEADER_OR_FOLLOWER, retriable, until then)."""
        ...

    def hosted_logs(self) -> list[tuple[tuple[str, int], PartitionLog]]:
        """Every open partition log of this node with its (topic, partition), the
        metadata log excepted (Kafka's ``LogManager.allLogs``)."""
        ...

    def refresh_topic_config(self, topic: TopicImage) -> None:
        """Put the topic's effective config (after a change to it) in force on its open logs."""
        ...

    def apply_dynamic_broker_configs(self) -> None:
        """Put the image's dynamic broker configs in force on the node's config and on
        every open log (after a change to them)."""
        ...


class BrokerIdentity(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str | None: ...

    @property
    def advertised(self) -> tuple[str, int]: ...

    @property
    def stopping(self) -> bool: ...


class ProducerIdSource(Protocol):
    async def next_producer_id(self) -> int:
        """A new producer id (may write a block reservation to the metadata log)."""
        ...
