"""The operators' transaction APIs, as Kafka's brokers answer them (``kafka-transactions.sh``,
``Admin.describeProducers/describeTransactions/listTransactions``):

* DescribeProducers (key 61, v0): per partition led here, the producers the log knows
  (Kafka's ``activeProducers``: every producer id with state in the partition's producer
  state) with their epoch, last sequence, last timestamp, the coordinator epoch of their
  last marker and the first offset of their open transaction (-1: none). A partition that
  does not exist: UNKNOWN_TOPIC_OR_PARTITION; led by another broker: NOT_LEADER_OR_FOLLOWER.
* DescribeTransactions (key 65, v0): the coordinator's committed state of each
  transactional id; unknown (or expired): TRANSACTIONAL_ID_NOT_FOUND; its
  ``__transaction_state`` partition led elsewhere: NOT_COORDINATOR; loading:
  COORDINATOR_LOAD_IN_PROGRESS.
* ListTransactions (key 66, v0-v2): every transactional id this broker coordinates,
  filtered by state names (unknown names are echoed in ``UnknownStateFilters`` and match
  nothing), producer ids, v1's duration filter (ongoing for longer than that many ms)
  and v2's transactional id pattern (a Java-style regex that must match the whole id;
  an invalid one answers INVALID_REGULAR_EXPRESSION).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ...log.producer_state import ProducerEntry
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...protocol.views import opt
from ...txn.state import TxnMetadata, TxnState
from ...coordinator.runtime import CoordinatorUnavailable
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorize, refused_names
from ..context import RequestContext
from ..registry import handles
from .common import resolve_partition

if TYPE_CHECKING:
    from ...protocol.views.describe_producers import DescribeProducersRequest
    from ...protocol.views.describe_transactions import DescribeTransactionsRequest
    from ...protocol.views.list_transactions import ListTransactionsRequest


# -- DescribeProducers -------------------------------------------------------------------------
def _producer(entry: ProducerEntry) -> dict[str, Any]:
    first = entry.current_txn_first_offset
    return {"producer_id": entry.producer_id, "producer_epoch": entry.epoch, "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp, "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": -1 if first is None else first}


def _describe_partition(ctx: RequestContext, topic: str, partition: int) -> dict[str, Any]:
    plog, code = resolve_partition(ctx, topic, partition)
    if plog is None:
        return {"partition_index": partition, "error_code": code, "error_message": None, "active_producers": []}
    entries = sorted(plog.producer_state.producers.values(), key=lambda e: e.producer_id)
    return {"partition_index": partition, "error_code": ErrorCode.none, "error_message": None,
            "active_producers": [_producer(e) for e in entries]}


@handles(61, 0, 0)
def describe_producers(ctx: RequestContext, req: DescribeProducersRequest) -> Any:
    """Needs READ on each topic (Kafka; else TOPIC_AUTHORIZATION_FAILED per partition)."""
    denied = refused_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    return materialize(response_schema(61, ctx.version), {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": int(p), "error_code": ErrorCode.topic_authorization_failed, "error_message": None,
             "active_producers": []} if t.name in denied else _describe_partition(ctx, t.name, int(p))
            for p in t.partition_indexes]}
        for t in req.topics]})


# -- DescribeTransactions ------------------------------------------------------------------------
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _timestamp(ms: int) -> datetime.datetime:
    """A datetime_i64 field's value; -1 (no transaction running) stays -1 on the wire
    (materialize would turn a negative int into null, which kio cannot encode)."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _state_of(meta: TxnMetadata) -> dict[str, Any]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in meta.sorted_partitions():
        by_topic.setdefault(topic, []).append(p)
    return {"error_code": ErrorCode.none, "transactional_id": meta.transactional_id,
            "transaction_state": meta.state.label, "transaction_timeout": meta.timeout_ms,
            "transaction_start_time": _timestamp(meta.start_ms), "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}


def _not_described(transactional_id: str, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "transactional_id": transactional_id, "transaction_state": "",
            "transaction_timeout": 0, "transaction_start_time": _timestamp(-1), "producer_id": -1, "producer_epoch": -1,
            "topics": []}


def _describe_one(ctx: RequestContext, transactional_id: str) -> dict[str, Any]:
    """Authorization as Kafka: DESCRIBE on the transactional id (else
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); only the partitions of topics the principal
    may DESCRIBE are listed."""
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _not_described(transactional_id, ErrorCode.transactional_id_authorization_failed)
    try:
        meta = ctx.txns.describe(transactional_id)
    except CoordinatorUnavailable as exc:
        return _not_described(transactional_id, exc.error_code)
    if meta is None or meta.state is TxnState.DEAD:
        return _not_described(transactional_id, ErrorCode.transactional_id_not_found)
    state = _state_of(meta)
    hidden = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t["topic"] for t in state["topics"]))
    if hidden:
        state["topics"] = [t for t in state["topics"] if t["topic"] not in hidden]
    return state


@handles(65, 0, 0)
def describe_transactions(ctx: RequestContext, req: DescribeTransactionsRequest) -> Any:
    return materialize(response_schema(65, ctx.version), {
        "throttle_time": 0, "transaction_states": [_describe_one(ctx, t) for t in req.transactional_ids]})


# -- ListTransactions ----------------------------------------------------------------------------
def _known_states(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(known state names, unknown ones) of a state filter."""
    known, unknown = [], []
    for name in names:
        try:
            TxnState.from_label(name)
        except ValueError:
            unknown.append(name)
        else:
            known.append(name)
    return known, unknown


def _listed(ctx: RequestContext, req: ListTransactionsRequest, states: list[str], pattern: re.Pattern[str] | None) -> list[TxnMetadata]:
    """The coordinator's transactions matching the request's filters. Raises
    CoordinatorUnavailable (loading)."""
    metas = ctx.txns.list_transactions(states or None, list(req.producer_id_filters) or None,
                                       int(opt(req, "duration_filter", -1)))
    return [m for m in metas if m.state is not TxnState.DEAD
            and (pattern is None or pattern.fullmatch(m.transactional_id) is not None)]


def _list_response(ctx: RequestContext, code: ErrorCode, unknown: list[str], metas: list[TxnMetadata]) -> Any:
    return materialize(response_schema(66, ctx.version), {
        "throttle_time": 0, "error_code": code, "unknown_state_filters": unknown,
        "transaction_states": [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                "transaction_state": m.state.label} for m in metas]})


@handles(66, 0, 2)
def list_transactions(ctx: RequestContext, req: ListTransactionsRequest) -> Any:
    known, unknown = _known_states(req.state_filters)
    if req.state_filters and not known:
        return _list_response(ctx, ErrorCode.none, unknown, [])  # only unknown states: nothing matches
    pattern: re.Pattern[str] | None = None
    text = opt(req, "transactional_id_pattern", None)
    if text:
        try:
            pattern = re.compile(text)
        except re.error:
            return _list_response(ctx, ErrorCode.invalid_regular_expression, unknown, [])
    try:
        metas = _listed(ctx, req, known, pattern)
    except CoordinatorUnavailable as exc:
        return _list_response(ctx, exc.error_code, unknown, [])
    hidden = refused_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                           (m.transactional_id for m in metas))  # Kafka lists only the ids it may describe
    return _list_response(ctx, ErrorCode.none, unknown, [m for m in metas if m.transactional_id not in hidden]
                          if hidden else metas)
