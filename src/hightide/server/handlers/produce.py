"""Produce (key 0), versions 3-11.

Per partition: resolve the topic, check ``min.insync.replicas`` for acks=all, apply
Kafka's LogValidator rules (:func:`hightide.log.validator.validate_produced`: the batch
header and CRC, the records only when a rule needs them, recompression to the topic's
``compression.type``; this module only maps its outcome to the answer), check the
idempotent producer's sequence, append the batch as opaque bytes with its offsets
assigned, wake long-polling fetches, and answer according to ``acks``. The batch goes
from the receive buffer to the segment file without a copy in Python (the request
decoder's records are views of the frame, see :func:`handle`):

* ``acks=0``: no response; if any partition failed the connection is closed, which is
  how Kafka tells a fire-and-forget producer something went wrong;
* ``acks=1``: answered once the batch is in the page cache, or once it is fsynced when
  the topic's ``flush.messages`` asks for it (e.g. 1);
* ``acks=-1`` (all): the same on a partition with one replica. On a partition with
  followers (cluster mode), Kafka's rules: NOT_ENOUGH_REPLICAS before appending when the
  ISR is smaller than ``min.insync.replicas`` (capped at the replica count), then the
  answer waits (Kafka's DelayedProduce, :meth:`ReplicaManager.wait_replicated`) until the
  high watermark passes the batch: REQUEST_TIMED_OUT after the request's ``timeout``,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
  NOT_LEADER_OR_FOLLOWER if leadership moved.

A transactional batch whose producer has no open transaction in the partition yet is
verified with the transaction coordinator first (KIP-890, :func:`_unverified_transaction`).
When that coordinator is another broker, the partition is held until it answers, as
Kafka's ReplicaManager holds the produce (``handleProduceAppend``): its batch is copied
out of the receive buffer (the only copy, once per transaction and partition), and when
the answer comes (:class:`_Held`) the partition goes through every check again and is
appended or refused; the other partitions of the request are appended at once and the
answer waits for the held ones. Produces held on one question are appended in arrival
order. Nothing of this runs for batches that need no question.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ...log.config import LogConfig
from ...log.partition_log import PartitionLog
from ...log.producer_state import ProducerStateError
from ...log.transactions import verification_error_for_produce
from ...log.validator import RecordErrors, validate_produced
from ...protocol.produce_response import encode_produce_response
from ...protocol.errors import ErrorCode
from ...protocol.records import Buffer, BatchHeader, InvalidRecords
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorizer
from ..context import RequestContext
from .common import missing_log_error
from ..leadership import NotLeader, node_endpoints, not_leader
from ..registry import CloseConnection, RawResponse, handles
from ..quotas import produce_throttle, record_request_time
from ...coordinator.txn_verify import answer_of

if TYPE_CHECKING:
    from ...protocol.views.produce import ProduceRequest
    from ...replica.manager import LeaderPartition, ReplicaManager

Replicated = tuple[str, dict, "asyncio.Future[ErrorCode]"]
"""(topic, partition response) whose acks=all answer waits for the high watermark."""

log = logging.getLogger("hightide.produce")

#: A backstop for a held partition: verifiers bound their own questions
#: (:class:`~hightide.coordinator.txn_verify.RemoteTxnVerifier`: the inter-broker request timeout, 10 s).
HELD_VERIFICATION_MAX_S = 30.0


def _not_enough_replicas(cfg: LogConfig, led: LeaderPartition | None, topic: str, partition: int) -> str | None:
    """Kafka's min.insync.replicas check for acks=all, before the batch is validated
    (Partition.appendRecordsToLeader): the refusal's message, or None. A partition with
    one replica has an ISR of 1; ``led``: the ISR of one with followers, against
    min(min.insync.replicas, replicas) as Kafka 3.7+."""
    if led is not None:
        return led.state.not_enough_replicas(f"{topic}-{partition}")
    if cfg.min_insync_replicas > 1:
        return (f"The size of the current ISR 1 is insufficient to satisfy the min.isr requirement "
                f"of {cfg.min_insync_replicas}")
    return None


def _unverified_transaction(ctx: RequestContext, transactional_id: str | None, plog: PartitionLog, h: BatchHeader,
                           topic: str, partition: int, verified: ErrorCode | None
                           ) -> tuple[ErrorCode, str] | asyncio.Future[ErrorCode] | None:
    """KIP-890 part 1: (error, message) when a transactional batch may not be appended,
    None when it may, or the coordinator's pending answer to hold the partition on. A
    producer with an open transaction of this epoch in the partition needs no check (as
    in Kafka); otherwise the transaction coordinator must confirm the partition is in its
    ongoing transaction (``verified``: its answer, already awaited). Without a
    transactional id Kafka refuses transactional records as
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    if transactional_id is None:
        return (ErrorCode.transactional_id_authorization_failed,
                "transactional records need the produce request's transactional id")
    if plog.has_ongoing_transaction(h.producer_id, h.producer_epoch):
        return None
    err = ctx.txn_verifier.verify(transactional_id, h.producer_id, h.producer_epoch, topic, partition) \
        if verified is None else verified
    if not isinstance(err, int):
        question = asyncio.ensure_future(err)
        if not question.done():
            return question
        err = answer_of(question)
    return None if err == ErrorCode.none else verification_error_for_produce(ErrorCode(err))


