"""What every coordinator over an internal topic (``__consumer_offsets``,
``__share_group_state``, ``__transaction_state``) needs of its node besides
:mod:`.runtime`, all from its :class:`~.env.CoordinatorEnv`:

* :func:`ensure_internal_topic` creates the topic on first use, as Kafka does
  (``env.create_topics``; the image read through ``env.image``);
* :func:`runtime_for` builds the :class:`~.runtime.CoordinatorRuntime` of a topic over
  ``env.logs``, ``env.durable``, ``env.wake`` and ``env.replicated``.

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
    from .env import CoordinatorEnv

__all__ = ["CoordinatorLoadInProgress", "CoordinatorUnavailable", "ensure_internal_topic", "runtime_for"]

log = logging.getLogger("hightide.coordinator")
S = TypeVar("S")


async def ensure_internal_topic(env: CoordinatorEnv, name: str, partitions: int, configs: dict[str, str]) -> int:
    """Create ``name`` if missing (the metadata commit is durable before this returns);
    return its partition count (fixed once created). Raises CoordinatorUnavailable if
    the controller refuses."""
    if name not in env.image().topics:
        try:  # through the controller on a broker-only node (env.create_topics)
            results = await env.create_topics([NewTopic(name, partitions, configs=configs)])  # RF: the controller's
        except CoordinatorUnavailable as exc:  # the metadata log failed: nothing was created
            raise CoordinatorUnavailable(f"cannot create {name}: {exc}") from exc
        result = results[0]
        if result.error_code == ErrorCode.none:
            log.info("created %s with %d partitions", name, partitions)
        elif result.error_code != ErrorCode.topic_already_exists:
            raise CoordinatorUnavailable(f"cannot create {name}: {result.message}")
    topic = env.image().topics.get(name)
    if topic is None:
        raise CoordinatorUnavailable(f"cannot create {name}: not in the metadata image yet")
    return len(topic.partitions)


def runtime_for(env: CoordinatorEnv, adapter: ShardAdapter[S]) -> CoordinatorRuntime[S]:
    """A runtime over the node's logs of ``adapter.topic``."""
    topic = adapter.topic
    return CoordinatorRuntime(adapter, lambda p: env.partition_log(topic, p), env.durable,
                              lambda p: env.wake((topic, p)), _replication(env, topic), clock=env.clock)


def _replication(env: CoordinatorEnv, topic: str) -> Callable[[int, int], asyncio.Future[ErrorCode]]:
    """The runtime's wait for a write's records to reach the high watermark:
    ``env.replicated`` (the replica manager's; resolved at once for a partition without
    followers), or done at once where there is none."""
    replicated = env.replicated

    def wait(partition: int, end: int) -> asyncio.Future[ErrorCode]:
        if replicated is not None:
            return replicated(topic, partition, end)
        done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        done.set_result(ErrorCode.none)
        return done
    return wait
