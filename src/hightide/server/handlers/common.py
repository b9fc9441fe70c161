"""Helpers shared by the handlers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorized_operations, refused_names
from ...protocol.errors import ErrorCode
from ..context import RequestContext
from ...coordinator.internal_topic import CoordinatorUnavailable
from ..leadership import not_leader

if TYPE_CHECKING:
    from ...log.partition_log import PartitionLog

LEADER_EPOCH = 0  # single node: every partition is in leader epoch 0


def check_leader_epoch(current_leader_epoch: int, partition_epoch: int = LEADER_EPOCH) -> ErrorCode:
    """Kafka's leader-epoch fencing: a client that knows a newer epoch gets
    UNKNOWN_LEADER_EPOCH, an older one FENCED_LEADER_EPOCH; -1 skips the check."""
    if current_leader_epoch < 0 or current_leader_epoch == partition_epoch:
        return ErrorCode.none
    if current_leader_epoch > partition_epoch:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.fenced_leader_epoch


def resolve_partition(ctx: RequestContext, topic: str, partition: int) -> tuple[PartitionLog | None, ErrorCode]:
    """(log, error). The error is UNKNOWN_TOPIC_OR_PARTITION when the topic or the
    partition does not exist, NOT_LEADER_OR_FOLLOWER when another broker (or none) leads it
    or its log is still loading (:func:`missing_log_error`)."""
    t = ctx.image.topics.get(topic)
    if t is None or partition not in t.partitions:
        return None, ErrorCode.unknown_topic_or_partition
    if not_leader(ctx, t, partition) is not None:
        return None, ErrorCode.not_leader_or_follower
    plog = ctx.logs.partition_log(topic, partition)
    if plog is None:
        return None, missing_log_error(ctx, topic, partition, ErrorCode.unknown_topic_or_partition)
    return plog, ErrorCode.none


def missing_log_error(ctx: RequestContext, topic: str, partition: int, otherwise: ErrorCode) -> ErrorCode:
    """The answer for a partition led here (in the image) whose log is not open:
    NOT_LEADER_OR_FOLLOWER while it is still loading at start-up (retriable: Kafka's
    ``ReplicaManager`` answers so for a partition in the metadata that is not online on
    the broker yet), else ``otherwise`` (its files could not be opened)."""
    return ErrorCode.not_leader_or_follower if ctx.logs.loading(topic, partition) else otherwise


def offsets_available(ctx: RequestContext, topic: str, partition: int) -> bool:
    """False while this node is a new leader of the partition whose high watermark has
    not reached the start of its leader epoch (ListOffsets, Fetch and OffsetFetch's tags
    then answer without the end of the log, so it never goes back across a leader
    change)."""
    replicas = ctx.services.replicas
    return replicas is None or replicas.offsets_available(topic, partition)


INT32_MIN = -2**31  # authorized operations not requested


def assignment(named: Iterable[tuple[uuid.UUID, str, list[int]]]) -> dict:
    """A described member's assignment: ``((topic_id, topic_name, partitions), ...)`` on the wire."""
    return {"topic_partitions": [{"topic_id": tid, "topic_name": name, "partitions": parts}
                                 for tid, name, parts in named]}


def _described_failure(group_id: str, code: ErrorCode, message: str | None) -> dict:
    return {"group_id": group_id, "error_code": code, "error_message": message, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": INT32_MIN}


def describe_group(ctx: RequestContext, group_id: str, describe: Callable[[Any, Any], dict | None], kind: str,
                   members: Callable[[list[dict]], list[dict]], include_authorized_operations: bool = False) -> dict:
    """One DescribedGroup of ConsumerGroupDescribe / ShareGroupDescribe: ``describe(shard,
    topics)`` gives the group as a dict (None if there is no such group of this ``kind``),
    ``members`` shapes its members for the wire. Unknown groups and groups of another
    type answer GROUP_ID_NOT_FOUND, as Kafka ("Group X is not a share group.").
    AuthorizedOperations: with ``include_authorized_operations``, a described group
    carries every group operation (Kafka without an authorizer); failed groups, and
    requests that did not ask, carry INT32_MIN ("omitted"), as Kafka's KafkaApis.
    Authorization as Kafka: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED); a
    group whose members subscribe to or are assigned a topic the principal may not
    DESCRIBE answers TOPIC_AUTHORIZATION_FAILED without its members."""
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return _described_failure(group_id, ErrorCode.group_authorization_failed, None)
    if not group_id:
        return _described_failure(group_id, ErrorCode.invalid_group_id, "The group id must not be empty.")
    runtime = ctx.groups
    try:
        shard = runtime.shard_for(group_id)
    except CoordinatorUnavailable as exc:
        return _described_failure(group_id, exc.error_code, str(exc))
    d = describe(shard, runtime.topics())
    if d is None:
        what = f"is not a {kind} group" if shard.group_exists(group_id) else "not found"
        return _described_failure(group_id, ErrorCode.group_id_not_found, f"Group {group_id} {what}.")
    if refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, _described_topics(d["members"])):
        return {**d, "error_code": ErrorCode.topic_authorization_failed, "members": [], "error_message":
                "The group has described topic(s) that the client is not authorized to describe.",
                "authorized_operations": INT32_MIN}
    return {**d, "error_code": ErrorCode.none, "error_message": None, "members": members(d["members"]),
            "authorized_operations": authorized_operations(ctx, ResourceType.GROUP, group_id)
            if include_authorized_operations else INT32_MIN}


def _described_topics(members: list[dict]) -> Iterator[str]:
    """Every topic a described group's members subscribe to or are (to be) assigned."""
    for m in members:
        yield from m.get("subscribed_topic_names") or ()
        for key in ("assignment", "target_assignment"):
            for _, name, _ in m.get(key) or ():
                yield name
