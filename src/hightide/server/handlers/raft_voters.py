"""AddRaftVoter (80) and RemoveRaftVoter (81): KIP-853's controller membership changes.

A controller listener of a controller quorum serves them (``kafka-metadata-quorum
--bootstrap-controller ... add-controller / remove-controller``, ``hightide
metadata-quorum add-controller / remove-controller``); a broker forwards them to the
active controller (:data:`~hightide.node.forwarding.FORWARDED`), as Kafka's brokers do.
AddRaftVoter v0-v1 (v1: ``AckWhenCommitted``, Kafka 4.0), RemoveRaftVoter v0.

The leader's Raft core decides (:class:`~hightide.cluster.raft.RaftCore`, Kafka's
AddVoterHandler / RemoveVoterHandler): one change at a time, only once the leader has
committed an entry of its epoch and the previous change, only for a dynamic quorum
(``kraft.version`` 1), and a voter is added only while it fetches from the leader as a
caught-up observer with the same directory id. The answer comes once the new voter set
is committed (AddRaftVoter v1 with ``AckWhenCommitted`` false: once it is appended).

Errors (Kafka's): CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster,
INCONSISTENT_CLUSTER_ID, INVALID_REQUEST (no directory id or no listener for the new
voter), NOT_LEADER_OR_FOLLOWER on a controller that does not lead (a broker's forwarding
tries the next one), UNSUPPORTED_VERSION for a static quorum (``kraft.version`` 0: the
single node, ``controller.quorum.voters``), DUPLICATE_VOTER, VOTER_NOT_FOUND,
REQUEST_TIMED_OUT (a change or the epoch's first commit pending, an observer not caught
up, or the change not known to be committed in time: it may still commit).

UpdateRaftVoter (82) is not served: a voter's endpoints are the ones it was added with
(remove and add it again to change them).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ...cluster.raft import AddVoter, RemoveVoter, VoterNode
from ...cluster.raft.batches import uuid_text
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...node.controller_service import ControllerService
    from ...protocol.views.add_raft_voter import AddRaftVoterRequest
    from ...protocol.views.remove_raft_voter import RemoveRaftVoterRequest

__all__ = ["add_raft_voter", "remove_raft_voter", "controller_add_raft_voter", "controller_remove_raft_voter",
           "REMOVE_TIMEOUT_S"]

#: RemoveRaftVoter has no timeout field: the controller waits this long for the commit
#: (Kafka's default request.timeout.ms of an admin client).
REMOVE_TIMEOUT_S = 30.0
STATIC = "The voter set of this quorum is static (kraft.version 0): voters cannot be added or removed."


def _answer(api_key: int, ctx: RequestContext, code: ErrorCode, message: str | None) -> Any:
    return materialize(response_schema(api_key, ctx.version), {"throttle_time": 0, "error_code": code,
                                                               "error_message": message})


def _refused(api_key: int, ctx: RequestContext, cluster_id: str | None) -> Any | None:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _answer(api_key, ctx, ErrorCode.cluster_authorization_failed,
                       MESSAGES[ErrorCode.cluster_authorization_failed])
    if cluster_id is not None and cluster_id != ctx.identity.cluster_id:
        return _answer(api_key, ctx, ErrorCode.inconsistent_cluster_id,
                       f"The cluster id {cluster_id} is not this cluster's ({ctx.identity.cluster_id}).")
    return None


def _directory(value: uuid.UUID | None) -> str:
    return uuid_text(value.bytes) if value is not None else ""


@handles(80, 0, 1)
def add_raft_voter(ctx: RequestContext, req: AddRaftVoterRequest) -> Any:
    """The single node (a static lone voter): UNSUPPORTED_VERSION."""
    return _refused(80, ctx, req.cluster_id) or _answer(80, ctx, ErrorCode.unsupported_version, STATIC)


@handles(81, 0, 0)
def remove_raft_voter(ctx: RequestContext, req: RemoveRaftVoterRequest) -> Any:
    """The single node (a static lone voter): UNSUPPORTED_VERSION."""
    return _refused(81, ctx, req.cluster_id) or _answer(81, ctx, ErrorCode.unsupported_version, STATIC)


async def controller_add_raft_voter(service: ControllerService, ctx: RequestContext, req: AddRaftVoterRequest) -> Any:
    refused = _refused(80, ctx, req.cluster_id)
    if refused is not None:
        return refused
    directory = _directory(req.voter_directory_id)
    if not directory:
        return _answer(80, ctx, ErrorCode.invalid_request, f"Voter {req.voter_id} needs its directory id.")
    endpoints = tuple((x.name, x.host, int(x.port)) for x in req.listeners)
    if not endpoints:
        return _answer(80, ctx, ErrorCode.invalid_request, f"Voter {req.voter_id} needs at least one listener.")
    timeout_s = max(0.1, req.timeout.total_seconds())
    code, message = await service.change_voters(AddVoter(VoterNode(int(req.voter_id), directory, endpoints)),
                                                timeout_s, wait_commit=bool(opt(req, "ack_when_committed", True)))
    return _answer(80, ctx, code, message)


async def controller_remove_raft_voter(service: ControllerService, ctx: RequestContext,
                                       req: RemoveRaftVoterRequest) -> Any:
    refused = _refused(81, ctx, req.cluster_id)
    if refused is not None:
        return refused
    code, message = await service.change_voters(RemoveVoter(int(req.voter_id), _directory(req.voter_directory_id)),
                                                REMOVE_TIMEOUT_S)
    return _answer(81, ctx, code, message)
