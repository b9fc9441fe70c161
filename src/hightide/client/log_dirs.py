"""Log dirs and broker registrations for :class:`hightide.client.AdminClient` (a mixin):
DescribeLogDirs (35) as Kafka's ``Admin.describeLogDirs`` (``kafka-log-dirs.sh``) and
UnregisterBroker (64) as ``Admin.unregisterBroker`` (``kafka-cluster.sh unregister``).

DescribeLogDirs goes to each broker asked (every broker in the metadata by default),
since each answers only for its own logs; UnregisterBroker goes to any broker, which
forwards it to the active controller. Both work against hightide and Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ErrorCode, error_for

if TYPE_CHECKING:
    from .connection import BrokerConnection

__all__ = ["LogDirDescription", "LogDirsMixin", "ReplicaLogInfo", "partition_sizes"]


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One partition's log in a log dir: its size in bytes, Kafka's offset lag and
    whether it is a future log (AlterReplicaLogDirs)."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of a broker. ``total_bytes``/``usable_bytes`` are -1 when the broker
    does not say (DescribeLogDirs below v4); ``error`` is the dir's error code."""

    broker: int
    path: str
    error: ErrorCode
    replicas: tuple[ReplicaLogInfo, ...]
    total_bytes: int
    usable_bytes: int


def partition_sizes(dirs: Iterable[LogDirDescription], leaders: dict[tuple[str, int], int] | None = None
                    ) -> dict[tuple[str, int], int]:
    """(topic, partition) → size in bytes of its current (not future) log: the leader's
    replica where ``leaders`` names a leader whose dirs are among ``dirs``, else the
    largest replica seen."""
    by_replica: dict[tuple[str, int], dict[int, int]] = {}
    for d in dirs:
        for r in d.replicas:
            if not r.is_future:
                by_replica.setdefault((r.topic, r.partition), {})[d.broker] = r.size
    out = {}
    for tp, sizes in by_replica.items():
        leader = (leaders or {}).get(tp)
        out[tp] = sizes[leader] if leader in sizes else max(sizes.values())
    return out


class LogDirsMixin:
    """DescribeLogDirs and UnregisterBroker for :class:`~hightide.client.AdminClient`."""

    async def describe_log_dirs(self, brokers: Iterable[int] | None = None,
                                topics: dict[str, list[int]] | None = None) -> list[LogDirDescription]:
        """The log dirs of each broker of ``brokers`` (default: every broker in the
        metadata) with the partition logs in them — those of ``topics`` (topic →
        partitions) only, when given. Raises :class:`KafkaError` (e.g.
        ClusterAuthorizationFailedError without DESCRIBE on the cluster)."""
        if brokers is None:
            brokers = sorted((await self.metadata([])).brokers)  # type: ignore[attr-defined]
        body: dict[str, Any] = {"topics": None if topics is None else [
            {"topic": t, "partitions": list(ps)} for t, ps in topics.items()]}
        out: list[LogDirDescription] = []
        for node_id in brokers:
            async def attempt(node_id: int = node_id) -> Any:
                conn: BrokerConnection = await self._conn_for_node(node_id)  # type: ignore[attr-defined]
                resp = await conn.request(35, conn.pick_version(35, 4, 1), body)
                code = getattr(resp, "error_code", ErrorCode.none)
                if code != ErrorCode.none:
                    raise error_for(code, f"DescribeLogDirs on broker {node_id}")
                return resp
            resp = await self._with_retries(attempt)  # type: ignore[attr-defined]
            for r in resp.results:
                replicas = tuple(ReplicaLogInfo(t.name, int(p.partition_index), int(p.partition_size),
                                                int(p.offset_lag), bool(p.is_future_key))
                                 for t in r.topics for p in t.partitions)
                out.append(LogDirDescription(node_id, r.log_dir, ErrorCode(int(r.error_code)), replicas,
                                             int(getattr(r, "total_bytes", -1)), int(getattr(r, "usable_bytes", -1))))
        return out

    async def unregister_broker(self, broker_id: int) -> None:
        """Remove ``broker_id``'s registration from the cluster (a decommissioned broker).
        Raises :class:`KafkaError`: BrokerIdNotRegisteredError for an unknown id,
        ClusterAuthorizationFailedError without ALTER on the cluster,
        UnsupportedVersionError where the broker does not offer it."""
        async def attempt() -> Any:
            conn: BrokerConnection = await self._any_conn()  # type: ignore[attr-defined]
            return await conn.request(64, conn.pick_version(64, 0, 0), {"broker_id": broker_id})
        resp = await self._with_retries(attempt)  # type: ignore[attr-defined]
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, resp.error_message or f"unregistering broker {broker_id}")
