"""What every coordinator over an internal topic (``__consumer_offsets``,
``__share_group_state``) needs from the broker besides :mod:`.coordinator_runtime`:

* :func:`ensure_internal_topic` creates the topic on first use, as Kafka does;
* :func:`runtime_for` builds the :class:`~.coordinator_runtime.CoordinatorRuntime` of a
  topic over the broker's partition logs and flusher.

:class:`CoordinatorUnavailable` and :class:`CoordinatorLoadInProgress` are re-exported
for the handlers (they carry the error code to answer with).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

from ..cluster.controller import NewTopic, TopicResult
from .coordinator_runtime import CoordinatorLoadInProgress, CoordinatorRuntime, CoordinatorUnavailable, ShardAdapter

if TYPE_CHECKING:
    from ..cluster.image import MetadataImage
    from ..cluster.records import MetadataRecord
    from .broker import Broker

__all__ = ["CoordinatorLoadInProgress", "CoordinatorUnavailable", "ensure_internal_topic", "runtime_for"]

log = logging.getLogger("hightide.coordinator")
S = TypeVar("S")


async def ensure_internal_topic(broker: Broker, name: str, partitions: int, configs: dict[str, str]) -> int:
    """Create ``name`` if missing (the metadata commit is durable before this returns);
    return its partition count (fixed once created). Raises CoordinatorUnavailable if
    the controller refuses."""
    def create(image: MetadataImage) -> tuple[TopicResult | None, list[MetadataRecord]]:
        if name in image.topics:
            return None, []
        results, records = broker.controller.create_topics(image, [NewTopic(name, partitions, 1, configs=configs)])
        return results[0], records

    try:
        result = await broker.write_metadata(create)
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing was created
        raise CoordinatorUnavailable(f"cannot create {name}: {exc}") from exc
    if result is not None:
        if result.error_code:
            raise CoordinatorUnavailable(f"cannot create {name}: {result.message}")
        log.info("created %s with %d partitions", name, partitions)
    return len(broker.image.topics[name].partitions)


def runtime_for(broker: Broker, adapter: ShardAdapter[S]) -> CoordinatorRuntime[S]:
    """A runtime over the broker's logs of ``adapter.topic``."""
    topic = adapter.topic
    return CoordinatorRuntime(adapter, lambda p: broker.partition_log(topic, p), broker.flusher.durable,
                              lambda p: broker.waiters.wake((topic, p)))
