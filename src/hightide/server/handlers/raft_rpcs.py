"""The KRaft RPCs between the voters of a controller quorum, on the controller listener:
Vote (52) v2, BeginQuorumEpoch (53) v1, EndQuorumEpoch (54) v1, a voter's Fetch (1)
v17 of ``__cluster_metadata-0`` (``controller_fetch`` hands over a Fetch whose
ReplicaId is a voter) and a voter's FetchSnapshot (59) v1.

A dynamic quorum's (KIP-853) controllers that are not voters yet fetch through the core
too: a Fetch carrying a ReplicaDirectoryId (hightide's brokers send none) and a
FetchSnapshot from a replica the leader's core knows as such an observer. A Fetch answer
carries the leader's NodeEndpoints, so an observer that knows no voter finds the leader.

Each request is converted to the core's message (:mod:`hightide.cluster.raft.wire`),
stepped through the controller's :class:`~..raft_shell.RaftShell` and its answer
converted back: the core decides everything (epochs, votes, DivergingEpoch, the high
watermark). A voter's Fetch may be parked by the leader up to its MaxWaitMs.

Top-level errors (Kafka's ``KafkaRaftClient`` request validation):
CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION (only controllers talk Raft),
INCONSISTENT_CLUSTER_ID for another cluster's id, INVALID_REQUEST when the request does
not name exactly ``__cluster_metadata-0``, REQUEST_TIMED_OUT (retriable) when the shell
gives no answer in time (it is stopping, or its quorum-state write is slow).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from ...cluster.raft import messages as m
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.envelope_response import EnvelopeResponse, encode_envelope_response
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ..registry import service_handler

if TYPE_CHECKING:
    from ...node.controller_service import ControllerService
    from ...protocol.views.begin_quorum_epoch import BeginQuorumEpochRequest
    from ...protocol.views.end_quorum_epoch import EndQuorumEpochRequest
    from ...protocol.views.envelope import EnvelopeRequest
    from ...protocol.views.fetch import FetchRequest
    from ...protocol.views.fetch_snapshot import FetchSnapshotRequest
    from ...protocol.views.vote import VoteRequest

__all__ = ["vote", "begin_quorum_epoch", "end_quorum_epoch", "voter_fetch", "is_voter_fetch", "envelope_on_leader",
           "fetch_snapshot_from_voters"]

#: Kafka's own voters send these versions; the converters speak exactly them.
VOTE_VERSION, BEGIN_VERSION, END_VERSION, FETCH_VERSION, SNAPSHOT_VERSION = 2, 1, 1, 17, 1


def _top_error(api_key: int, version: int, code: ErrorCode) -> Any:
    body: dict[str, Any] = {"error_code": code, "topics": [], "responses": [], "throttle_time": 0,
                            "session_id": 0, "node_endpoints": []}
    return materialize(response_schema(api_key, version), body)


def _source(msg: m.Message) -> int:
    if isinstance(msg, (m.VoteRequest, m.FetchRequest, m.FetchSnapshotRequest)):
        return msg.replica_id
    if isinstance(msg, (m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest)):
        return msg.leader_id
    raise ValueError(f"{type(msg).__name__} is not a request")


async def _answer(service: ControllerService, ctx: RequestContext,
                  req: VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest,
                  api_key: int, cluster_id: str | None) -> Any:
    """Step ``req`` (naming ``cluster_id``) through the Raft shell and answer with the core's reply."""
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _top_error(api_key, ctx.version, ErrorCode.cluster_authorization_failed)
    if cluster_id is not None and cluster_id != ctx.identity.cluster_id:
        return _top_error(api_key, ctx.version, ErrorCode.inconsistent_cluster_id)
    raft = service.raft
    if raft is None:  # never routed: a single voter serves no Raft RPCs
        return _top_error(api_key, ctx.version, ErrorCode.unsupported_version)
    from ...cluster.raft.wire import from_kio, to_kio  # when used: Raft's kio messages cost a single node ~20 ms of start-up
    try:
        msg = from_kio(req)
        source = _source(msg)
    except ValueError:
        return _top_error(api_key, ctx.version, ErrorCode.invalid_request)
    answer = await raft.handle(source, msg)
    if answer is None:
        return _top_error(api_key, ctx.version, ErrorCode.request_timed_out)
    offset = msg.fetch_offset if isinstance(msg, m.FetchRequest) else 0
    out = to_kio(answer, records_offset=offset)
    if isinstance(answer, m.FetchResponse) and answer.leader_id >= 0:
        if answer.leader_id == service.node_id:
            host, port = ctx.identity.advertised
        else:
            host, port = service.voter_endpoints.get(answer.leader_id, ("", -1))
        if port > 0:
            out = dataclasses.replace(out, node_endpoints=(fetch_resp.NodeEndpoint(
                node_id=BrokerId(answer.leader_id), host=host, port=i32(port)),))
    return out