class _Held:
    """A partition held until its transaction coordinator answers (see the module doc).
    The question's done callback (registered when the produce arrived, so produces held
    on one question run in arrival order): the partition is appended or refused
    (:func:`_append_partition` again with the answer), ``resp`` updated in place and
    ``appended`` resolved. :meth:`drop`: the answer came too late or the request is gone;
    nothing is appended."""

    __slots__ = ("ctx", "topic", "partition", "records", "acks", "transactional_id", "resp", "question",
                 "appended", "plog", "wait")

    def __init__(self, ctx: RequestContext, topic: str, partition: int, records: Buffer, acks: int,
                 transactional_id: str | None, resp: dict, question: asyncio.Future[ErrorCode]) -> None:
        self.ctx, self.topic, self.partition, self.acks = ctx, topic, partition, acks
        self.transactional_id, self.resp, self.question = transactional_id, resp, question
        # out of the receive buffer (valid only during the handler's synchronous part);
        # a writable view, so the log patches it in place without another copy
        self.records: Buffer | None = records if isinstance(records, bytes) else memoryview(bytearray(records))
        self.appended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.plog: PartitionLog | None = None
        self.wait: asyncio.Future[ErrorCode] | None = None
        question.add_done_callback(self)

    def __call__(self, question: asyncio.Future[ErrorCode]) -> None:
        if self.appended.done():
            return
        records, self.records = self.records, None
        try:
            resp, self.plog, self.wait = _append_partition(self.ctx, self.topic, self.partition, records, self.acks,
                                                           self.transactional_id, verified=answer_of(question))
        except Exception:  # not expected: _append_partition answers errors; never lose the request
            log.exception("appending the held batch of %s-%d failed", self.topic, self.partition)
            resp = {"error_code": ErrorCode.unknown_server_error, "error_message": "append failed"}
        self.resp.update(resp)
        self.appended.set_result(None)

    def drop(self, error: ErrorCode) -> None:
        """Answer the verification error ``error`` without appending (no-op once appended)."""
        if self.appended.done():
            return
        self.question.remove_done_callback(self)
        self.records = None
        self.resp["error_code"], self.resp["error_message"] = verification_error_for_produce(error)
        self.appended.set_result(None)


