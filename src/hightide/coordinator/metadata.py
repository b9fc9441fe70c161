"""The metadata log on the coordinator runtime (a lone voter: ``hightide serve``, a
single controller): one partition (``__cluster_metadata-0``) whose "shard" is the
:class:`~hightide.cluster.image.MetadataImage`.

Built from the opened (already replayed) :class:`~hightide.cluster.metadata_log.MetadataLog`
and the flusher's ``durable(plog)`` wait; nothing else of the broker.

A metadata write is an operation ``op(image) -> (response, records)`` (for instance a
controller call such as ``Controller.create_topics``): it runs after every earlier write is applied,
against the current image, its records are appended as one batch, the answer waits until
the flusher has fsynced them (the metadata log flushes every message; the fsync runs on
the flusher's worker thread, never on the event loop), and only then are they applied to
the image. The adapter is *serial* (the image is the one view the broker reads): the next
write runs only after that. Two concurrent writes therefore never decide from the same
image (no double creation of a topic), and no handler ever reads metadata a crash could
take back.

The image itself is replayed synchronously at start-up by
:class:`~hightide.cluster.metadata_log.MetadataLog`, before the broker serves. With a
controller quorum (more than one voter) the writes go through Raft instead
(``RaftMetadataRuntime`` of the Raft shell, same ``write``/``committed_offset`` surface).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..aio import halt as _halt_module
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..cluster.image import MetadataImage
from ..cluster.metadata_log import METADATA_TOPIC, MetadataLog
from ..cluster.records import MetadataRecord
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from .runtime import CoordinatorRuntime


class MetadataAdapter:
    """:class:`~.coordinator_runtime.ShardAdapter` of the metadata log."""

    topic = METADATA_TOPIC
    storage_error_code = ErrorCode.kafka_storage_error
    pipelined = False  # one view: the image the broker reads (see the runtime's doc)

    def __init__(self, metadata: MetadataLog) -> None:
        self.metadata = metadata

    def new_shard(self, partition: int) -> MetadataImage:
        return self.metadata.image

    def load_record(self, shards: Sequence[MetadataImage], partition: int, offset: int, key: bytes | None,
                    value: bytes | None) -> bool:
        raise AssertionError("the metadata image is loaded by MetadataLog")  # never called: add_loaded

    def loaded(self, shards: Sequence[MetadataImage], partition: int, count: int) -> None:
        pass

    def records(self, result: tuple[Any, Sequence[MetadataRecord]]) -> list[MetadataRecord]:
        return list(result[1])

    def encode(self, records: list[MetadataRecord]) -> list[tuple[bytes | None, bytes | None]]:
        return list(MetadataLog.encode_records(records))

    def replay(self, shard: MetadataImage, partition: int, result: tuple[Any, Sequence[MetadataRecord]],
               offsets: list[int]) -> None:
        self.metadata.apply(list(result[1]), offsets)

    def apply(self, shard: MetadataImage, partition: int, result: tuple[Any, Sequence[MetadataRecord]],
              offsets: list[int]) -> None:
        self.replay(shard, partition, result, offsets)

    def abandon(self, partition: int, shards: Sequence[MetadataImage], results: Sequence[Any]) -> None:
        """Never called: a serial adapter has no working view to unload."""


def metadata_runtime(metadata: MetadataLog, durable: Callable[[PartitionLog], Awaitable[object]],
                     clock: Clock = SYSTEM_CLOCK, *,
                     halt: Callable[[str], None] | None = None) -> CoordinatorRuntime[MetadataImage]:
    """The runtime of an opened (already replayed) metadata log; ``durable(plog)`` resolves
    once everything appended to ``plog`` is fsynced (the flusher's); ``clock``: the node's.

    A failed append or fsync of the metadata log ends the process (``halt``, default
    :func:`~hightide.aio.halt.halt_process`, exit code 1) before the write is answered,
    as Kafka's controller does (its Raft IO thread's fatal fault handler): the node never
    serves, nor shuts down cleanly over, a metadata log it could not make durable. The
    next start recovers the log from disk (a record that reached the page cache may then
    be there: its client saw a lost connection, an unknown outcome, as with Kafka)."""
    runtime = CoordinatorRuntime(MetadataAdapter(metadata), lambda p: metadata.log, durable, clock=clock,
                                 on_log_failure=halt if halt is not None else _halt)
    runtime.add_loaded(0, metadata.image, metadata.log.log_end_offset)
    return runtime


def _halt(reason: str) -> None:
    """:func:`~hightide.aio.halt.halt_process`, looked up when called (tests replace it)."""
    _halt_module.halt_process(f"the metadata log cannot be written: {reason}")
