"""What the coordinators are built from: :class:`CoordinatorEnv`, the few things of the
node they run on, each named by what it does (never the broker object), and
:class:`PeerClients`, the connections to other brokers some of them send RPCs over.

The broker builds one :class:`CoordinatorEnv` and hands it to every coordinator (and
to the share groups' shell); a test builds one from a real partition log and fakes of
the rest. Every field is a value, a narrow interface or a callable read when needed
(``image()`` is the image current *now*: do not keep it across an await).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..aio.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from ..cluster.controller import NewTopic, TopicResult
    from ..cluster.image import MetadataImage
    from ..config import BrokerConfig
    from ..log.partition_log import PartitionLog
    from ..protocol.errors import ErrorCode


def _true() -> bool:
    return True


def _false() -> bool:
    return False


@dataclass(frozen=True)
class CoordinatorEnv:
    """The node a coordinator runs on, narrowly:

    * ``config``: the broker's configs (the coordinators' settings, read when used);
    * ``node_id``: this node's id (what a partition's leader is compared with);
    * ``image()``: the current metadata image;
    * ``partition_log(topic, partition)``: the open log of a partition, or None;
    * ``durable(plog)``: resolved once everything appended to ``plog`` is fsynced (the
      flusher's; raises OSError if the fsync failed);
    * ``wake(key)``: wake the long-polls waiting on ``key`` (``AppendWaiters.wake``: a
      ``(topic, partition)`` after an append, or a share partition's key);
    * ``create_topics(topics)``: the node's own topic creations (internal topics),
      through the controller on a broker-only node; raises CoordinatorUnavailable;
    * ``cluster``: True on a broker-only process (cluster mode: a coordinator serves the
      partitions of its topic led here); False on the single node, which leads all;
    * ``acting()``: False while a broker-only node has not caught up with the
      controller's log (nothing is led or coordinated from a stale image);
    * ``stopping()``: True once the node is shutting down;
    * ``replicated(topic, partition, end)``: cluster mode, a future resolved with an
      ErrorCode once the partition's high watermark reaches ``end`` (the replica
      manager's ``wait_replicated``); None: nothing is replicated (resolved at once);
    * ``clock``: the node's :class:`~hightide.aio.clock.Clock` (every ``now_ms`` a
      coordinator hands its core, its timers and retry backoffs).
    """

    config: BrokerConfig
    node_id: int
    image: Callable[[], MetadataImage]
    partition_log: Callable[[str, int], PartitionLog | None]
    durable: Callable[[PartitionLog], Awaitable[Any]]
    wake: Callable[[Hashable], None]
    create_topics: Callable[[list[NewTopic]], Awaitable[list[TopicResult]]]
    cluster: bool = False
    acting: Callable[[], bool] = _true
    stopping: Callable[[], bool] = _false
    replicated: Callable[[str, int, int], asyncio.Future[ErrorCode]] | None = None
    clock: Clock = SYSTEM_CLOCK


class PeerClients(Protocol):
    """Connections to other brokers on the inter-broker listener, keyed by broker id (the
    broker's ``InterBrokerClients``)."""

    def address(self, node_id: int) -> tuple[str, int] | None:
        """(host, port) of ``node_id``'s inter-broker endpoint, or None when it is not
        registered, fenced, or lacks that listener."""
        ...

    async def request(self, node_id: int, host: str, port: int, api_key: int, version: int, body: Any) -> Any:
        """One request to broker ``node_id``: the decoded response. Raises KafkaError or
        OSError."""
        ...

    async def close(self) -> None:
        """Close every connection."""
        ...


class NoPeers:
    """:class:`PeerClients` with no other broker (the single node, tests): every broker is
    unreachable."""

    def address(self, node_id: int) -> tuple[str, int] | None:
        return None

    async def request(self, node_id: int, host: str, port: int, api_key: int, version: int, body: Any) -> Any:
        raise OSError(f"broker {node_id} is not reachable from here")

    async def close(self) -> None:
        pass
