"""AddPartitionsToTxn (key 24), v0-v5.

v0-v3 (producers): one transaction; its partitions join the producer's transaction.
Partitions that do not exist answer UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED (nothing is added), as Kafka does; otherwise every partition
gets the coordinator's answer (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2).

v4+ (brokers): a batch of transactions; one marked ``verify_only`` is only checked
(KIP-890: is each partition in the ongoing transaction?), the others are added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...txn.state import TopicPartition
from ...coordinator.internal_topic import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, authorize_cluster, authorizer
from ..context import RequestContext
from ..registry import handles
from .txn_common import fenced_error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...protocol.views.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic


@handles(24, 0, 5)
async def handle(ctx: RequestContext, req: AddPartitionsToTxnRequest) -> Any:
    if ctx.version <= 3:
        txn_id, topics = opt(req, "v3_and_below_transactional_id", ""), opt(req, "v3_and_below_topics", ())
        errors = _refused(ctx, txn_id, topics) or await _one(ctx, txn_id, opt(req, "v3_and_below_producer_id", -1),
                            opt(req, "v3_and_below_producer_epoch", -1), topics, False)
        return materialize(response_schema(24, ctx.version), {
            "throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(topics, errors)})
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # v4+ come from brokers (Kafka)
        return materialize(response_schema(24, ctx.version), {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results_by_transaction": []})
    results = []
    for txn in opt(req, "transactions", ()):
        errors = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                            txn.verify_only)
        results.append({"transactional_id": txn.transactional_id,
                        "topic_results": _topic_results(txn.topics, errors)})
    return materialize(response_schema(24, ctx.version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results})


def _refused(ctx: RequestContext, transactional_id: str, topics: Sequence[AddPartitionsToTxnTopic]) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka's check of a client's (v0-v3) request: WRITE on the transactional id (every
    partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic (internal
    topics are never authorized); a refused topic fails the whole transaction: its
    partitions TOPIC_AUTHORIZATION_FAILED, unknown ones UNKNOWN_TOPIC_OR_PARTITION, the
    rest OPERATION_NOT_ATTEMPTED. None when nothing is refused."""
    a = authorizer(ctx)
    if a is None:
        return None
    parts = [(t.name, int(p)) for t in topics for p in t.partitions]
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(parts, ErrorCode.transactional_id_authorization_failed)
    image = ctx.image
    denied = {n for n in {t.name for t in topics}
              if (n in image.topics and image.topics[n].internal)
              or not a.authorize(ctx.principal, ctx.client_host, AclOperation.WRITE, ResourceType.TOPIC, n)}
    if not denied:
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in denied
            else ErrorCode.unknown_topic_or_partition if not _exists(ctx, *tp)
            else ErrorCode.operation_not_attempted for tp in parts}


async def _one(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int, topics: Sequence[AddPartitionsToTxnTopic],
               verify_only: bool) -> dict[TopicPartition, ErrorCode]:
    """The error of each partition of one transaction's request."""
    parts = [(t.name, int(p)) for t in topics for p in t.partitions]
    unknown = {tp for tp in parts if not _exists(ctx, *tp)}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in parts}
    if verify_only:
        return ctx.txns.verify_partitions(transactional_id, producer_id, producer_epoch, parts)
    try:
        code = await ctx.txns.add_partitions(transactional_id, producer_id, producer_epoch, parts)
    except CoordinatorUnavailable as exc:
        code = exc.error_code
    code = fenced_error(code, ctx.version, 2)
    return {tp: code for tp in parts}


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    t = ctx.image.topics.get(topic)
    return t is not None and partition in t.partitions


def _topic_results(topics: Sequence[AddPartitionsToTxnTopic], errors: dict[TopicPartition, ErrorCode]) -> list[dict]:
    return [{"name": t.name, "results_by_partition": [
        {"partition_index": p, "partition_error_code": errors[(t.name, int(p))]} for p in t.partitions]}
        for t in topics]
