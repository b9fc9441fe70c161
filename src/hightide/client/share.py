"""Share-group half of :class:`hightide.client.AdminClient` (a mixin, KIP-932 / seed 002).

* :meth:`ShareGroupsMixin.list_share_groups` — ListGroups v5 with the type filter ``share``
  asked of every broker;
* :meth:`ShareGroupsMixin.describe_share_groups` — ShareGroupDescribe (members, assignment);
* :meth:`ShareGroupsMixin.list_share_group_offsets` — DescribeShareGroupOffsets: start
  offset (SPSO) and, from v1, the lag per share partition (None when unknown);
* :meth:`ShareGroupsMixin.alter_share_group_offsets` /
  :meth:`ShareGroupsMixin.delete_share_group_offsets` — for empty share groups;
* :meth:`ShareGroupsMixin.read_share_group_state` — ReadShareGroupState, the in-flight
  state batches of one share partition. Kafka serves the state RPCs to brokers only;
  hightide also on its client listener, so this returns None against brokers that do not
  advertise the API.

Group requests go to the group coordinator with the retries of :mod:`.groups`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..lag.share import UNKNOWN
from .errors import ErrorCode, KafkaError, error_for, raise_for_code
from .types import GroupListing, TopicPartition

if TYPE_CHECKING:
    from .connection import BrokerConnection

__all__ = ["ShareGroupDescription", "ShareGroupsMixin", "ShareMember", "SharePartitionOffset",
           "SharePartitionState", "ShareStateBatch"]

SHARE_TYPE = "share"


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """One share partition of DescribeShareGroupOffsets. ``start_offset`` is -1 while the
    share partition is uninitialised; ``lag`` is None when unknown (uninitialised, or the
    broker answers v0 without the Lag field)."""

    start_offset: int
    leader_epoch: int = -1
    lag: int | None = None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareStateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int  # 0 available, 2 acknowledged, 4 archived
    delivery_count: int


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    state_epoch: int
    start_offset: int
    batches: tuple[ShareStateBatch, ...] = field(default_factory=tuple)


class ShareGroupsMixin:
    """Share group APIs. Needs AdminClient's connections and GroupsMixin's coordinator calls."""

    if TYPE_CHECKING:
        async def _any_conn(self) -> BrokerConnection: ...
        async def _conn_for_node(self, node_id: int) -> BrokerConnection: ...
        async def _with_retries(self, attempt: Any, retry_if: Any = None, on_retry: Any = None) -> Any: ...
        async def _coordinator_call(self, group_id: str, fn: Any) -> Any: ...
        async def metadata(self, topics: list[str] | None = None) -> Any: ...

    async def list_share_groups(self) -> list[GroupListing]:
        """Share groups known to any broker, sorted by id (needs ListGroups v5)."""
        md = await self.metadata(topics=[])

        async def one(node_id: int) -> list[GroupListing]:
            async def attempt() -> list[GroupListing]:
                conn = await self._conn_for_node(node_id)
                v = conn.pick_version(16, 5, 5)
                resp = await conn.request(16, v, {"states_filter": [], "types_filter": [SHARE_TYPE]})
                raise_for_code(resp.error_code, f"ListGroups on broker {node_id}")
                return [GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in resp.groups
                        if g.group_type == SHARE_TYPE]
            return await self._with_retries(attempt)
        found = await asyncio.gather(*(one(n) for n in md.brokers))
        merged = {g.group_id: g for gs in found for g in gs}
        return [merged[k] for k in sorted(merged)]

    async def describe_share_group(self, group_id: str) -> ShareGroupDescription:
        """ShareGroupDescribe of one group. Raises GROUP_ID_NOT_FOUND for a group that
        is not a share group."""
        async def fn(conn: BrokerConnection) -> ShareGroupDescription:
            v = conn.pick_version(77, 1, 1)
            resp = await conn.request(77, v, {"group_ids": [group_id], "include_authorized_operations": False})
            g = resp.groups[0]
            raise_for_code(g.error_code, f"ShareGroupDescribe {group_id!r}: {g.error_message or ''}")
            return ShareGroupDescription(
                g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name, tuple(
                    ShareMember(m.member_id, m.client_id, m.client_host, m.member_epoch, m.rack_id,
                                tuple(m.subscribed_topic_names),
                                tuple(TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions
                                      for p in t.partitions))
                    for m in g.members))
        return await self._coordinator_call(group_id, fn)

    async def list_share_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                       ) -> dict[TopicPartition, SharePartitionOffset]:
        """Start offset and lag of the group's share partitions (all with state when
        ``partitions`` is None). Raises the group-level error."""
        wanted = None if partitions is None else list(partitions)

        async def fn(conn: BrokerConnection) -> dict[TopicPartition, SharePartitionOffset]:
            v = conn.pick_version(90, 1, 0)
            topics = None
            if wanted is not None:
                by_topic: dict[str, list[int]] = {}
                for tp in wanted:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                topics = [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]
            resp = await conn.request(90, v, {"groups": [{"group_id": group_id, "topics": topics}]})
            g = resp.groups[0]
            raise_for_code(g.error_code, f"DescribeShareGroupOffsets {group_id!r}: {g.error_message or ''}")
            out: dict[TopicPartition, SharePartitionOffset] = {}
            for t in g.topics:
                for p in t.partitions:
                    lag = getattr(p, "lag", UNKNOWN)
                    err = None if p.error_code == 0 else error_for(p.error_code, f"{t.topic_name}-{p.partition_index}")
                    out[TopicPartition(t.topic_name, p.partition_index)] = SharePartitionOffset(
                        p.start_offset, p.leader_epoch, None if lag < 0 else lag, err)
            return out
        return await self._coordinator_call(group_id, fn)

    async def alter_share_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int], *,
                                        raise_on_error: bool = True) -> dict[TopicPartition, KafkaError | None]:
        """Set the start offset of share partitions of an empty share group."""
        async def fn(conn: BrokerConnection) -> dict[TopicPartition, KafkaError | None]:
            v = conn.pick_version(91, 0, 0)
            by_topic: dict[str, list[dict]] = {}
            for tp, off in offsets.items():
                by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "start_offset": off})
            resp = await conn.request(91, v, {"group_id": group_id, "topics": [
                {"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})
            raise_for_code(resp.error_code, f"AlterShareGroupOffsets {group_id!r}: {resp.error_message or ''}")
            return {TopicPartition(t.topic_name, p.partition_index):
                    None if p.error_code == 0 else error_for(p.error_code, f"{t.topic_name}-{p.partition_index}: "
                                                                           f"{p.error_message or ''}")
                    for t in resp.responses for p in t.partitions}
        out = await self._coordinator_call(group_id, fn)
        return _finish(out, raise_on_error)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *,
                                         raise_on_error: bool = True) -> dict[str, KafkaError | None]:
        """Delete the share state of whole topics for an empty share group."""
        names = list(topics)

        async def fn(conn: BrokerConnection) -> dict[str, KafkaError | None]:
            v = conn.pick_version(92, 0, 0)
            resp = await conn.request(92, v, {"group_id": group_id, "topics": [{"topic_name": t} for t in names]})
            raise_for_code(resp.error_code, f"DeleteShareGroupOffsets {group_id!r}: {resp.error_message or ''}")
            return {t.topic_name: None if t.error_code == 0 else error_for(t.error_code, f"{t.topic_name}: "
                                                                                         f"{t.error_message or ''}")
                    for t in resp.responses}
        return _finish(await self._coordinator_call(group_id, fn), raise_on_error)

    async def read_share_group_state(self, group_id: str, topic_id: uuid.UUID, partition: int
                                     ) -> SharePartitionState | None:
        """The persisted state of one share partition; see :meth:`read_share_group_states`."""
        got = await self.read_share_group_states(group_id, [(topic_id, partition)])
        return None if got is None else got.get((topic_id, partition))

    async def read_share_group_states(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]]
                                      ) -> dict[tuple[uuid.UUID, int], SharePartitionState] | None:
        """Persisted state of share partitions ``(topic id, partition)`` in one
        ReadShareGroupState v0 request (leader epoch -1: nothing is fenced or recorded).
        Partitions without state are left out; None if the broker does not serve the state
        RPCs to clients (Kafka serves them to brokers only)."""
        by_topic: dict[uuid.UUID, list[int]] = {}
        for tid, p in partitions:
            by_topic.setdefault(tid, []).append(p)
        conn = await self._any_conn()
        if not conn.supports(84, 0):
            return None
        if not by_topic:
            return {}
        resp = await conn.request(84, 0, {"group_id": group_id, "topics": [
            {"topic_id": tid, "partitions": [{"partition": p, "leader_epoch": -1} for p in ps]}
            for tid, ps in by_topic.items()]})
        out: dict[tuple[uuid.UUID, int], SharePartitionState] = {}
        for t in resp.results:
            for p in t.partitions:
                if p.error_code == ErrorCode.invalid_request:  # never initialised
                    continue
                raise_for_code(p.error_code, f"ReadShareGroupState {group_id!r} {t.topic_id}-{p.partition}")
                out[(t.topic_id, p.partition)] = SharePartitionState(p.state_epoch, p.start_offset, tuple(
                    ShareStateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in p.state_batches))
        return out


def _finish(results: dict[Any, Any], raise_on_error: bool) -> dict[Any, Any]:
    if raise_on_error:
        for r in results.values():
            if isinstance(r, KafkaError):
                raise r
    return results