@service_handler(52, VOTE_VERSION, VOTE_VERSION)
async def vote(service: ControllerService, ctx: RequestContext, req: VoteRequest) -> Any:
    return await _answer(service, ctx, req, 52, req.cluster_id)


@service_handler(53, BEGIN_VERSION, BEGIN_VERSION)
async def begin_quorum_epoch(service: ControllerService, ctx: RequestContext, req: BeginQuorumEpochRequest) -> Any:
    return await _answer(service, ctx, req, 53, req.cluster_id)


@service_handler(54, END_VERSION, END_VERSION)
async def end_quorum_epoch(service: ControllerService, ctx: RequestContext, req: EndQuorumEpochRequest) -> Any:
    return await _answer(service, ctx, req, 54, req.cluster_id)


def is_voter_fetch(service: ControllerService, replica_id: int, directory_id: object = None) -> bool:
    """True if a Fetch from ``replica_id`` is Raft replication (rather than a broker
    observing the log): from a voter, or (a dynamic quorum) from a replica that names its
    ``directory_id`` or that the core knows as an observer (a controller not yet a voter)."""
    raft = service.raft
    if raft is None or replica_id == service.node_id or replica_id < 0:
        return False
    core = raft.core
    return replica_id in core.voters or (core.kraft_version >= 1 and (
        directory_id is not None or replica_id in core.observer_directory))


async def voter_fetch(service: ControllerService, ctx: RequestContext, req: FetchRequest) -> Any:
    """A voter's Fetch (v17 only: the version voters send)."""
    if ctx.version != FETCH_VERSION:
        return _top_error(1, ctx.version, ErrorCode.unsupported_version)
    return await _answer(service, ctx, req, 1, opt(req, "cluster_id", None))


async def envelope_on_leader(service: ControllerService,
                             inner: Callable[[RequestContext, EnvelopeRequest], Awaitable[Any]],
                             ctx: RequestContext, req: EnvelopeRequest) -> Any:
    """Envelope (58) on a quorum's controller: only the leader runs the forwarded
    request; any other voter answers NOT_CONTROLLER at the Envelope level (nothing was
    run: the broker sends it to the active controller)."""
    raft = service.raft
    if raft is not None and raft.role != "leader":
        return encode_envelope_response(ctx.header.correlation_id, EnvelopeResponse(None, ErrorCode.not_controller))
    return await inner(ctx, req)


async def fetch_snapshot_from_voters(service: ControllerService,
                                     inner: Callable[[RequestContext, FetchSnapshotRequest], Awaitable[Any]],
                                     ctx: RequestContext, req: FetchSnapshotRequest) -> Any:
    """FetchSnapshot (59) on a quorum's controller: a voter's (ReplicaId a voter, v1)
    is Raft's and answered by the core from the snapshot it serves; anyone else's
    (brokers) by ``inner`` from the snapshot files."""
    if not is_voter_fetch(service, int(req.replica_id)):
        return await inner(ctx, req)
    if ctx.version != SNAPSHOT_VERSION:
        return _top_error(59, ctx.version, ErrorCode.unsupported_version)
    return await _answer(service, ctx, req, 59, req.cluster_id)
