"""AdminClient: cluster metadata, topics and offsets over per-broker connections.

Connections are opened lazily, one per broker id, and reused; a broken connection is
replaced on next use. Requests that go to a particular broker (partition leaders,
group coordinators, the controller) are routed from the latest metadata; retriable
errors (leadership moves, NOT_CONTROLLER, lost connections, coordinator moves) refresh
the routing and retry with exponential backoff until ``request_timeout_s`` has passed.
Group APIs live in :mod:`.groups`, share groups in :mod:`.share`, lag in :mod:`.lag`,
configs (DescribeConfigs, IncrementalAlterConfigs) in :mod:`.configs`,
the data-plane calls (partition leaders, Fetch, InitProducerId, Produce) in :mod:`.data`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Self, TypeVar

from ..protocol.records import HEADER_SIZE, decode_records, parse_header
from .cluster import ClusterDescription, QuorumInfo, describe_cluster, describe_quorum
from .configs import ConfigsMixin
from ..aio.transport import LOOP_TRANSPORT, Transport
from .connection import BrokerConnection
from .data import DataMixin
from .errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    UnknownTopicOrPartitionError,
    _Retry,
    error_for,
    unreachable,
)
from .groups import GroupsMixin
from .log_dirs import LogDirsMixin
from .properties import ClientSecurity
from .security import SecurityMixin
from .share import ShareGroupsMixin
from .types import (
    BrokerMetadata,
    ClusterMetadata,
    ListOffsetsResult,
    NewTopic,
    OffsetSpec,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
    spec_timestamp,
)

__all__ = ["AdminClient", "parse_servers"]

T = TypeVar("T")
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}
_ZERO_UUID = uuid.UUID(int=0)


def parse_servers(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"``, ``"[::1]:9092"`` or a list of those → [(host, port)].
    Raises ValueError on an entry without a port or an empty list."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in (s.strip() for s in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} must be HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class AdminClient(GroupsMixin, ShareGroupsMixin, DataMixin, ConfigsMixin, SecurityMixin, LogDirsMixin):
    """An async Kafka admin client that works with hightide and any Kafka cluster.

    Use as ``async with AdminClient("host:9092") as admin: ...``. Every method raises
    :class:`~hightide.client.errors.KafkaError` (or a subclass) on failure. Methods that
    act on several items return ``{item: KafkaError | None}`` and, with
    ``raise_on_error=True`` (the default), raise the first error instead.
    ``use_extensions=False`` ignores hightide's protocol extensions (lag then always
    takes the two-call path), e.g. to compare both paths. ``security``
    (:class:`~hightide.client.properties.ClientSecurity`, from ``--command-config``) makes
    every connection use TLS and/or SASL. ``transport`` opens every connection
    (:mod:`hightide.aio.transport`; an in-memory network in tests).
    """

    def __init__(self, bootstrap_servers: str | list[str], client_id: str = "hightide-admin",
                 request_timeout_s: float = 30.0, *, retry_backoff_s: float = 0.1,
                 max_backoff_s: float = 1.0, use_extensions: bool = True,
                 security: ClientSecurity | None = None, transport: Transport = LOOP_TRANSPORT) -> None:
        self.bootstrap_servers = parse_servers(bootstrap_servers)
        self.security = security
        self.transport = transport
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.max_backoff_s = max_backoff_s
        self.use_extensions = use_extensions
        self._bootstrap_conn: BrokerConnection | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._addrs: dict[int, tuple[str, int]] = {}
        self._cluster: ClusterMetadata | None = None
        GroupsMixin.__init__(self)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to the first reachable bootstrap server and load cluster metadata.
        Raises :class:`KafkaConnectionError` if none is reachable."""
        await self._bootstrap()
        await self.metadata(topics=[])

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        conns = {id(c): c for c in [*self._conns.values(), self._bootstrap_conn] if c is not None}
        self._conns.clear()
        self._bootstrap_conn = None
        await asyncio.gather(*(c.close() for c in conns.values()))

    # -- connections ---------------------------------------------------------------------
    async def _bootstrap(self) -> BrokerConnection:
        errors = []
        for host, port in self.bootstrap_servers:
            conn = BrokerConnection(host, port, self.client_id, request_timeout_s=self.request_timeout_s,
                                    security=self.security, transport=self.transport)
            try:
                await conn.connect()
            except KafkaError as exc:
                errors.append((f"{host}:{port}", exc))
                continue
            self._bootstrap_conn = conn
            return conn
        raise unreachable(errors)

    async def _any_conn(self) -> BrokerConnection:
        """A live connection to some broker (an existing one if possible)."""
        for conn in self._conns.values():
            if conn.connected:
                return conn
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        for node_id in list(self._addrs):
            try:
                return await self._conn_for_node(node_id)
            except KafkaConnectionError:
                continue
        return await self._bootstrap()

    async def _conn_for_node(self, node_id: int) -> BrokerConnection:
        """The connection to broker ``node_id``, opened if needed. Raises
        :class:`KafkaConnectionError` if the broker is unknown or unreachable."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        async with self._locks[node_id]:
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected:
                return conn
            if node_id not in self._addrs:
                await self.metadata(topics=[])
            if node_id not in self._addrs:
                raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
            if conn is not None:
                await conn.close()  # broken: replace it
            host, port = self._addrs[node_id]
            boot = self._bootstrap_conn
            if boot is not None and boot.connected and (boot.host, boot.port) == (host, port) \
                    and boot not in self._conns.values():
                conn = boot  # adopt the bootstrap connection: same broker
            else:
                conn = BrokerConnection(host, port, self.client_id, request_timeout_s=self.request_timeout_s,
                                        security=self.security, transport=self.transport)
                await conn.connect()
            conn.node_id = node_id
            self._conns[node_id] = conn
            return conn

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]],
                            retry_if: Callable[[KafkaError], bool] | None = None,
                            on_retry: Callable[[KafkaError], Awaitable[None]] | None = None) -> T:
        """Run ``attempt`` until it succeeds, retrying errors for which ``retry_if`` is true
        (default: ``err.retriable``) with exponential backoff within ``request_timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        delay = self.retry_backoff_s
        while True:
            try:
                return await attempt()
            except KafkaError as exc:
                ok = retry_if(exc) if retry_if is not None else exc.retriable
                if not ok or loop.time() + delay > deadline:
                    raise
                if on_retry is not None:
                    await on_retry(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)

    # -- metadata ------------------------------------------------------------------------
    async def metadata(self, topics: list[str] | None = None, *,
                       allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """Metadata for ``topics`` (None: all topics; []: brokers only). Topics the broker
        does not know appear with ``error`` set. Creates none unless
        ``allow_auto_topic_creation`` (as a Kafka producer asks: the broker then creates
        the unknown topics if its ``auto.create.topics.enable`` is true)."""
        async def attempt() -> ClusterMetadata:
            conn = await self._any_conn()
            v = conn.pick_version(3, 12, 4 if allow_auto_topic_creation else 1)
            body = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                    "allow_auto_topic_creation": allow_auto_topic_creation,
                    "include_topic_authorized_operations": False,
                    "include_cluster_authorized_operations": False}
            return self._remember(_parse_metadata(await conn.request(3, v, body)))
        return await self._with_retries(attempt)

    def _remember(self, md: ClusterMetadata) -> ClusterMetadata:
        for b in md.brokers.values():
            self._addrs[b.node_id] = (b.host, b.port)
        self._cluster = md
        return md

    async def describe_cluster(self, include_fenced: bool = True) -> ClusterDescription:
        """DescribeCluster of a broker (fenced brokers too where it has v2); see
        :func:`hightide.client.cluster.describe_cluster`. Retries retriable errors."""
        async def attempt() -> ClusterDescription:
            return await describe_cluster(await self._any_conn(), include_fenced=include_fenced)
        return await self._with_retries(attempt)

    async def describe_metadata_quorum(self) -> QuorumInfo:
        """DescribeQuorum of ``__cluster_metadata-0`` (Kafka's describeMetadataQuorum);
        raises :class:`UnsupportedVersionError` when the broker does not offer it."""
        async def attempt() -> QuorumInfo:
            return await describe_quorum(await self._any_conn())
        return await self._with_retries(attempt)

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        """Sorted names of all topics (internal ones such as ``__consumer_offsets`` only
        with ``include_internal``)."""
        md = await self.metadata()
        return sorted(n for n, t in md.topics.items() if include_internal or not t.is_internal)

    async def describe_topics(self, names: list[str]) -> dict[str, TopicMetadata]:
        """Metadata of each named topic. Raises the topic's error (e.g.
        :class:`UnknownTopicOrPartitionError`) if any topic has one."""
        md = await self.metadata(list(names))
        for name in names:
            t = md.topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(ErrorCode.unknown_topic_or_partition, name)
            if t.error != ErrorCode.none:
                raise error_for(t.error, name)
        return {n: md.topics[n] for n in names}

    # -- topic admin ---------------------------------------------------------------------
    async def create_topics(self, topics: list[NewTopic | str], *, timeout_s: float = 30.0,
                            validate_only: bool = False,
                            raise_on_error: bool = True) -> dict[str, KafkaError | None]:
        """Create topics (a bare name uses the broker's defaults); sent to the controller."""
        new = {t.name: t for t in (NewTopic(x) if isinstance(x, str) else x for x in topics)}

        def body(names: list[str]) -> dict[str, Any]:
            return {"topics": [_creatable(new[n]) for n in names],
                    "timeout": int(timeout_s * 1000), "validate_only": validate_only}
        return await self._controller_batch(19, 7, 2, list(new), body,
                                            lambda r: [(t.name, t.error_code, t.error_message) for t in r.topics],
                                            raise_on_error)

    async def delete_topics(self, names: list[str], *, timeout_s: float = 30.0,
                            raise_on_error: bool = True) -> dict[str, KafkaError | None]:
        """Delete topics by name; sent to the controller."""
        def body(ns: list[str]) -> dict[str, Any]:
            return {"topic_names": ns, "topics": [{"name": n, "topic_id": None} for n in ns],
                    "timeout": int(timeout_s * 1000)}
        return await self._controller_batch(
            20, 6, 1, list(names), body,
            lambda r: [(x.name, x.error_code, getattr(x, "error_message", None)) for x in r.responses],
            raise_on_error)

    async def create_partitions(self, new_totals: dict[str, int], *, timeout_s: float = 30.0,
                                validate_only: bool = False,
                                raise_on_error: bool = True) -> dict[str, KafkaError | None]:
        """Grow each topic to ``new_totals[topic]`` partitions; sent to the controller."""
        def body(ns: list[str]) -> dict[str, Any]:
            return {"topics": [{"name": n, "count": new_totals[n], "assignments": None} for n in ns],
                    "timeout": int(timeout_s * 1000), "validate_only": validate_only}
        return await self._controller_batch(
            37, 3, 0, list(new_totals), body,
            lambda r: [(x.name, x.error_code, x.error_message) for x in r.results], raise_on_error)

    async def _controller_batch(self, api_key: int, wanted_max: int, our_min: int, keys: list[str],
                                body: Callable[[list[str]], dict[str, Any]],
                                results: Callable[[Any], list[tuple[str, int, str | None]]],
                                raise_on_error: bool) -> dict[str, KafkaError | None]:
        out: dict[str, KafkaError | None] = {}
        remaining = keys

        async def attempt() -> None:
            nonlocal remaining
            conn = await self._controller_conn()
            v = conn.pick_version(api_key, wanted_max, our_min)
            resp = await conn.request(api_key, v, body(remaining))
            retry = []
            for name, code, msg in results(resp):
                if code == ErrorCode.not_controller:
                    retry.append(name)
                out[name] = None if code == 0 else error_for(code, f"{name}: {msg or ''}".rstrip(": "))
            remaining = retry
            if retry:
                raise _Retry(ErrorCode.not_controller, f"retry {retry}")

        async def refresh(_: KafkaError) -> None:
            await self.metadata(topics=[])
        try:
            await self._with_retries(attempt, on_retry=refresh)
        except _Retry:
            pass  # deadline passed: the per-item errors are in ``out``
        return _finish(out, keys, raise_on_error)

    async def _controller_conn(self) -> BrokerConnection:
        md = self._cluster
        if md is not None and md.controller_id in md.brokers:
            try:
                return await self._conn_for_node(md.controller_id)
            except KafkaConnectionError:
                pass
        return await self._any_conn()

    # -- offsets -------------------------------------------------------------------------
    async def list_offsets(self, specs: dict[TopicPartition, OffsetSpec], *,
                           isolation_level: str | int = "read_uncommitted",
                           raise_on_error: bool = True
                           ) -> dict[TopicPartition, ListOffsetsResult | KafkaError]:
        """``(offset, timestamp)`` per partition, asked of each partition's leader.

        Specs: ``"earliest"``, ``"latest"`` (HW; LSO with ``read_committed``),
        ``"max_timestamp"`` (needs ListOffsets v7; an older broker yields
        UNSUPPORTED_VERSION for those partitions) or a timestamp in ms. No match: (-1, -1).
        With ``raise_on_error`` (default) the first partition error is raised; otherwise
        failed partitions map to their :class:`KafkaError`, and a partition without a
        leader in the metadata (its only replica's broker fenced or gone) is answered
        LEADER_NOT_AVAILABLE at once instead of retried until the request timeout — the
        tables, lag views and the exporter show the rest without waiting for it.
        """
        stamps = {TopicPartition(*tp): spec_timestamp(s) for tp, s in specs.items()}
        iso = _ISOLATION[isolation_level]
        results: dict[TopicPartition, ListOffsetsResult | KafkaError] = {}
        remaining = dict(stamps)

        async def attempt() -> None:
            nonlocal remaining
            md = await self.metadata(sorted({tp.topic for tp in remaining}))
            by_leader: defaultdict[int, dict[TopicPartition, int]] = defaultdict(dict)
            retry: dict[TopicPartition, int] = {}
            for tp, ts in remaining.items():
                leader = md.leader_for(tp)
                t = md.topics.get(tp.topic)
                if t is None or t.error == ErrorCode.unknown_topic_or_partition \
                        or (t.error == ErrorCode.none and tp.partition not in t.partitions):
                    results[tp] = UnknownTopicOrPartitionError(ErrorCode.unknown_topic_or_partition,
                                                               f"{tp.topic}-{tp.partition}")
                elif leader < 0:
                    if raise_on_error:  # a caller that needs the answer waits for a leader
                        retry[tp] = ts
                    results[tp] = error_for(ErrorCode.leader_not_available, f"{tp.topic}-{tp.partition}")
                else:
                    by_leader[leader][tp] = ts
            groups = list(by_leader.items())
            outs = await asyncio.gather(*(self._list_offsets_on(n, p, iso) for n, p in groups),
                                        return_exceptions=True)
            for (_, parts), got in zip(groups, outs):
                if isinstance(got, KafkaError):
                    got = {tp: got for tp in parts}
                elif isinstance(got, BaseException):
                    raise got
                for tp, r in got.items():
                    results[tp] = r
                    if isinstance(r, KafkaError) and r.retriable:
                        retry[tp] = parts[tp]
            remaining = retry
            if retry:
                raise _Retry(ErrorCode.not_leader_or_follower, "retry")
        try:
            await self._with_retries(attempt)
        except _Retry:
            pass  # the per-partition errors are in results
        return _finish(results, list(stamps), raise_on_error)  # type: ignore[return-value]

    async def _list_offsets_on(self, node_id: int, parts: dict[TopicPartition, int], iso: int
                               ) -> dict[TopicPartition, ListOffsetsResult | KafkaError]:
        conn = await self._conn_for_node(node_id)
        out: dict[TopicPartition, ListOffsetsResult | KafkaError] = {}
        if not conn.supports(2) or conn.api_versions[2][1] < 7:
            for tp in [tp for tp, ts in parts.items() if ts == -3]:
                out[tp] = error_for(ErrorCode.unsupported_version, "max_timestamp needs ListOffsets v7")
                parts = {k: v for k, v in parts.items() if k != tp}
        if not parts:
            return out
        need = 7 if -3 in parts.values() else (2 if iso else 1)
        v = conn.pick_version(2, 10, need)
        by_topic: defaultdict[str, list[dict[str, int]]] = defaultdict(list)
        for tp, ts in parts.items():
            by_topic[tp.topic].append({"partition_index": tp.partition, "current_leader_epoch": -1,
                                       "timestamp": ts})
        resp = await conn.request(2, v, {
            "replica_id": -1, "isolation_level": iso, "timeout": int(self.request_timeout_s * 1000),
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                out[tp] = (ListOffsetsResult(int(p.offset), int(p.timestamp)) if p.error_code == 0
                           else error_for(p.error_code, f"{t.name}-{p.partition_index}"))
        for tp in parts:
            out.setdefault(tp, KafkaError(ErrorCode.unknown_server_error, f"{tp} missing in response"))
        return out

    async def delete_records(self, before: dict[TopicPartition, int], *, timeout_s: float = 30.0,
                             raise_on_error: bool = True) -> dict[TopicPartition, int | KafkaError]:
        """DeleteRecords: move each partition's log start offset up to ``before[tp]``
        (-1: the high watermark). Returns the new log start offset per partition."""
        by_leader, out = await self.partition_leaders(before)
        results: dict[TopicPartition, int | KafkaError] = dict(out)

        async def one(node_id: int, tps: list[TopicPartition]) -> None:
            conn = await self._conn_for_node(node_id)
            v = conn.pick_version(21, 2, 0)
            by_topic: defaultdict[str, list[dict[str, int]]] = defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append({"partition_index": tp.partition, "offset": before[tp]})
            resp = await conn.request(21, v, {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                                              "timeout": int(timeout_s * 1000)})
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    results[tp] = (int(p.low_watermark) if p.error_code == 0
                                   else error_for(p.error_code, f"{t.name}-{p.partition_index}"))
        await asyncio.gather(*(one(n, tps) for n, tps in by_leader.items()))
        return _finish(results, list(results), raise_on_error)

    async def first_records(self, offsets: dict[TopicPartition, int], *,
                            isolation_level: str | int = "read_uncommitted",
                            partition_max_bytes: int = 64 * 1024
                            ) -> dict[TopicPartition, ListOffsetsResult | KafkaError | None]:
        """``(offset, timestamp)`` of the first data record at or after ``offsets[tp]``
        (one Fetch per leader, no waiting); None when there is none yet. Used for the
        ``record_timestamp`` time-lag method. Errors are returned per partition
        (OFFSET_OUT_OF_RANGE when the offset was deleted or is past the end)."""
        got = await self.first_records_many({tp: [off] for tp, off in offsets.items()},
                                            isolation_level=isolation_level,
                                            partition_max_bytes=partition_max_bytes)
        return {tp: r if isinstance(r, KafkaError) else r.get(offsets[tp]) for tp, r in got.items()}

    async def first_records_many(self, offsets: dict[TopicPartition, list[int]], *,
                                 isolation_level: str | int = "read_uncommitted",
                                 partition_max_bytes: int = 64 * 1024
                                 ) -> dict[TopicPartition, dict[int, ListOffsetsResult] | KafkaError]:
        """:meth:`first_records` of several offsets per partition from one Fetch per
        leader, at the smallest offset of each partition: for every offset that the
        returned batches cover, the first data record at or after it. Offsets past the
        returned data are absent from the answer (fetch them again from there: the
        response may have stopped at ``partition_max_bytes``)."""
        by_leader, errors = await self.partition_leaders(offsets)
        results: dict[TopicPartition, dict[int, ListOffsetsResult] | KafkaError] = dict(errors)
        iso = _ISOLATION[isolation_level]
        wanted = {TopicPartition(*tp): sorted(set(offs)) for tp, offs in offsets.items() if offs}

        async def one(node_id: int, tps: list[TopicPartition]) -> None:
            conn = await self._conn_for_node(node_id)
            v = conn.pick_version(1, 11, 4)
            by_topic: defaultdict[str, list[dict[str, int]]] = defaultdict(list)
            for tp in tps:
                if tp in wanted:
                    by_topic[tp.topic].append({"partition": tp.partition, "current_leader_epoch": -1,
                                               "fetch_offset": wanted[tp][0], "log_start_offset": -1,
                                               "partition_max_bytes": partition_max_bytes})
            if not by_topic:
                return
            resp = await conn.request(1, v, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 16 * 1024 * 1024,
                "isolation_level": iso, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                "forgotten_topics_data": [], "rack_id": ""})
            for t in resp.responses:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, int(p.partition_index))
                    if p.error_code != 0:
                        results[tp] = error_for(p.error_code, f"{t.topic}-{p.partition_index}")
                    else:
                        results[tp] = _first_records(p.records or b"", wanted.get(tp, []))
        await asyncio.gather(*(one(n, tps) for n, tps in by_leader.items()))
        return results


