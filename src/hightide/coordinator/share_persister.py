"""The share coordinator wherever it is: the :class:`~hightide.share.types.SharePersister`
the share-partition side uses (``broker.share_persister``).

A share partition's state lives in the ``__share_group_state`` partition its key
(``group:topicId:partition``) hashes to, served by that partition's leader. On the single
node, and in cluster mode when this node leads that partition (or the topic does not
exist yet: the local coordinator creates it through the controller), the call goes to the
local share coordinator (``broker.share_state``). Otherwise it is sent to the leader as
Kafka's inter-broker share-state RPC (InitializeShareGroupState, ReadShareGroupState,
WriteShareGroupState v1, DeleteShareGroupState, ReadShareGroupStateSummary v1) over one
connection per broker, on this broker's first listener. The leader answers
NOT_COORDINATOR if it lost the partition meanwhile; a broker that cannot be reached
answers COORDINATOR_NOT_AVAILABLE. Such answers — NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a dropped connection
(NETWORK_EXCEPTION) or a timeout — mean the share coordinator is moving (its partition's
leader died or changed): each call is tried again, routed afresh from the metadata image,
with backoff (0.1 s doubling to 1 s) for up to ``REQUEST_TIMEOUT_S``, as Kafka's
``PersisterStateManager`` retries them, so a coordinator failover delays an
acknowledgement instead of failing it. Re-sending a write whose outcome is unknown is
safe: it carries the whole window and the coordinator merges per offset, keeping the
greatest (delivery count, state). Other errors, or one that outlasts the bound, reach the
caller, which handles them as a local failure (the share partition re-reads its state).

Built from the node's :class:`~.env.CoordinatorEnv` (cluster mode, image, node id), the
local share coordinator and :class:`~.env.PeerClients`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..client.errors import KafkaError
from ..protocol.errors import ErrorCode
from ..share.records import STATE_TOPIC, coordinator_key, partition_for
from ..share.types import ShareState, ShareStateKey, StateBatch
from .internal_topic import CoordinatorUnavailable

if TYPE_CHECKING:
    from .env import CoordinatorEnv, PeerClients
    from .share_state import ShareStateRuntime

log = logging.getLogger("hightide.share")

REQUEST_TIMEOUT_S = 10.0
RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S = 0.1, 1.0
#: answers that mean "the share coordinator is moving: ask again" (see the module doc)
RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress, ErrorCode.network_exception,
                       ErrorCode.request_timed_out})
T = TypeVar("T")
#: one partition's fields of a share-state RPC, or a function building them (only when
#: the call goes to another broker)
Partition = dict[str, Any] | Callable[[], dict[str, Any]]


async def retrying(attempt: Callable[[], Awaitable[T]], code_of: Callable[[T], int],
                   timeout_s: float = REQUEST_TIMEOUT_S, clock: Clock = SYSTEM_CLOCK) -> T:
    """Await ``attempt()`` until its result's code is not in :data:`RETRIABLE` or the
    next try would start after ``timeout_s`` (on ``clock``); returns the last result (its
    code may be retriable then). Backoff 0.1 s doubling to 1 s between tries."""
    deadline = clock.monotonic() + timeout_s
    backoff = RETRY_BACKOFF_S
    while True:
        result = await attempt()
        if code_of(result) not in RETRIABLE or clock.monotonic() + backoff > deadline:
            return result
        await clock.sleep(backoff)
        backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)


class SharePersisterClient:
    """SharePersister routing each call to the leader of its ``__share_group_state``
    partition (see the module doc). Built from the node's :class:`~.env.CoordinatorEnv`
    (cluster mode or not, the image, the node id), the ``local`` share coordinator, and
    ``peers``, the connections to the other brokers (requests bounded by
    ``REQUEST_TIMEOUT_S``)."""

    def __init__(self, env: CoordinatorEnv, local: ShareStateRuntime, peers: PeerClients) -> None:
        self.env = env
        self.local = local
        self._peers = peers

    # -- routing ----------------------------------------------------------------------------
    async def _leader_address(self, key: ShareStateKey) -> tuple[int, str, int] | None:
        """None when the local share coordinator answers ``key``; else (leader id, host,
        port) of the broker leading its partition (the topic is created through the
        controller first if it does not exist yet). Raises KafkaError
        (COORDINATOR_NOT_AVAILABLE) when the partition has no alive leader or the topic
        cannot be created."""
        if not self.env.cluster:
            return None
        if STATE_TOPIC not in self.env.image().topics:
            try:
                await self.local.ensure_topic()
            except CoordinatorUnavailable as exc:
                raise KafkaError(exc.error_code, str(exc)) from exc
        topic = self.env.image().topics.get(STATE_TOPIC)
        if topic is None:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{STATE_TOPIC} does not exist yet")
        p = topic.partitions.get(partition_for(coordinator_key(key.group_id, key.topic_id, key.partition),
                                               len(topic.partitions)))
        if p is None or p.leader == self.env.node_id:
            return None
        ep = self._peers.address(p.leader)
        if ep is None:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"the share coordinator of {key} (broker {p.leader}) is not available")
        return p.leader, ep[0], ep[1]

    async def _call(self, addr: tuple[int, str, int], key: ShareStateKey, api_key: int, version: int,
                    partition: Partition) -> Any:
        """Send one share-state RPC for ``key`` to the broker at ``addr`` and return its one
        partition result. Raises KafkaError or OSError (a broken connection is dropped)."""
        node, host, port = addr
        fields = partition() if callable(partition) else partition
        body = {"group_id": key.group_id, "topics": [
            {"topic_id": key.topic_id, "partitions": [{"partition": key.partition, **fields}]}]}
        resp = await self._peers.request(node, host, port, api_key, version, body)
        return resp.results[0].partitions[0]

    async def _code(self, key: ShareStateKey, api_key: int, version: int, partition: Partition) -> int | None:
        """The error code of the RPC at the leader, or None when the local coordinator answers."""
        try:
            addr = await self._leader_address(key)
            if addr is None:
                return None
            return int((await self._call(addr, key, api_key, version, partition)).error_code)
        except (KafkaError, OSError) as exc:
            log.warning("share state call %d for %s failed: %s", api_key, key, exc)
            return int(exc.error_code if isinstance(exc, KafkaError) else ErrorCode.coordinator_not_available)

    async def _state(self, key: ShareStateKey, api_key: int, version: int,
                     partition: dict[str, Any]) -> ShareState | None:
        """The state the leader answers, or None when the local coordinator answers."""
        try:
            addr = await self._leader_address(key)
            if addr is None:
                return None
            r = await self._call(addr, key, api_key, version, partition)
        except (KafkaError, OSError) as exc:
            log.warning("share state call %d for %s failed: %s", api_key, key, exc)
            code = exc.error_code if isinstance(exc, KafkaError) else ErrorCode.coordinator_not_available
            return ShareState(error_code=int(code), error_message=str(exc))
        batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in getattr(r, "state_batches", ()))
        return ShareState(error_code=int(r.error_code), error_message=r.error_message, state_epoch=r.state_epoch,
                          leader_epoch=getattr(r, "leader_epoch", -1), start_offset=r.start_offset,
                          delivery_complete_count=getattr(r, "delivery_complete_count", -1), state_batches=batches)

    # -- SharePersister -----------------------------------------------------------------------
    async def _code_or_local(self, key: ShareStateKey, api_key: int, version: int, partition: Partition,
                             local: Callable[[], Awaitable[int]]) -> int:
        """One routed call (the leader's answer, or the local coordinator's), retried while
        the coordinator is moving."""
        if not self.env.cluster:  # always the local coordinator: nothing to route
            return await retrying(local, int, clock=self.env.clock)

        async def attempt() -> int:
            code = await self._code(key, api_key, version, partition)
            return await local() if code is None else code
        return await retrying(attempt, int, clock=self.env.clock)

    async def _state_or_local(self, key: ShareStateKey, api_key: int, version: int, partition: dict[str, Any],
                              local: Callable[[], Awaitable[ShareState]]) -> ShareState:
        async def attempt() -> ShareState:
            st = await self._state(key, api_key, version, partition)
            return await local() if st is None else st
        return await retrying(attempt, lambda st: int(st.error_code), clock=self.env.clock)

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> int:
        return await self._code_or_local(key, 83, 0, {"state_epoch": state_epoch, "start_offset": start_offset},
                                         lambda: self.local.initialize(key, state_epoch, start_offset))

    async def read(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState:
        return await self._state_or_local(key, 84, 0, {"leader_epoch": leader_epoch},
                                          lambda: self.local.read(key, leader_epoch))

    async def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    delivery_complete_count: int, state_batches: tuple[StateBatch, ...]) -> int:
        return await self._code_or_local(key, 85, 1, lambda: {  # built only for a remote coordinator
            "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start_offset,
            "delivery_complete_count": delivery_complete_count,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in state_batches]},
            lambda: self.local.write(key, state_epoch, leader_epoch, start_offset,
                                                  delivery_complete_count, state_batches))

    async def read_summary(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareState:
        return await self._state_or_local(key, 87, 1, {"leader_epoch": leader_epoch},
                                          lambda: self.local.read_summary(key, leader_epoch))

    async def delete(self, key: ShareStateKey) -> int:
        return await self._code_or_local(key, 86, 0, {}, lambda: self.local.delete(key))

    async def close(self) -> None:
        """Close the connections to other brokers."""
        await self._peers.close()
