"""The service shell shared by the coordinators over an internal topic: the group
coordinator (:class:`~.groups.GroupRuntime` over ``__consumer_offsets``) and the
share coordinator (:class:`~.share_state.ShareStateRuntime` over ``__share_group_state``).

Both (and the transaction coordinator) run on one :class:`~.runtime.CoordinatorRuntime`,
are built from a :class:`~.env.CoordinatorEnv` (the image, partition logs, the flusher's
durability wait, topic creation, leadership: never the broker) and live alike:

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

In cluster mode (a broker-only process) a broker serves only the partitions of the topic
it leads: :meth:`CoordinatorService.follow_leadership` (called at start and after every
metadata change) loads the partitions it gained (COORDINATOR_LOAD_IN_PROGRESS meanwhile)
and unloads those it lost; a request for a partition led elsewhere answers
NOT_COORDINATOR (FindCoordinator names the leader). A broker that has not caught up with
the controller's log yet (``env.acting()`` is False: a restart's local copy may be stale)
loads nothing and answers NOT_COORDINATOR to every request. No placement step there: that
moves records an older single-node hightide stored in the wrong partition.

:class:`AdapterDefaults` holds what the two :class:`~.runtime.ShardAdapter` s
do alike (results carry ``records``; ``apply`` replays; nothing parked by default).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..protocol.errors import ErrorCode
from .internal_topic import CoordinatorUnavailable, ensure_internal_topic, runtime_for
from .runtime import ShardAdapter

if TYPE_CHECKING:
    from ..cluster.image import MetadataImage
    from .env import CoordinatorEnv

log = logging.getLogger("hightide.coordinator")

S = TypeVar("S")  # a shard
R = TypeVar("R")  # a shard call's result
K = TypeVar("K")  # what a request is routed by (a group id, a share partition's key)


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

    def __init__(self, env: CoordinatorEnv, adapter: ShardAdapter[S], num_partitions: int) -> None:
        self.env = env
        self.num_partitions = num_partitions
        self.runtime = runtime_for(env, adapter)
        self._creating: asyncio.Future | None = None
        self._placing: asyncio.Task | None = None  # start-up: moving misplaced records (then serving)
        #: A broker-only process: partitions are served where they are led (follow_leadership).
        self._cluster = env.cluster

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
        partitions are served once loaded and misplaced records moved (see :meth:`_place`).
        Cluster mode: load the partitions led here (:meth:`follow_leadership`)."""
        if self._cluster:
            self.follow_leadership(self.env.image())
            return
        topic = self.env.image().topics.get(self.topic)
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
            failed = await self.move_misplaced(self.env.clock.now_ms())
        finally:
            self.runtime.release(exclude=failed)

    # -- cluster mode: leadership -----------------------------------------------------------
    def follow_leadership(self, image: MetadataImage, topics: Collection[str] | None = None) -> None:
        """Cluster mode: load the partitions of the topic whose leader in ``image`` is this
        node and are not loaded yet (they answer COORDINATOR_LOAD_IN_PROGRESS until
        replayed), unload the loaded ones led elsewhere or by nobody (their pending
        writes and parked requests answer NOT_COORDINATOR); nothing is led here before
        the broker caught up with the controller. Does nothing on the single node, which
        leads every partition. ``topics``: only these topics changed since the last call
        (see :meth:`MetadataImage.take_changes`): nothing to do unless the coordinator's
        topic is among them; None: look."""
        if not self._cluster or (topics is not None and self.topic not in topics):
            return
        topic = image.topics.get(self.topic)
        node = self.env.node_id
        led = set() if topic is None or not self._acting() else {
            p for p, pi in topic.partitions.items() if pi.leader == node}
        if topic is not None:
            self.num_partitions = len(topic.partitions)
        for p in sorted(set(self.runtime.partitions) - led):
            self.runtime.unload(p, "is no longer led by this broker")
            log.info("unloaded coordinator %s-%d: its leadership moved away", self.topic, p)
        gained = sorted(led - set(self.runtime.partitions))
        if gained:
            log.info("loading coordinator partitions %s of %s led here", gained, self.topic)
            self.runtime.load(gained)

    def _acting(self) -> bool:
        """False while a broker-only node has not caught up with the controller's log (its
        image may be stale: nothing is served from it)."""
        return self.env.acting()

    def led_elsewhere(self, key: K) -> bool:
        """Cluster mode: True if ``key``'s partition is not served by this broker (another
        broker, or nobody, leads it). Always False on the single node."""
        return self._cluster and self.partition_for(key) not in self.runtime.partitions

    def _check_led_here(self, partition: int) -> None:
        """Cluster mode: raise NOT_COORDINATOR if ``partition`` is not served here."""
        if self._cluster and partition not in self.runtime.partitions:
            raise CoordinatorUnavailable(f"{self.topic}-{partition} is not led by this broker",
                                         ErrorCode.not_coordinator)

    def _topic_missing(self) -> bool:
        """True while the topic was never created (single node: nothing loaded yet). Never
        on a broker-only node that has not caught up (its image may lack the topic: its
        requests answer NOT_COORDINATOR, never an empty state)."""
        if self._cluster:
            return self.topic not in self.env.image().topics and self._acting()
        return not self.runtime.partitions

    async def write_durable(self, partition: int, result: Any, now_ms: int) -> None:
        """Append ``result`` (records decided beforehand) to ``partition`` as an internal
        write, then wait until the partition's log is fsynced, whatever the flush policy.
        Raises CoordinatorUnavailable or OSError."""
        await self.runtime.write(partition, returning(result), now_ms, internal=True)
        plog = self.env.partition_log(self.topic, partition)
        if plog is not None:
            await self.env.durable(plog)

    # -- routing ----------------------------------------------------------------------------
    def shard_for(self, key: K) -> S:
        """The shard of ``key`` for reads: committed state only. Before the topic exists
        nothing was ever written: an empty shard. Raises CoordinatorLoadInProgress /
        CoordinatorUnavailable (NOT_COORDINATOR in cluster mode if another broker leads it)."""
        if self._topic_missing():
            return self.runtime.adapter.new_shard(-1)
        partition = self.partition_for(key)
        self._check_led_here(partition)
        return self.runtime.shard(partition)

    async def execute(self, key: K, fn: Callable[[S], Any], now_ms: int) -> Any:
        """Run ``fn`` on the shard of ``key`` (creating the topic on first use); append its
        records, wait until they are committed, apply them (replay, live state,
        completions); return the result's ``response``. Raises
        :class:`~.runtime.CoordinatorUnavailable` (carrying the error code to
        answer) if the partition is loading or the append or its fsync fails: nothing is
        applied then."""
        if self._topic_missing():
            await self.ensure_topic()
        partition = self.partition_for(key)
        self._check_led_here(partition)
        result = await self.runtime.write(partition, fn, now_ms)
        return result.response

    # -- topic creation ---------------------------------------------------------------------
    async def ensure_topic(self) -> None:
        """Create the topic if needed and load its (new, empty) partitions. Raises
        CoordinatorUnavailable if it cannot be created."""
        if not self._topic_missing():
            return
        if self._creating is None:
            self._creating = asyncio.ensure_future(self._create())
        try:
            await asyncio.shield(self._creating)
        finally:
            if self._creating is not None and self._creating.done():
                self._creating = None

    async def _create(self) -> None:
        existed = self.topic in self.env.image().topics
        n = await ensure_internal_topic(self.env, self.topic, self.num_partitions, self.topic_configs())
        if self._cluster:
            self.follow_leadership(self.env.image())
        elif not self.runtime.partitions:
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
