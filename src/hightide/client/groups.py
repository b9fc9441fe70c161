"""Consumer-group half of :class:`hightide.client.AdminClient` (a mixin).

Group requests go to the group's coordinator, found with FindCoordinator (batched keys,
v4+, when the broker supports it) and cached per group. A coordinator error
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE: forget the cached coordinator;
COORDINATOR_LOAD_IN_PROGRESS: keep it), an UNSTABLE_OFFSET_COMMIT or a lost connection
is retried with exponential backoff until ``request_timeout_s`` has passed; then the
last error is raised (or reported per group).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..protocol.offset_fetch_response import INCLUDE_LOG_OFFSETS, GroupTuple, decode_offset_fetch_response
from .errors import (
    COORDINATOR_ERRORS,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    _Retry,
    error_for,
    raise_for_code,
)
from .lag import group_lag, groups_lag
from .types import (
    Coordinator,
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
    PartitionLag,
    TopicPartition,
)

if TYPE_CHECKING:
    from .connection import BrokerConnection

__all__ = ["GroupsMixin"]

# Per-group results worth another round: the coordinator moved or is busy.
_RETRY_GROUP = COORDINATOR_ERRORS | {ErrorCode.unstable_offset_commit}
_FORGET = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
EXT_HIGH_WATERMARK, EXT_LOG_START_OFFSET, EXT_LAST_STABLE_OFFSET = 10000, 10001, 10002

Send = Callable[["BrokerConnection", list[str]], Awaitable[dict[str, Any]]]


class GroupsMixin:
    """Group APIs. Needs the connection and retry helpers of ``AdminClient``."""

    # provided by AdminClient
    request_timeout_s: float
    retry_backoff_s: float
    max_backoff_s: float
    _addrs: dict[int, tuple[str, int]]
    if TYPE_CHECKING:
        async def _any_conn(self) -> BrokerConnection: ...
        async def _conn_for_node(self, node_id: int) -> BrokerConnection: ...
        async def _with_retries(self, attempt: Any, retry_if: Any = None, on_retry: Any = None) -> Any: ...
        async def metadata(self, topics: list[str] | None = None) -> Any: ...
        async def list_offsets(self, specs: Any, **kw: Any) -> Any: ...

    def __init__(self) -> None:
        self._coordinators: dict[tuple[int, str], Coordinator] = {}

    # -- coordinators --------------------------------------------------------------------
    async def find_coordinator(self, group_id: str, key_type: int = 0) -> Coordinator:
        """The coordinator of ``group_id`` (key_type 0: group, 1: transaction, 2: share),
        cached until a request to it fails with a coordinator error."""
        return (await self.find_coordinators([group_id], key_type))[group_id]

    async def find_coordinators(self, keys: Iterable[str], key_type: int = 0) -> dict[str, Coordinator]:
        """Coordinators of several keys: one FindCoordinator v4+ request for all uncached
        keys, or one v0–v3 request per key on older brokers. Retries coordinator errors
        with backoff; raises the last error when ``request_timeout_s`` has passed."""
        keys = list(dict.fromkeys(keys))
        out = {k: self._coordinators[(key_type, k)] for k in keys if (key_type, k) in self._coordinators}
        missing = [k for k in keys if k not in out]

        async def attempt() -> None:
            nonlocal missing
            conn = await self._any_conn()
            v = conn.pick_version(10, 6, 1 if key_type else 0)
            if v >= 4:
                resp = await conn.request(10, v, {"key_type": key_type, "coordinator_keys": missing})
                answers = [(c.key, c.error_code, c.error_message, c) for c in resp.coordinators]
            else:
                resps = await asyncio.gather(*(conn.request(10, v, {"key": k, "key_type": key_type})
                                               for k in missing))
                answers = [(k, r.error_code, getattr(r, "error_message", None), r)
                           for k, r in zip(missing, resps)]
            retry, last = [], None
            for key, code, msg, c in answers:
                if code == ErrorCode.none:
                    coord = Coordinator(int(c.node_id), c.host, int(c.port))
                    self._addrs.setdefault(coord.node_id, (coord.host, coord.port))
                    self._coordinators[(key_type, key)] = out[key] = coord
                elif code in COORDINATOR_ERRORS:
                    retry.append(key)
                    last = error_for(code, f"{key}: {msg or ''}")
                else:
                    raise error_for(code, f"FindCoordinator {key!r}: {msg or ''}")
            missing = retry
            if last is not None:
                raise last
        if missing:
            await self._with_retries(attempt)
        return out

    def _forget_coordinator(self, group_id: str, key_type: int = 0) -> None:
        self._coordinators.pop((key_type, group_id), None)

    async def _per_coordinator(self, group_ids: list[str], send: Send) -> dict[str, Any]:
        """Run ``send(conn, groups)`` once per coordinator for its groups; retry the groups
        whose result is a retriable coordinator error. Returns group → result or error."""
        results: dict[str, Any] = {}
        remaining = list(dict.fromkeys(group_ids))

        async def attempt() -> None:
            nonlocal remaining
            coords = await self.find_coordinators(remaining)
            by_node: defaultdict[int, list[str]] = defaultdict(list)
            for g in remaining:
                by_node[coords[g].node_id].append(g)
            batches = list(by_node.items())
            outs = await asyncio.gather(*(self._send_to(n, gs, send) for n, gs in batches),
                                        return_exceptions=True)
            retry = []
            for (_, gs), got in zip(batches, outs):
                if isinstance(got, (KafkaConnectionError, KafkaTimeoutError)):
                    got = {g: error_for(ErrorCode.coordinator_not_available, str(got)) for g in gs}
                elif isinstance(got, BaseException):
                    raise got
                for g in gs:
                    r = got.get(g, KafkaError(ErrorCode.unknown_server_error, f"{g} missing in response"))
                    results[g] = r
                    if isinstance(r, KafkaError) and r.code in _RETRY_GROUP:
                        retry.append(g)
                        if r.code in _FORGET:
                            self._forget_coordinator(g)
            remaining = retry
            if retry:
                raise _Retry(ErrorCode.coordinator_not_available, f"retry {retry}")
        try:
            await self._with_retries(attempt)
        except _Retry:
            pass
        return results

    async def _send_to(self, node_id: int, groups: list[str], send: Send) -> dict[str, Any]:
        return await send(await self._conn_for_node(node_id), groups)

    async def _coordinator_call(self, group_id: str,
                                fn: Callable[[BrokerConnection], Awaitable[Any]]) -> Any:
        """``fn(conn)`` against ``group_id``'s coordinator; ``fn`` raises group-level
        errors, coordinator errors are retried. Raises the final error."""
        async def send(conn: BrokerConnection, gs: list[str]) -> dict[str, Any]:
            try:
                return {group_id: await fn(conn)}
            except KafkaError as exc:
                if exc.code in _RETRY_GROUP:
                    return {group_id: exc}
                raise
        r = (await self._per_coordinator([group_id], send))[group_id]
        if isinstance(r, KafkaError):
            raise r
        return r

    # -- committed offsets ---------------------------------------------------------------
    async def list_consumer_group_offsets(self, group_id: str,
                                          partitions: Iterable[TopicPartition] | None = None,
                                          *, require_stable: bool = False
                                          ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of ``group_id`` (OffsetFetch; v8+ groups form when offered).

        ``partitions=None``: every partition with a commit. Otherwise every requested
        partition is in the result, with offset -1 where the group has no commit. The
        hightide extension fields (high watermark, log start, LSO) are filled when the
        broker sends them. Raises the group-level error (e.g. GROUP_AUTHORIZATION_FAILED).
        """
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def fetch(conn: BrokerConnection) -> dict[TopicPartition, OffsetAndMetadata]:
            our_min = 7 if require_stable else (2 if wanted is None else 1)
            v = conn.pick_version(9, 9, our_min)
            topics = None
            if wanted is not None:
                by_topic: defaultdict[str, list[int]] = defaultdict(list)
                for tp in wanted:
                    by_topic[tp.topic].append(tp.partition)
                topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
            body: dict[str, Any] = {"group_id": group_id, "topics": topics, "require_stable": require_stable,
                                    "groups": [{"group_id": group_id, "topics": topics}]}
            _, _, groups = await conn.request(9, v, body, decoder=_offset_fetch_decoder(v),
                                            request_tags=INCLUDE_LOG_OFFSETS if v >= 6 else None)
            return _parse_offset_fetch(groups, v, group_id, wanted)
        return await self._coordinator_call(group_id, fetch)

    async def list_consumer_groups_offsets(self, group_ids: Iterable[str], *, batch: int = 100
                                           ) -> dict[str, dict[TopicPartition, OffsetAndMetadata] | KafkaError]:
        """Committed offsets of several groups (every partition with a commit), asking each
        coordinator for up to ``batch`` groups per OffsetFetch v8+ request (requests are
        pipelined), or one request per group on older brokers. Group-level errors are
        returned per group, never raised."""
        rows = await self._committed_offset_rows(group_ids, batch)
        return {g: r if isinstance(r, KafkaError) else {
                    tp: OffsetAndMetadata(offset, metadata, epoch, hw, lso, lst)
                    for tp, offset, metadata, epoch, hw, lso, lst in r}
                for g, r in rows.items()}

    async def _committed_offset_rows(self, group_ids: Iterable[str], batch: int = 100
                              ) -> dict[str, list[CommittedRow] | KafkaError]:
        """:meth:`list_consumer_groups_offsets` as plain tuples, without a per-partition
        object other than the TopicPartition: what the lag computation reads."""
        async def send(conn: BrokerConnection, gs: list[str]) -> dict[str, Any]:
            v = conn.pick_version(9, 9, 2)
            chunks = [gs[i:i + batch] for i in range(0, len(gs), batch)] if v >= 8 else [[g] for g in gs]
            outs = await asyncio.gather(*(self._fetch_groups(conn, v, c) for c in chunks))
            return {g: r for o in outs for g, r in o.items()}
        return await self._per_coordinator(list(group_ids), send)

    async def _fetch_groups(self, conn: BrokerConnection, v: int, gs: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"group_id": gs[0], "topics": None, "require_stable": False,
                                "groups": [{"group_id": g, "topics": None} for g in gs]}
        _, _, groups = await conn.request(9, v, body, decoder=_offset_fetch_decoder(v),
                                            request_tags=INCLUDE_LOG_OFFSETS if v >= 6 else None)
        answers = {g[0]: g for g in groups} if v >= 8 else {gs[0]: groups[0]}
        out: dict[str, Any] = {}
        tps: dict[str, dict[int, TopicPartition]] = {}  # one TopicPartition per partition
        for g in gs:
            try:
                out[g] = _committed_rows(answers.get(g), g, True, tps)
            except KafkaError as exc:
                out[g] = exc
        return out

    async def alter_consumer_group_offsets(
            self, group_id: str, offsets: dict[TopicPartition, int | tuple[int, str | None]], *,
            raise_on_error: bool = True) -> dict[TopicPartition, KafkaError | None]:
        """Commit offsets as an admin ("simple" commit: generation -1, member id ""), which
        Kafka accepts only while the group has no active members. ``offsets`` values are
        an offset or ``(offset, metadata)``."""
        def entry(tp: TopicPartition, val: int | tuple[int, str | None]) -> dict[str, Any]:
            off, meta = (val, "") if isinstance(val, int) else val
            return {"partition_index": tp.partition, "committed_offset": off,
                    "committed_leader_epoch": -1, "committed_metadata": meta}

        async def commit(conn: BrokerConnection) -> dict[TopicPartition, KafkaError | None]:
            v = conn.pick_version(8, 9, 2)
            by_topic: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
            for tp, val in offsets.items():
                by_topic[tp[0]].append(entry(TopicPartition(*tp), val))
            resp = await conn.request(8, v, {
                "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
            return _partition_errors(resp.topics, group_id)
        out = await self._coordinator_call(group_id, commit)
        return _finish(out, raise_on_error)

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                                            *, raise_on_error: bool = True
                                            ) -> dict[TopicPartition, KafkaError | None]:
        """Delete committed offsets (OffsetDelete). Kafka refuses partitions of topics the
        group is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC)."""
        by_topic: defaultdict[str, list[dict[str, int]]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp[0]].append({"partition_index": tp[1]})

        async def delete(conn: BrokerConnection) -> dict[TopicPartition, KafkaError | None]:
            v = conn.pick_version(47, 0, 0)
            resp = await conn.request(47, v, {"group_id": group_id, "topics": [
                {"name": t, "partitions": ps} for t, ps in by_topic.items()]})
            raise_for_code(resp.error_code, f"OffsetDelete {group_id!r}")
            return _partition_errors(resp.topics, group_id)
        return _finish(await self._coordinator_call(group_id, delete), raise_on_error)

    # -- groups --------------------------------------------------------------------------
    async def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Groups known to any broker (ListGroups is asked of every broker), sorted by id.
        ``states`` filters by state (e.g. ``["Stable", "Empty"]``; needs ListGroups v4)."""
        states = list(states or [])
        md = await self.metadata(topics=[])

        async def one(node_id: int) -> list[GroupListing]:
            async def attempt() -> list[GroupListing]:
                conn = await self._conn_for_node(node_id)
                v = conn.pick_version(16, 5, 4 if states else 0)
                resp = await conn.request(16, v, {"states_filter": states, "types_filter": []})
                raise_for_code(resp.error_code, f"ListGroups on broker {node_id}")
                return [GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None),
                                     getattr(g, "group_type", None)) for g in resp.groups]
            return await self._with_retries(attempt)
        found = await asyncio.gather(*(one(n) for n in md.brokers))
        merged = {g.group_id: g for gs in found for g in gs}
        return [merged[k] for k in sorted(merged)]

    async def describe_groups(self, group_ids: Iterable[str], *, raise_on_error: bool = True
                              ) -> dict[str, GroupDescription | KafkaError]:
        """Describe classic groups, batched per coordinator. A group that does not exist
        is reported as state ``Dead`` with no members (DescribeGroups v0-v5) or as
        GROUP_ID_NOT_FOUND (v6+, KIP-1043; also for a share group). Raises the first
        group-level error, or with ``raise_on_error=False`` returns it as that group's
        value."""
        async def send(conn: BrokerConnection, gs: list[str]) -> dict[str, Any]:
            v = conn.pick_version(15, 6, 0)
            resp = await conn.request(15, v, {"groups": gs, "include_authorized_operations": False})
            return {g.group_id: _describe(g, conn.node_id) for g in resp.groups}
        res = await self._per_coordinator(list(group_ids), send)
        return _finish(res, raise_on_error)

    async def delete_groups(self, group_ids: Iterable[str], *, raise_on_error: bool = True
                            ) -> dict[str, KafkaError | None]:
        """Delete groups (they must be empty: NON_EMPTY_GROUP otherwise)."""
        async def send(conn: BrokerConnection, gs: list[str]) -> dict[str, Any]:
            v = conn.pick_version(42, 2, 0)
            resp = await conn.request(42, v, {"groups_names": gs})
            return {r.group_id: None if r.error_code == 0 else error_for(r.error_code, r.group_id)
                    for r in resp.results}
        return _finish(await self._per_coordinator(list(group_ids), send), raise_on_error)

    async def lag(self, group_id: str, *, isolation_level: str = "read_uncommitted"
                  ) -> dict[TopicPartition, PartitionLag]:
        """Per-partition lag of ``group_id``; see :func:`hightide.client.lag.group_lag`."""
        return await group_lag(self, group_id, isolation_level=isolation_level)


    async def lags(self, group_ids: Iterable[str], *, isolation_level: str = "read_uncommitted"
                   ) -> dict[str, dict[TopicPartition, PartitionLag] | KafkaError]:
        """Lag of several groups from one consistent pass; see
        :func:`hightide.client.lag.groups_lag`."""
        return await groups_lag(self, list(group_ids), isolation_level=isolation_level)

def _finish(results: dict[Any, Any], raise_on_error: bool) -> dict[Any, Any]:
    if raise_on_error:
        for r in results.values():
            if isinstance(r, KafkaError):
                raise r
    return results


def _partition_errors(topics: Any, group_id: str) -> dict[TopicPartition, KafkaError | None]:
    """Per-partition results; a coordinator error on any partition (older brokers put
    group errors there) is raised so the whole call is retried."""
    out: dict[TopicPartition, KafkaError | None] = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code in _RETRY_GROUP:
                raise error_for(p.error_code, group_id)
            out[TopicPartition(t.name, int(p.partition_index))] = (
                None if p.error_code == 0 else error_for(p.error_code, f"{t.name}-{p.partition_index}"))
    return out


def _offset_fetch_decoder(version: int) -> Callable[[bytes | memoryview], Any]:
    """OffsetFetch responses are decoded by hand (struct-based, extension tags included):
    a lag scrape reads tens of thousands of partitions from them."""
    return lambda frame: decode_offset_fetch_response(version, frame)


def _parse_offset_fetch(groups: list[GroupTuple], version: int, group_id: str,
                        wanted: list[TopicPartition] | None) -> dict[TopicPartition, OffsetAndMetadata]:
    """``group_id``'s committed offsets from a decoded OffsetFetch response (see
    :func:`hightide.protocol.offset_fetch_response.decode_offset_fetch_response`)."""
    group = next((g for g in groups if g[0] == group_id), None) if version >= 8 else groups[0]
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, offset, metadata, epoch, hw, lso, lst in _committed_rows(group, group_id, wanted is None):
        out[tp] = OffsetAndMetadata(offset, metadata, epoch, hw, lso, lst)
    for tp in wanted or ():
        out.setdefault(tp, OffsetAndMetadata(-1))
    return out


CommittedRow = tuple[TopicPartition, int, "str | None", int, "int | None", "int | None", "int | None"]
"""(partition, committed offset, metadata, leader epoch, high watermark, log start, LSO)."""


def _committed_rows(group: GroupTuple | None, group_id: str, only_committed: bool,
                    tps: dict[str, dict[int, TopicPartition]] | None = None) -> list[CommittedRow]:
    """The partitions of ``group`` (``group_id``'s entry in a decoded OffsetFetch
    response, None if missing) as plain tuples (offset -1 for UNKNOWN_TOPIC_OR_PARTITION;
    partitions without a commit skipped when ``only_committed``). Raises the group-level
    error, and any partition error other than UNKNOWN_TOPIC_OR_PARTITION (coordinator
    errors so that the group is retried). ``tps`` caches TopicPartition objects by topic
    and partition, to share them between the groups of one response."""
    if group is None:
        raise KafkaError(ErrorCode.unknown_server_error, f"OffsetFetch: no answer for {group_id!r}")
    _, code, topics = group
    raise_for_code(code, f"OffsetFetch {group_id!r}")
    out: list[CommittedRow] = []
    append = out.append
    unknown = ErrorCode.unknown_topic_or_partition
    if tps is None:
        tps = {}
    for name, parts in topics:
        cache = tps.get(name)
        if cache is None:
            cache = tps[name] = {}
        for partition, offset, epoch, metadata, error, hw, lso, lst in parts:
            if error:
                if error in _RETRY_GROUP:
                    raise error_for(error, f"{group_id} {name}-{partition}")
                if error != unknown:
                    raise error_for(error, f"OffsetFetch {group_id!r} {name}-{partition}")
                offset = -1
            if only_committed and offset < 0:
                continue
            tp = cache.get(partition)
            if tp is None:
                tp = cache[partition] = TopicPartition(name, partition)
            append((tp, offset, metadata, epoch, hw, lso, lst))
    return out


def _describe(g: Any, node_id: int | None) -> GroupDescription | KafkaError:
    if g.error_code != ErrorCode.none:
        return error_for(g.error_code, f"{g.group_id}: {getattr(g, 'error_message', None) or ''}")
    members = tuple(MemberDescription(m.member_id, m.client_id, m.client_host,
                                      getattr(m, "group_instance_id", None),
                                      bytes(m.member_metadata), bytes(m.member_assignment))
                    for m in g.members)
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members,
                            -1 if node_id is None else node_id)