def _first_records(records: bytes, offsets: list[int]) -> dict[int, ListOffsetsResult]:
    """For each of the sorted ``offsets``, the first non-control record at or after it in
    fetched batches (absent when the batches end before one). Decodes only the batches
    that hold an answer."""
    out: dict[int, ListOffsetsResult] = {}
    i, n = 0, len(offsets)
    pos, end = 0, len(records)
    while i < n and pos + HEADER_SIZE <= end:
        h = parse_header(records, pos)
        size = h.length + 12
        if pos + size > end:
            break  # a partial batch at the end of the response
        if h.next_offset > offsets[i] and not h.is_control:
            for r in decode_records(memoryview(records)[pos:pos + size]):
                while i < n and offsets[i] <= r.offset:
                    out[offsets[i]] = ListOffsetsResult(r.offset, r.timestamp)
                    i += 1
                if i == n:
                    break
        pos += size
    return out


def _finish(results: dict[Any, Any], keys: list[Any], raise_on_error: bool) -> dict[Any, Any]:
    if raise_on_error:
        for k in keys:
            if isinstance(results.get(k), KafkaError):
                raise results[k]
    return results


def _creatable(t: NewTopic) -> dict[str, Any]:
    assignments = [{"partition_index": p, "broker_ids": b} for p, b in (t.assignments or {}).items()]
    return {"name": t.name, "num_partitions": -1 if assignments else t.num_partitions,
            "replication_factor": -1 if assignments else t.replication_factor,
            "assignments": assignments,
            "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}


def _parse_metadata(resp: Any) -> ClusterMetadata:
    brokers = {int(b.node_id): BrokerMetadata(int(b.node_id), b.host, int(b.port), b.rack)
               for b in resp.brokers}
    topics = {}
    for t in resp.topics:
        parts = {int(p.partition_index): PartitionMetadata(
            int(p.partition_index), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
            tuple(int(x) for x in p.replica_nodes), tuple(int(x) for x in p.isr_nodes),
            tuple(int(x) for x in getattr(p, "offline_replicas", ())), ErrorCode(p.error_code))
            for p in t.partitions}
        tid = getattr(t, "topic_id", None)
        topics[t.name] = TopicMetadata(t.name, parts, None if tid in (None, _ZERO_UUID) else tid,
                                       bool(t.is_internal), ErrorCode(t.error_code))
    return ClusterMetadata(brokers, topics, int(getattr(resp, "controller_id", -1)),
                           getattr(resp, "cluster_id", None))
