"""This node's write path to the metadata log, and its view of it (the handlers'
:class:`~hightide.services.MetadataAccess`; Kafka's ``ControllerApis`` write side with
``AutoTopicCreationManager`` and the producer id block requests).

Theory of operation. A voter (the single node, a controller) writes through its own
Raft runtime (:class:`~.metadata_runtime.RaftMetadataRuntime`): :meth:`MetadataWriter.write_metadata`
runs ``op(image) -> (response, records)`` there, in order (each op decides from an image
with every earlier write applied; writes are pipelined: see the runtime), and returns once
the records are committed and applied to the image; then :meth:`MetadataWriter.committed`
puts the change in force here (``follow``: the hosted logs and the replica roles follow
the image; the observers' metadata Fetches long-polling on ``METADATA_FETCH_KEY`` are
woken; ``on_append``, the controller service's timers, is told). A controller's Raft
shell calls :meth:`~MetadataWriter.committed` itself for entries committed from a
leader's replication.

A broker-only node has no metadata log of its own to write: ``write_metadata`` raises
CoordinatorUnavailable there, and the writes the node makes for itself go to the
controller (``remote``, :class:`~.forwarding.RemoteMetadataWrites`): its topic creations
(:meth:`~MetadataWriter.create_topics`: Metadata's auto-creation, the coordinators'
internal topics) and its producer id blocks (:meth:`~MetadataWriter.allocate_producer_ids`).
Concurrent creations of the same names share one request to the controller, awaited at
most ``OWN_WRITE_WAIT_S``; it keeps running in the background after that (a creation is
idempotent by name).

Built from: ``metadata`` and ``runtime`` (callables returning the node's
:class:`~hightide.cluster.metadata_log.MetadataLog` and its Raft runtime, both opened at
start; the runtime None on a broker-only node), ``controller`` (the controller core
computing the records), ``remote`` (a callable returning the controller-side writes of a
broker-only node, None elsewhere), ``wake`` (the node's append waiters), ``follow``
(None on a controller-only process: it hosts no logs) and ``clock``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..cluster.controller import Controller, NewTopic, TopicResult
from ..cluster.image import MetadataImage
from ..cluster.metadata_log import METADATA_TOPIC, MetadataLog
from ..cluster.records import MetadataRecord
from ..services import CoordinatorUnavailable, MetadataOp
from .forwarding import RemoteMetadataWrites
from .metadata_runtime import RaftMetadataRuntime

log = logging.getLogger("hightide.broker")

#: The observers' long-poll key of the metadata log (handlers.controller_fetch).
METADATA_FETCH_KEY = (METADATA_TOPIC, 0)
#: How long a broker-only node waits for the controller on its own topic creations before
#: answering a retriable error (see MetadataWriter.create_topics).
OWN_WRITE_WAIT_S = 5.0


class MetadataWriter:
    """The metadata image, the controller core and the commit path of this node (see the
    module doc)."""

    def __init__(self, *, metadata: Callable[[], MetadataLog | None],
                 runtime: Callable[[], RaftMetadataRuntime | None], controller: Controller,
                 remote: Callable[[], RemoteMetadataWrites | None], wake: Callable[[Hashable], None],
                 follow: Callable[[], None] | None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._metadata = metadata
        self._runtime = runtime
        self._controller = controller
        self._remote = remote
        self._wake = wake
        self._follow = follow
        self.clock = clock
        #: Told the time after each committed write (a controller's service: its timers).
        self.on_append: Callable[[int], None] | None = None
        self._own_creations: dict[tuple[str, ...], asyncio.Future[list[TopicResult]]] = {}

    @property
    def image(self) -> MetadataImage:
        metadata = self._metadata()
        assert metadata is not None
        return metadata.image

    @property
    def controller(self) -> Controller:
        return self._controller

    @property
    def metadata_committed_end(self) -> int:
        """The committed end of the metadata log (a broker-only node: of its local copy)."""
        runtime = self._runtime()
        if runtime is not None:
            return runtime.committed_offset(0)
        metadata = self._metadata()
        assert metadata is not None
        return metadata.log.log_end_offset

    async def write_metadata(self, op: MetadataOp) -> Any:
        """Run ``op(image) -> (response, records)`` on the metadata log (in order, so
        ``op`` sees every earlier change, committed or not: decide from the ``image``
        given, never from :attr:`image`), wait until its records are committed
        (fsynced by the flusher, off the loop), apply them to the image, put them in force
        (:meth:`committed`), and return the response. Raises
        :class:`~hightide.services.CoordinatorUnavailable` (KAFKA_STORAGE_ERROR) if the
        append or the fsync fails: nothing is applied then. A broker-only node has no
        metadata log of its own to write (its writes go to the controller: see
        :meth:`create_topics`, :meth:`allocate_producer_ids`): CoordinatorUnavailable."""
        runtime = self._runtime()
        if runtime is None:
            raise CoordinatorUnavailable("metadata writes go to the controller on a broker-only node")
        response, records = await runtime.write(0, op, self.clock.now_ms())
        if records:
            self.committed()
        return response

    async def commit_metadata(self, records: Iterable[MetadataRecord]) -> None:
        """Commit records computed by the caller (see :meth:`write_metadata`; prefer it when
        the records depend on the image, so concurrent writers cannot decide from the
        same image)."""
        records = list(records)
        if records:
            await self.write_metadata(lambda image: (None, records))

    def committed(self) -> None:
        """After a metadata write with records is committed and applied: the hosted logs
        and replica roles follow the image (``follow``; not on a controller-only process:
        it hosts none), the observers' metadata Fetches long-polling for it are woken, the
        controller service is told (``on_append``)."""
        if self._follow is not None:
            self._follow()
        self._wake(METADATA_FETCH_KEY)
        if self.on_append is not None:
            self.on_append(self.clock.now_ms())

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicResult]:
        """Create topics for this node's own use (auto-creation by Metadata, coordinators'
        internal topics); a topic that exists is answered TOPIC_ALREADY_EXISTS. Returns
        once the image shows them. A broker-only node asks the controller (and, with
        acknowledged consistency, returns once every unfenced broker has them). Raises
        CoordinatorUnavailable when the metadata log (or the controller) fails."""
        remote = self._remote()
        if remote is not None:
            return await self._create_through_controller(remote, topics)
        results: list[TopicResult] = await self.write_metadata(
            lambda image: self._controller.create_topics(image, topics))
        return results

    async def _create_through_controller(self, remote: RemoteMetadataWrites,
                                         topics: list[NewTopic]) -> list[TopicResult]:
        """A broker-only node's own creation, shared by concurrent callers asking for the
        same names and awaited at most OWN_WRITE_WAIT_S: without an active controller
        (an election, a lost majority) the caller gets CoordinatorUnavailable then — its
        client gets a retriable error at once, as Kafka answers while its creation goes
        on — and the creation keeps running in the background (it is idempotent by
        name: a late or repeated one answers TOPIC_ALREADY_EXISTS)."""
        key = tuple(sorted(t.name for t in topics))
        task = self._own_creations.get(key)
        if task is None:
            task = asyncio.ensure_future(remote.create_topics(topics))
            self._own_creations[key] = task
            task.add_done_callback(lambda t: self._creation_done(key, t))
        done, _ = await asyncio.wait((task,), timeout=OWN_WRITE_WAIT_S)
        if not done:
            raise CoordinatorUnavailable(f"creating {', '.join(key)}: no answer from the controller within "
                                         f"{OWN_WRITE_WAIT_S:.0f} s (it goes on in the background)")
        return task.result()

    def _creation_done(self, key: tuple[str, ...], task: asyncio.Future[list[TopicResult]]) -> None:
        if self._own_creations.get(key) is task:
            del self._own_creations[key]
        if not task.cancelled() and task.exception() is not None:
            log.debug("creating %s failed: %s", ", ".join(key), task.exception())

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """A block of producer ids for this node: (first id, end): from the controller on
        a broker-only node (AllocateProducerIds), else through this node's metadata log.
        Raises CoordinatorUnavailable (CoordinatorLoadInProgress from the controller)
        when none can be had now."""
        remote = self._remote()
        if remote is not None:
            first, count = await remote.allocate_producer_ids()
            return first, first + count
        first = await self.write_metadata(lambda image: self._controller.allocate_producer_ids(image))
        return int(first), self.image.next_producer_id
