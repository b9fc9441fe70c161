"""What every coordinator over an internal topic (``__consumer_offsets``,
``__share_group_state``) needs from the broker besides :mod:`.runtime`:

* :func:`ensure_internal_topic` creates the topic on first use, as Kafka does;
* :func:`runtime_for` builds the :class:`~.runtime.CoordinatorRuntime` of a
  topic over the broker's partition logs, flusher and replica manager.

:class:`CoordinatorUnavailable` and :class:`CoordinatorLoadInProgress` are re-exported
for the handlers (they carry the error code to answer with).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..cluster.controller import NewTopic
from ..protocol.errors import ErrorCode
from .runtime import CoordinatorLoadInProgress, CoordinatorRuntime, CoordinatorUnavailable, ShardAdapter

if TYPE_CHECKING:
    from ..server.broker import Broker

__all__ = ["CoordinatorLoadInProgress", "CoordinatorUnavailable", "ensure_internal_topic", "runtime_for"]

log = logging.getLogger("hightide.coordinator")
S = TypeVar("S")


async def ensure_internal_topic(broker: Broker, name: str, partitions: int, configs: dict[str, str]) -> int:
    """Create ``name`` if missing (the metadata commit is durable before this returns);
    return its partition count (fixed once created). Raises CoordinatorUnavailable if
    the controller refuses."""
    if name not in broker.image.topics:
        try:  # through the controller on a broker-only node (Broker.create_topics)
            results = await broker.create_topics([NewTopic(name, partitions, configs=configs)])  # RF: the controller's
        except CoordinatorUnavailable as exc:  # the metadata log failed: nothing was created
            raise CoordinatorUnavailable(f"cannot create {name}: {exc}") from exc
        result = results[0]
        if result.error_code == ErrorCode.none:
            log.info("created %s with %d partitions", name, partitions)
        elif result.error_code != ErrorCode.topic_already_exists:
            raise CoordinatorUnavailable(f"cannot create {name}: {result.message}")
    topic = broker.image.topics.get(name)
    if topic is None:
        raise CoordinatorUnavailable(f"cannot create {name}: not in the metadata image yet")
    return len(topic.partitions)


def runtime_for(broker: Broker, adapter: ShardAdapter[S]) -> CoordinatorRuntime[S]:
    """A runtime over the broker's logs of ``adapter.topic``."""
    topic = adapter.topic
    return CoordinatorRuntime(adapter, lambda p: broker.partition_log(topic, p), broker.flusher.durable,
                              lambda p: broker.waiters.wake((topic, p)), _replication(broker, topic))


def _replication(broker: Broker, topic: str) -> Callable[[int, int], asyncio.Future[ErrorCode]]:
    """The runtime's wait for a write's records to reach the high watermark: the broker's
    replica manager (created after the coordinators, so looked up at each write; resolved
    at once for a partition without followers), or done at once where there is none."""
    def wait(partition: int, end: int) -> asyncio.Future[ErrorCode]:
        manager = getattr(broker, "replica_manager", None)
        if manager is not None:
            fut: asyncio.Future[ErrorCode] = manager.wait_replicated(topic, partition, end)
            return fut
        done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        done.set_result(ErrorCode.none)
        return done
    return wait