def _append_partition(ctx: RequestContext, topic: str, partition: int, records: Buffer | None,
                      acks: int, transactional_id: str | None = None, held: list[_Held] | None = None,
                      verified: ErrorCode | None = None
                      ) -> tuple[dict, PartitionLog | None, asyncio.Future[ErrorCode] | None]:
    """Returns (partition response dict, log needing a durable ack or None, the acks=all
    wait for the high watermark of a partition with followers or None). A partition held
    for its transaction's verification is added to ``held`` (its response is filled in
    later; without ``held`` the verifier's pending answer is not waited for, see
    :class:`_Held`); ``verified``: the coordinator's answer for a held partition."""
    resp = {"index": partition, "error_code": ErrorCode.none, "base_offset": -1, "log_append_time": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": None}
    timg = ctx.image.topics.get(topic)
    known = timg is not None and partition in timg.partitions
    if timg is None or not known:
        resp["error_code"] = ErrorCode.unknown_topic_or_partition
        return resp, None, None
    if timg.internal:  # before the leader check, as Kafka's ReplicaManager
        resp["error_code"] = ErrorCode.invalid_topic_exception
        resp["error_message"] = f"Cannot append to internal topic {topic}"
        return resp, None, None
    if (elsewhere := not_leader(ctx, timg, partition)) is not None:
        resp["error_code"], resp["current_leader"] = elsewhere.error_code, elsewhere.current_leader
        return resp, None, None
    plog = ctx.logs.partition_log(topic, partition)
    if plog is None:
        # A partition whose log could not be opened (e.g. out of file descriptors) is a
        # storage problem, not an unknown partition; one still loading is not led yet.
        resp["error_code"] = missing_log_error(ctx, topic, partition, ErrorCode.kafka_storage_error)
        return resp, None, None
    if records is None:
        resp["error_code"] = ErrorCode.invalid_record
        resp["error_message"] = "records must not be null"
        return resp, None, None
    replicas = ctx.services.replicas
    led = replicas.led_with_followers(topic, partition) if acks == -1 and replicas is not None else None
    if acks == -1 and (refusal := _not_enough_replicas(plog.config, led, topic, partition)) is not None:
        resp["error_code"], resp["error_message"] = ErrorCode.not_enough_replicas, refusal
        return resp, None, None
    try:
        records, headers = validate_produced(records, plog.config, ctx.now_ms, topic, partition)
    except RecordErrors as exc:  # Kafka's RecordValidationException: the records listed
        resp["error_code"], resp["error_message"] = ErrorCode(exc.error_code), str(exc)
        resp["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in exc.record_errors]
        resp["log_start_offset"] = plog.log_start_offset
        return resp, None, None
    except InvalidRecords as exc:
        resp["error_code"], resp["error_message"] = ErrorCode(exc.error_code), str(exc)
        if exc.error_code == ErrorCode.invalid_record:
            resp["record_errors"] = [{"batch_index": 0, "batch_index_error_message": str(exc)}]
        return resp, None, None
    h = headers[0]
    if h.is_transactional:
        refused = _unverified_transaction(ctx, transactional_id, plog, h, topic, partition, verified)
        if isinstance(refused, asyncio.Future):
            if held is None:  # not expected: every caller holds, or passes the answer
                refused = verification_error_for_produce(ErrorCode.coordinator_not_available)
            else:
                held.append(_Held(ctx, topic, partition, records, acks, transactional_id, resp, refused))
                return resp, None, None
        if refused is not None:
            resp["error_code"], resp["error_message"] = refused
            return resp, None, None
    try:
        result = plog.append(records, headers, ctx.now_ms)  # in the log's leader epoch
    except ProducerStateError as exc:
        resp["error_code"] = ErrorCode(exc.error_code)
        resp["error_message"] = str(exc)
        return resp, None, None
    except InvalidRecords as exc:
        resp["error_code"] = ErrorCode(exc.error_code)
        resp["error_message"] = str(exc)
        return resp, None, None
    except OSError as exc:  # nothing was written (see PartitionLog.append)
        resp["error_code"] = ErrorCode.kafka_storage_error
        resp["error_message"] = f"append failed: {exc.strerror or exc}"
        return resp, None, None
    if result.duplicate:
        resp.update(base_offset=result.base_offset, log_start_offset=result.log_start_offset,
                    log_append_time=result.log_append_time_ms if plog.config.log_append_time else -1)
        # A retry of a batch whose first answer was a failed fsync must not be
        # acknowledged before the batch is durable either.
        fsync_first = plog.config.flush_interval_messages is not None and plog.recovery_point <= result.last_offset
        # ... nor before it is replicated (Kafka waits for the original offsets' HW too)
        return resp, plog if fsync_first else None, _replicated(replicas, led, topic, partition, result.last_offset)
    ctx.waiters.wake((topic, partition))
    resp.update(base_offset=result.base_offset, log_append_time=result.log_append_time_ms,
                log_start_offset=result.log_start_offset)
    needs_fsync = plog.config.flush_interval_messages is not None and plog.unflushed_messages >= plog.config.flush_interval_messages
    return resp, plog if needs_fsync else None, _replicated(replicas, led, topic, partition, result.last_offset)


def _replicated(replicas: ReplicaManager | None, led: LeaderPartition | None, topic: str, partition: int,
                last_offset: int) -> asyncio.Future[ErrorCode] | None:
    """The acks=all wait of a partition with followers (``led``), else None."""
    if led is None or replicas is None:
        return None
    return replicas.wait_replicated(topic, partition, last_offset + 1)


def _refused_topics(ctx: RequestContext, req: ProduceRequest) -> dict[str, ErrorCode] | None:
    """Kafka's produce authorization: WRITE on the transactional id (if any; refused, every
    partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic
    (TOPIC_AUTHORIZATION_FAILED, before the topic's existence is checked). Returns the
    refused topics' errors, or None when authorization is off (no per-request work)."""
    a = authorizer(ctx)
    if a is None:
        return None
    names = {t.name for t in req.topic_data}
    if req.transactional_id is not None and not a.authorize(ctx.principal, ctx.client_host, AclOperation.WRITE,
                                                             ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return dict.fromkeys(names, ErrorCode.transactional_id_authorization_failed)
    return {n: ErrorCode.topic_authorization_failed for n in names
            if not a.authorize(ctx.principal, ctx.client_host, AclOperation.WRITE, ResourceType.TOPIC, n)}


@handles(0, 3, 11)
def handle(ctx: RequestContext, req: ProduceRequest) -> Any:
    """Append every partition's records, then answer (see the module docstring).

    ``records`` are views of the receive buffer (:mod:`~hightide.protocol.produce_request`),
    valid only during this synchronous call: they are validated, written (the log patches
    offsets in place when the view is writable) and released before it returns, so an
    answer that waits (fsync, replication) cannot touch them; nothing on the append path
    keeps a reference (what the log keeps, producer state and indexes, comes from the
    batch headers; decoded or recompressed records are new bytes).

    Client quotas (:mod:`..quotas`): the record bytes count against the producer byte
    rate before the append; a throttled request is still appended and answered at once,
    with ``throttle_time_ms`` (the connection then mutes the channel)."""
    started = ctx.clock.monotonic()
    if ctx.services.quotas is not None:
        produce_throttle(ctx, _record_bytes(req), req.acks)
    try:
        return _handle(ctx, req)
    finally:
        _release(req)
        record_request_time(ctx, started)


def _record_bytes(req: ProduceRequest) -> int:
    """The request's record bytes (one ``len`` per partition)."""
    return sum(len(p.records) for t in req.topic_data for p in t.partition_data if p.records is not None)


def _release(req: ProduceRequest) -> None:
    """Release the request's record views (a later use raises ValueError instead of
    reading a reused receive buffer); kio-decoded ``bytes`` records are left alone."""
    for t in req.topic_data:
        for p in t.partition_data:
            if type(p.records) is memoryview:
                p.records.release()


def _handle(ctx: RequestContext, req: ProduceRequest) -> Any:
    responses = []
    durable = []
    replicated: list[Replicated] = []
    held: list[_Held] = []
    failed = False
    acks = req.acks
    refused = _refused_topics(ctx, req)
    for t in req.topic_data:
        parts = []
        for p in t.partition_data:
            code = ErrorCode.invalid_required_acks if acks not in (0, 1, -1) else (
                refused.get(t.name, ErrorCode.none) if refused else ErrorCode.none)
            if code != ErrorCode.none:
                resp = {"index": p.index, "error_code": code, "base_offset": -1,
                        "log_append_time": -1, "log_start_offset": -1, "record_errors": [], "error_message": None}
                plog = wait = None
            else:
                resp, plog, wait = _append_partition(ctx, t.name, p.index, p.records, acks, req.transactional_id,
                                                     held)
            failed |= resp["error_code"] != ErrorCode.none
            if plog is not None:
                durable.append((resp, plog))
            if wait is not None:
                replicated.append((t.name, resp, wait))
            parts.append(resp)
        responses.append({"name": t.name, "partition_responses": parts})
    if held:
        return _after_verification(ctx, held, responses, durable, replicated, acks, req.timeout.total_seconds())
    return _answer(ctx, responses, durable, replicated, acks, failed, req.timeout.total_seconds())


def _answer(ctx: RequestContext, responses: list[dict], durable: list[tuple[dict, PartitionLog]],
            replicated: list[Replicated], acks: int, failed: bool, timeout_s: float) -> Any:
    """The answer once every partition is appended or refused: acks=0 none (raises
    CloseConnection if a partition failed), else the response, or an awaitable of it
    when fsyncs or replication must be waited for (:func:`_after_fsync`)."""
    if acks == 0:
        if failed:
            errs = sorted({p["error_code"].name for t in responses for p in t["partition_responses"]
                           if p["error_code"] != ErrorCode.none})
            raise CloseConnection(f"acks=0 produce failed ({', '.join(errs)}); closing so the client notices")
        for _, plog in durable:
            ctx.flusher.durable(plog)
        return None
    response = {"responses": responses, "throttle_time": 0, "failed": failed}
    if durable or replicated:
        return _after_fsync(ctx, durable, response, replicated, timeout_s)
    return _encode(ctx, response)


async def _after_verification(ctx: RequestContext, held: list[_Held], responses: list[dict],
                              durable: list[tuple[dict, PartitionLog]], replicated: list[Replicated], acks: int,
                              timeout_s: float) -> RawResponse | None:
    """The answer of a request with partitions held for their transaction's verification
    (see :class:`_Held`): once every held partition is appended or refused (at most
    :data:`HELD_VERIFICATION_MAX_S`: one still waiting then answers NOT_ENOUGH_REPLICAS,
    Kafka's answer to a timed-out verification), as :func:`_handle` answers: acks=0
    closes the connection if a partition failed (CloseConnection), else fsync and
    replication waits as :func:`_after_fsync` (the request's ``timeout_s`` counted from
    the append, as Kafka's DelayedProduce). A request cancelled while it waits (its
    connection closed) appends nothing more."""
    try:
        await asyncio.wait([h.appended for h in held], timeout=HELD_VERIFICATION_MAX_S)
    finally:
        for h in held:
            h.drop(ErrorCode.network_exception)
    for h in held:
        if h.plog is not None:
            durable.append((h.resp, h.plog))
        if h.wait is not None:
            replicated.append((h.topic, h.resp, h.wait))
    failed = any(p["error_code"] != ErrorCode.none for t in responses for p in t["partition_responses"])
    answer = _answer(ctx, responses, durable, replicated, acks, failed, timeout_s)
    return await answer if answer is not None and not isinstance(answer, RawResponse) else answer


async def _after_fsync(ctx: RequestContext, durable: list[tuple[dict, PartitionLog]], response: dict,
                       replicated: list[Replicated], timeout_s: float) -> RawResponse:
    """Answer once the partitions that need it are fsynced and, for acks=all on partitions
    with followers, replicated (the high watermark passed the batch) within the
    request's ``timeout_s``. A partition whose fsync failed answers KAFKA_STORAGE_ERROR
    (never an acknowledgement); one not replicated in time REQUEST_TIMED_OUT; one whose
    wait ended otherwise its error (NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER); the others succeed."""
    deadline = ctx.clock.monotonic() + timeout_s
    if durable:
        futures = [ctx.flusher.durable(plog) for _, plog in durable]
        results = await asyncio.gather(*futures, return_exceptions=True)
        for (resp, _), r in zip(durable, results):
            if isinstance(r, BaseException):
                resp["error_code"] = ErrorCode.kafka_storage_error
                resp["error_message"] = f"fsync failed: {getattr(r, 'strerror', None) or r}"
                resp["base_offset"] = -1
    if replicated:
        pending = [w for _, _, w in replicated if not w.done()]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - ctx.clock.monotonic()))
        for topic, resp, w in replicated:
            code = w.result() if w.done() else ErrorCode.request_timed_out
            w.cancel()
            if code != ErrorCode.none and resp["error_code"] == ErrorCode.none:
                resp["error_code"] = code
                response["failed"] = True
                if code == ErrorCode.not_leader_or_follower:  # KIP-951: where it moved
                    resp["current_leader"] = _current_leader(ctx, topic, resp["index"])
    return _encode(ctx, response)


def _current_leader(ctx: RequestContext, topic: str, partition: int) -> tuple[int, int] | None:
    """(leader id, epoch) the image has for a partition this node stopped leading."""
    t = ctx.image.topics.get(topic)
    p = t.partitions.get(partition) if t is not None else None
    return None if p is None else NotLeader(ErrorCode.not_leader_or_follower, p.leader, p.leader_epoch).current_leader


def _encode(ctx: RequestContext, response: dict) -> RawResponse:
    topics = [(t["name"], [(p["index"], int(p["error_code"]), p["base_offset"], p["log_append_time"],
                            p["log_start_offset"], p["error_message"],
                            [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]])
                           for p in t["partition_responses"]]) for t in response["responses"]]
    # KIP-951: the current leader of each partition refused NOT_LEADER_OR_FOLLOWER
    leaders = {(t["name"], p["index"]): p["current_leader"] for t in response["responses"]
               for p in t["partition_responses"] if p.get("current_leader") is not None} if response["failed"] else None
    frame = encode_produce_response(ctx.version, ctx.header.correlation_id, topics, ctx.throttle_ms, leaders=leaders,
                                    node_endpoints=node_endpoints(ctx, (i for i, _ in leaders.values()))
                                    if leaders else ())
    return RawResponse([memoryview(frame)[4:]])
