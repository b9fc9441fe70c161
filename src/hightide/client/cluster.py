"""Cluster-view calls on one connection: DescribeCluster (60) and DescribeQuorum (55).

They take a :class:`~hightide.client.connection.BrokerConnection` rather than an
:class:`~hightide.client.admin.AdminClient` because they must also work against a
controller (KIP-919 ``--bootstrap-controller``), which answers neither Metadata nor the
other broker APIs the admin client starts with. Both work against hightide and Kafka.
:func:`active_controller` finds the active controller of a quorum (only it answers
DescribeQuorum; the others answer NOT_LEADER_OR_FOLLOWER naming the leader).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..aio.transport import LOOP_TRANSPORT, Transport
from .connection import BrokerConnection
from .errors import ErrorCode, KafkaError, error_for, unreachable
from .properties import ClientSecurity

__all__ = ["ClusterBroker", "ClusterDescription", "QuorumInfo", "QuorumReplica", "active_controller",
           "applied_offset", "connect_any",
           "describe_cluster", "describe_quorum", "lowest_acknowledged", "METADATA_TOPIC", "add_raft_voter",
           "remove_raft_voter"]

METADATA_TOPIC = "__cluster_metadata"
_BROKERS, _CONTROLLERS = 1, 2  # DescribeCluster EndpointType (KIP-919)


@dataclass(frozen=True, slots=True)
class ClusterBroker:
    """One node as DescribeCluster lists it. ``fenced`` is None when the answering node's
    version of DescribeCluster cannot say (below v2: only unfenced brokers are listed)."""

    node_id: int
    host: str
    port: int
    rack: str | None
    fenced: bool | None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """A DescribeCluster answer. ``brokers`` are controllers when it was asked of a
    controller (``controllers=True``)."""

    cluster_id: str
    controller_id: int
    brokers: tuple[ClusterBroker, ...]
    includes_fenced: bool


@dataclass(frozen=True, slots=True)
class QuorumReplica:
    """One voter or observer of the metadata partition (DescribeQuorum's ReplicaState).
    Timestamps are ms since the epoch, -1 when unknown; ``directory_id`` None below v2."""

    node_id: int
    directory_id: uuid.UUID | None
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """DescribeQuorum of ``__cluster_metadata-0``: the leader, its high watermark, the
    voters and observers; ``nodes`` maps a voter id to its listeners (v2 only)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[QuorumReplica, ...]
    observers: tuple[QuorumReplica, ...]
    nodes: dict[int, tuple[tuple[str, str, int], ...]]


async def connect_any(servers: list[tuple[str, int]], *, timeout_s: float = 15.0,
                      security: ClientSecurity | None = None, transport: Transport = LOOP_TRANSPORT
                      ) -> BrokerConnection:
    """A connection to the first reachable of ``servers`` (ApiVersions done; TLS/SASL per
    ``security``; opened through ``transport``). Raises :class:`~hightide.client.errors.KafkaConnectionError` naming
    every failure."""
    errors: list[tuple[str, KafkaError]] = []
    for host, port in servers:
        conn = BrokerConnection(host, port, "hightide-admin", request_timeout_s=timeout_s, security=security,
                                transport=transport)
        try:
            await conn.connect()
            return conn
        except KafkaError as exc:
            errors.append((f"{host}:{port}", exc))
    raise unreachable(errors)


async def describe_cluster(conn: BrokerConnection, *, controllers: bool = False,
                           include_fenced: bool = True) -> ClusterDescription:
    """DescribeCluster on ``conn``: the brokers (``controllers=False``) or, asked of a
    controller, the controllers (KIP-919, needs v1). ``include_fenced`` lists fenced
    brokers too where the node supports v2 (KIP-1073); otherwise only unfenced ones and
    ``fenced`` is None. Raises the answer's error (e.g. UNSUPPORTED_ENDPOINT_TYPE when a
    broker is asked for controllers) as :class:`KafkaError`."""
    v = conn.pick_version(60, 2, 1 if controllers else 0)
    body: dict[str, Any] = {"include_cluster_authorized_operations": False}
    if v >= 1:
        body["endpoint_type"] = _CONTROLLERS if controllers else _BROKERS
    if v >= 2:
        body["include_fenced_brokers"] = include_fenced
    resp = await conn.request(60, v, body)
    if resp.error_code != ErrorCode.none:
        raise error_for(resp.error_code, resp.error_message or f"DescribeCluster on {conn.host}:{conn.port}")
    brokers = tuple(sorted((ClusterBroker(int(b.broker_id), b.host, int(b.port), b.rack,
                                          bool(b.is_fenced) if v >= 2 else None)
                            for b in resp.brokers), key=lambda b: b.node_id))
    return ClusterDescription(resp.cluster_id, int(resp.controller_id), brokers, v >= 2 and include_fenced)


def _replica(r: Any) -> QuorumReplica:
    return QuorumReplica(int(r.replica_id), getattr(r, "replica_directory_id", None), int(r.log_end_offset),
                         int(getattr(r, "last_fetch_timestamp", -1)), int(getattr(r, "last_caught_up_timestamp", -1)))


async def describe_quorum(conn: BrokerConnection) -> QuorumInfo:
    """DescribeQuorum of ``__cluster_metadata-0`` on ``conn`` (a controller, or a node
    that answers it: hightide's single node, a Kafka broker that forwards it). Raises
    :class:`~hightide.client.errors.UnsupportedVersionError` when ``conn`` does not
    offer the API, and the answer's error (top level or partition) as :class:`KafkaError`
    (NOT_LEADER_OR_FOLLOWER from a controller that does not lead the quorum: see
    :func:`active_controller`)."""
    answer = await _describe_quorum(conn)
    if isinstance(answer, QuorumInfo):
        return answer
    raise error_for(answer.code, answer.message)


@dataclass(frozen=True, slots=True)
class _NotAnswered:
    code: int
    message: str
    leader_id: int  # the leader the answering controller knows (-1: none)
    nodes: dict[int, tuple[tuple[str, str, int], ...]]


async def _describe_quorum(conn: BrokerConnection) -> QuorumInfo | _NotAnswered:
    v = conn.pick_version(55, 2, 0)
    resp = await conn.request(55, v, {"topics": [{"topic_name": METADATA_TOPIC,
                                                  "partitions": [{"partition_index": 0}]}]})
    nodes = {int(n.node_id): tuple((x.name, x.host, int(x.port)) for x in n.listeners)
             for n in getattr(resp, "nodes", ())}
    if resp.error_code != ErrorCode.none:
        return _NotAnswered(int(resp.error_code), getattr(resp, "error_message", None) or "DescribeQuorum", -1, nodes)
    for t in resp.topics:
        for p in t.partitions:
            if t.topic_name != METADATA_TOPIC or int(p.partition_index) != 0:
                continue
            if p.error_code != ErrorCode.none:
                return _NotAnswered(int(p.error_code), getattr(p, "error_message", None) or f"{METADATA_TOPIC}-0",
                                    int(p.leader_id), nodes)
            return QuorumInfo(int(p.leader_id), int(p.leader_epoch), int(p.high_watermark),
                              tuple(_replica(r) for r in p.current_voters),
                              tuple(_replica(r) for r in p.observers), nodes)
    raise KafkaError(ErrorCode.unknown_server_error, f"DescribeQuorum answered without {METADATA_TOPIC}-0")


_NOT_ACTIVE = (int(ErrorCode.not_leader_or_follower), int(ErrorCode.not_controller))


async def active_controller(servers: list[tuple[str, int]], *, timeout_s: float = 15.0,
                            security: ClientSecurity | None = None, transport: Transport = LOOP_TRANSPORT
                            ) -> tuple[BrokerConnection, QuorumInfo]:
    """A connection to the active controller among ``servers`` (KIP-919's
    ``--bootstrap-controller``: any of the controllers) and its DescribeQuorum answer.

    The servers are asked in turn. A controller that does not lead answers
    NOT_LEADER_OR_FOLLOWER (Kafka's answer) naming the leader it knows: that leader's
    endpoint (from the answer's Nodes, else the controllers DescribeCluster lists) is
    asked next. While nobody leads (an election), every server is asked again every
    200 ms until ``timeout_s``. Against a single controller or a node that answers
    DescribeQuorum itself this is one round trip. Raises
    :class:`~hightide.client.errors.KafkaConnectionError` ("cannot reach ...")
    when no server could be reached in a round, :class:`~hightide.client.errors.UnsupportedVersionError` when one does not
    offer DescribeQuorum, and the last error (e.g. NOT_LEADER_OR_FOLLOWER) at the
    timeout. Connections are opened through ``transport``."""
    from .errors import KafkaConnectionError, KafkaTimeoutError
    deadline = time.monotonic() + timeout_s
    last: KafkaError | None = None
    while True:
        pending = list(servers)
        seen: set[tuple[str, int]] = set()
        down: list[tuple[str, KafkaError]] = []
        while pending:
            host, port = pending.pop(0)
            if (host, port) in seen:
                continue
            seen.add((host, port))
            conn = BrokerConnection(host, port, "hightide-admin", security=security, transport=transport,
                                    request_timeout_s=max(1.0, min(5.0, deadline - time.monotonic())))
            try:
                await conn.connect()
                answer = await _describe_quorum(conn)
                if isinstance(answer, QuorumInfo):
                    return conn, answer
                if answer.code not in _NOT_ACTIVE:
                    raise error_for(answer.code, answer.message)
                last = error_for(answer.code, f"{host}:{port}: {answer.message}")
                leader = await _leader_endpoint(conn, answer)
                if leader is not None:
                    pending.insert(0, leader)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:  # down or paused: the next one
                last = exc
                down.append((f"{host}:{port}", exc))
            except KafkaError:
                await conn.close()
                raise
            await conn.close()
        if len(down) == len(seen):  # nobody answered at all: no point in waiting
            raise unreachable(down)
        if time.monotonic() >= deadline:
            raise last or KafkaConnectionError("no server to ask")
        await asyncio.sleep(0.2)


async def _leader_endpoint(conn: BrokerConnection, answer: _NotAnswered) -> tuple[str, int] | None:
    """Where the leader named in ``answer`` listens: its Nodes entry, else the
    controller DescribeCluster lists with that id; None when no leader is known."""
    if answer.leader_id < 0:
        return None
    listeners = answer.nodes.get(answer.leader_id)
    if listeners:
        return listeners[0][1], listeners[0][2]
    try:
        desc = await describe_cluster(conn, controllers=True)
    except KafkaError:
        return None
    return next(((b.host, b.port) for b in desc.brokers if b.node_id == answer.leader_id), None)


def applied_offset(replica: QuorumReplica) -> int | None:
    """A broker's applied metadata offset from its fetch position as the controller
    reports it (an observer's LogEndOffset): a hightide broker fetches offset N only
    after applying everything below N, so it is LogEndOffset - 1. None before a fetch."""
    return replica.log_end_offset - 1 if replica.log_end_offset > 0 else None


def lowest_acknowledged(quorum: QuorumInfo, fenced: Mapping[int, bool] | None) -> int | None:
    """The lowest applied offset among the unfenced brokers (``fenced``: broker id →
    fenced, from DescribeCluster v2) — the seed-004 value as the controller's fetch view
    shows it (it may run one heartbeat ahead of what heartbeat responses carry). None
    when ``fenced`` is unknown, no broker is unfenced, or an unfenced broker has not
    fetched yet."""
    if fenced is None:
        return None
    offsets = [applied_offset(o) for o in quorum.observers if fenced.get(o.node_id) is False]
    if not offsets or any(x is None for x in offsets):
        return None
    return min(x for x in offsets if x is not None)


async def add_raft_voter(conn: BrokerConnection, voter_id: int, directory_id: uuid.UUID,
                         listeners: list[tuple[str, str, int]], *, cluster_id: str | None = None,
                         timeout_ms: int = 30_000) -> None:
    """AddRaftVoter (80, KIP-853) on ``conn`` (the active controller, or a broker that
    forwards it): add ``voter_id`` (its metadata dir's ``directory_id``) reachable at
    ``listeners`` (name, host, port); returns once the new voter set is committed. Raises
    the answer's error as :class:`KafkaError` (UnsupportedVersionError when ``conn`` does
    not offer the API)."""
    v = conn.pick_version(80, 0, 0)
    resp = await conn.request(80, v, {
        "cluster_id": cluster_id, "timeout": timeout_ms, "voter_id": voter_id, "voter_directory_id": directory_id,
        "listeners": [{"name": n, "host": h, "port": p} for n, h, p in listeners]},
        timeout_s=timeout_ms / 1000 + 5)
    if resp.error_code != ErrorCode.none:
        raise error_for(resp.error_code, resp.error_message or f"AddRaftVoter of {voter_id}")


async def remove_raft_voter(conn: BrokerConnection, voter_id: int, directory_id: uuid.UUID, *,
                            cluster_id: str | None = None) -> None:
    """RemoveRaftVoter (81, KIP-853) on ``conn``: remove voter ``voter_id`` whose metadata
    dir is ``directory_id``; returns once the new voter set is committed. Raises the
    answer's error as :class:`KafkaError`."""
    v = conn.pick_version(81, 0, 0)
    resp = await conn.request(81, v, {"cluster_id": cluster_id, "voter_id": voter_id,
                                      "voter_directory_id": directory_id}, timeout_s=35.0)
    if resp.error_code != ErrorCode.none:
        raise error_for(resp.error_code, resp.error_message or f"RemoveRaftVoter of {voter_id}")
