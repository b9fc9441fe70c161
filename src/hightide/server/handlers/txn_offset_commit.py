"""TxnOffsetCommit (key 28), v0-v5: offsets a transactional producer commits for a
consumer group (``send_offsets_to_transaction``). The group coordinator writes them as a
transactional batch of the producer to ``__consumer_offsets``; they stay pending (not
visible to OffsetFetch) until the transaction's COMMIT marker reaches that partition, and
are dropped on ABORT (Kafka's pendingTransactionalOffsetCommits).

First KIP-890's check: the group's offsets partition must be in the producer's ongoing
transaction (AddOffsetsToTxn); then the group checks the member as for an OffsetCommit.
When the transaction coordinator is another broker, it is asked and the request is held
until it answers (bounded; see :meth:`TransactionCoordinator.verify_held`), as Kafka's
group coordinator does; a refusal is answered as Kafka answers it (:func:`verification_error`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...group.offsets import CommitRequest
from ...group.records import OFFSETS_TOPIC
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, refused_names
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.txn_offset_commit import TxnOffsetCommitRequest


@handles(28, 0, 5)
async def handle(ctx: RequestContext, req: TxnOffsetCommitRequest) -> Any:
    """Authorization as Kafka: WRITE on the transactional id, then READ on the group (each
    refusal answers every partition), then READ on each topic (TOPIC_AUTHORIZATION_FAILED
    for its partitions, which are not committed)."""
    refused = ErrorCode.none
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        refused = ErrorCode.transactional_id_authorization_failed
    elif not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        refused = ErrorCode.group_authorization_failed
    denied = refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    commits = [CommitRequest(t.name, p.partition_index, p.committed_offset,
                             opt(p, "committed_leader_epoch", -1), p.committed_metadata)
               for t in req.topics if t.name not in denied for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                                                for t in req.topics if t.name in denied for p in t.partitions}
    try:
        group_error = refused if refused != ErrorCode.none else await _verified(ctx, req)
        if group_error == ErrorCode.none and commits:  # none left when every topic is refused
            group_error, committed = await ctx.groups.execute(req.group_id, lambda shard: shard.txn_commit_offsets(
                req.group_id, req.producer_id, req.producer_epoch, opt(req, "generation_id", -1),
                opt(req, "member_id", ""), opt(req, "group_instance_id", None), commits, ctx.now_ms,
                lambda t, p: _exists(ctx, t, p)), ctx.now_ms)
            errors.update(committed)
    except CoordinatorUnavailable as exc:
        group_error = exc.error_code
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         "error_code": refused if refused != ErrorCode.none else errors.get((t.name, p.partition_index), group_error)}
        for p in t.partitions]} for t in req.topics]
    return materialize(response_schema(28, ctx.version), {"throttle_time": 0, "topics": topics})


async def _verified(ctx: RequestContext, req: TxnOffsetCommitRequest) -> ErrorCode:
    """NONE if the group's offsets partition is in the producer's ongoing transaction,
    else the error Kafka answers (:func:`verification_error`). A group coordinated
    elsewhere answers NOT_COORDINATOR first, as Kafka checks its offsets partition before
    asking. A transaction coordinator on another broker is asked and awaited (bounded).
    Raises CoordinatorUnavailable (the offsets topic cannot be placed yet)."""
    if not req.group_id:
        return ErrorCode.invalid_group_id
    if ctx.groups.led_elsewhere(req.group_id):
        return ErrorCode.not_coordinator
    partition = ctx.groups.partition_for(req.group_id)
    code = await ctx.txns.verify_held(req.transactional_id, req.producer_id, req.producer_epoch, OFFSETS_TOPIC,
                                      partition)
    return verification_error(code, ctx.version)


#: Kafka's CoordinatorOperationExceptionHelper.handleOperationException: what
#: TxnOffsetCommit answers for an error of the verification (the rest pass unchanged)
_NORMALIZED = {
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,  # a retry without a new lookup
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}


def verification_error(code: ErrorCode, version: int) -> ErrorCode:
    """What TxnOffsetCommit ``version`` answers for the transaction coordinator's
    verification answer ``code``, as Kafka: AddPartitionsToTxnManager turns
    PRODUCER_FENCED into INVALID_PRODUCER_EPOCH and, before v4, TRANSACTION_ABORTABLE
    into INVALID_TXN_STATE; then the group coordinator normalizes a timed-out or failed
    call (NETWORK_EXCEPTION) to the retriable COORDINATOR_LOAD_IN_PROGRESS. Other
    answers (INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) pass
    unchanged."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code == ErrorCode.transaction_abortable and version < 4:
        return ErrorCode.invalid_txn_state
    return _NORMALIZED.get(code, code)


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    t = ctx.image.topics.get(topic)
    return t is not None and partition in t.partitions
