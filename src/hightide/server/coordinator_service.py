"""The service shell shared by the coordinators over an internal topic: the group
coordinator (:class:`~.group_runtime.GroupRuntime` over ``__consumer_offsets``) and the
share coordinator (:class:`~.share_runtime.ShareStateRuntime` over ``__share_group_state``).

Both run on one :class:`~.coordinator_runtime.CoordinatorRuntime` and live alike:

* :meth:`CoordinatorService.start`: if the topic exists, load every partition *held*
  (answering COORDINATOR_LOAD_IN_PROGRESS) and start the placement step;
* the placement step (:meth:`CoordinatorService._place`): once every partition is loaded,
  :meth:`CoordinatorService.move_misplaced` moves what an older hightide stored in the
  wrong partition (the subclass states Kafka's placement rule and how its records move);
  then the partitions are served, except those whose move failed (they stay LOADING and
  a restart retries the move);
* :meth:`CoordinatorService.ensure_topic`: create the topic on first use with the
  subclass's :meth:`~CoordinatorService.topic_configs` and load its (empty) partitions;
* :meth:`CoordinatorService.wait_loaded` and :meth:`CoordinatorService.close`.

:class:`AdapterDefaults` holds what the two :class:`~.coordinator_runtime.ShardAdapter` s
do alike (results carry ``records``; ``apply`` replays; nothing parked by default).
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .coordinator_log import ensure_internal_topic, runtime_for
from .coordinator_runtime import ShardAdapter

if TYPE_CHECKING:
    from .broker import Broker

S = TypeVar("S")  # a shard
R = TypeVar("R")  # a shard call's result
K = TypeVar("K")  # what a request is routed by (a group id, a share partition's key)


def now_ms() -> int:
    """Wall-clock time in milliseconds (what the coordinators pass as ``now_ms``)."""
    return int(time.time() * 1000)


def returning(result: R) -> Callable[[object], R]:
    """An operation that returns ``result`` whatever the shard (records decided beforehand)."""
    return lambda shard: result


class AdapterDefaults(Generic[S]):
    """What the coordinators' shard adapters share: pipelined writes, results whose
    ``records`` attribute is the list to append, and ``apply`` = ``replay`` with nothing
    parked. A subclass states ``topic``, ``storage_error_code``, ``new_shard``,
    ``load_record``, ``loaded``, ``encode`` and ``replay`` (and overrides the rest when
    it differs)."""

    pipelined = True

    def records(self, result: Any) -> list[Any]:
        return result.records

    def replay(self, shard: S, partition: int, result: Any, offsets: list[int]) -> None:
        raise NotImplementedError

    def apply(self, shard: S, partition: int, result: Any, offsets: list[int]) -> None:
        """Replay the committed result into the committed shard."""
        self.replay(shard, partition, result, offsets)

    def abandon(self, partition: int, shards: Sequence[S], results: Sequence[Any]) -> None:
        """Nothing is parked in these shards."""


class CoordinatorService(abc.ABC, Generic[S, K]):
    """A coordinator over the internal topic ``topic``: the runtime (``self.runtime``), its
    partition count (``self.num_partitions``, the configured default until the topic
    exists), start-up placement, topic creation, and routing a request by its key to
    the partition's shard. A subclass states ``topic``, ``place_task`` (the placement
    task's name), :meth:`topic_configs`, :meth:`partition_for` (Kafka's placement rule)
    and :meth:`move_misplaced`."""

    topic: str
    place_task: str

    def __init__(self, broker: Broker, adapter: ShardAdapter[S], num_partitions: int) -> None:
        self.broker = broker
        self.num_partitions = num_partitions
        self.runtime = runtime_for(broker, adapter)
        self._creating: asyncio.Future | None = None
        self._placing: asyncio.Task | None = None  # start-up: moving misplaced records (then serving)

    @abc.abstractmethod
    def topic_configs(self) -> dict[str, str]:
        """The configs the topic is created with."""

    @abc.abstractmethod
    def partition_for(self, key: K) -> int:
        """The partition ``key`` belongs in (Kafka's placement over ``num_partitions``)."""

    @abc.abstractmethod
    async def move_misplaced(self, now_ms: int) -> set[int]:
        """Move what is stored in a partition other than Kafka's placement to its home
        partition (through the write path, ``internal=True``: the partitions are held).
        Returns the partitions involved in a move that failed (logged)."""

    # -- loading ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start loading the shards if the topic exists (it is created on first use); the
        partitions are served once loaded and misplaced records moved (see :meth:`_place`)."""
        topic = self.broker.image.topics.get(self.topic)
        if topic is not None:
            self.num_partitions = len(topic.partitions)
            self.runtime.load(range(self.num_partitions), hold=True)
            self._placing = asyncio.get_running_loop().create_task(self._place(), name=self.place_task)

    async def _place(self) -> None:
        """Once every partition is loaded: :meth:`move_misplaced`, then serve. A partition
        whose move failed stays LOADING (a restart retries the move) rather than answer
        without the moved state."""
        await self.runtime.wait_loaded()
        failed: set[int] = set()
        try:
            failed = await self.move_misplaced(now_ms())
        finally:
            self.runtime.release(exclude=failed)

    async def write_durable(self, partition: int, result: Any, now_ms: int) -> None:
        """Append ``result`` (records decided beforehand) to ``partition`` as an internal
        write, then wait until the partition's log is fsynced, whatever the flush policy.
        Raises CoordinatorUnavailable or OSError."""
        await self.runtime.write(partition, returning(result), now_ms, internal=True)
        plog = self.broker.partition_log(self.topic, partition)
        if plog is not None:
            await self.broker.flusher.durable(plog)

    # -- routing ----------------------------------------------------------------------------
    def shard_for(self, key: K) -> S:
        """The shard of ``key`` for reads: committed state only. Before the topic exists
        nothing was ever written: an empty shard. Raises CoordinatorLoadInProgress /
        CoordinatorUnavailable."""
        if not self.runtime.partitions:
            return self.runtime.adapter.new_shard(-1)
        return self.runtime.shard(self.partition_for(key))

    async def execute(self, key: K, fn: Callable[[S], Any], now_ms: int) -> Any:
        """Run ``fn`` on the shard of ``key`` (creating the topic on first use); append its
        records, wait until they are committed, apply them (replay, live state,
        completions); return the result's ``response``. Raises
        :class:`~.coordinator_runtime.CoordinatorUnavailable` (carrying the error code to
        answer) if the partition is loading or the append or its fsync fails: nothing is
        applied then."""
        if not self.runtime.partitions:
            await self.ensure_topic()
        result = await self.runtime.write(self.partition_for(key), fn, now_ms)
        return result.response

    # -- topic creation ---------------------------------------------------------------------
    async def ensure_topic(self) -> None:
        """Create the topic if needed and load its (new, empty) partitions. Raises
        CoordinatorUnavailable if it cannot be created."""
        if self.runtime.partitions:
            return
        if self._creating is None:
            self._creating = asyncio.ensure_future(self._create())
        try:
            await asyncio.shield(self._creating)
        finally:
            if self._creating is not None and self._creating.done():
                self._creating = None

    async def _create(self) -> None:
        existed = self.topic in self.broker.image.topics
        n = await ensure_internal_topic(self.broker, self.topic, self.num_partitions, self.topic_configs())
        if not self.runtime.partitions:
            self.num_partitions = n
            self.runtime.load(range(n), now=not existed)

    async def wait_loaded(self) -> None:
        """Until every partition is loaded and misplaced records are moved (served)."""
        await self.runtime.wait_loaded()
        if self._placing is not None and not self._placing.done():
            await asyncio.wait([self._placing])

    def close(self) -> None:
        """Shutting down: the placement step and loads stop."""
        if self._placing is not None and not self._placing.done():
            self._placing.cancel()
        self.runtime.close()
