"""Produce (key 0), versions 3-11.

Per partition: resolve the topic, validate the batch header and CRC (never the records
themselves), check the idempotent producer's sequence, append the batch as opaque bytes
with its offsets assigned, wake long-polling fetches, and answer according to ``acks``:

* ``acks=0``: no response; if any partition failed the connection is closed, which is
  how Kafka tells a fire-and-forget producer something went wrong;
* ``acks=1`` / ``acks=-1``: answered once the batch is in the page cache, or once it is
  fsynced when the topic's ``flush.messages`` asks for it (e.g. 1).
"""

from __future__ import annotations

import asyncio


from ...log.cleaner import validate_compacted_batch
from ...log.producer_state import ProducerStateError
from ...protocol.produce_response import encode_produce_response
from ...protocol.errors import ErrorCode
from ...protocol.records import InvalidRecords, decode_records, validate_batches
from ..registry import CloseConnection, RawResponse, handles
from .common import LEADER_EPOCH


def _policy_error(cfg, h, records, now_ms: int, acks: int) -> tuple[ErrorCode, str] | None:
    """Topic policies Kafka enforces before appending: min.insync.replicas for acks=all
    (a single node has an ISR of 1) and the CreateTime bounds
    message.timestamp.before/after.max.ms. The future bound needs only the header's
    MaxTimestamp; the past bound decodes the batch (opt-in, off by default)."""
    if acks == -1 and cfg.min_insync_replicas > 1:
        return (ErrorCode.not_enough_replicas,
                f"The size of the current ISR 1 is insufficient to satisfy the min.isr requirement "
                f"of {cfg.min_insync_replicas}")
    if cfg.log_append_time:
        return None
    after, before = cfg.timestamp_after_max_ms, cfg.timestamp_before_max_ms
    if after is not None and h.max_timestamp > now_ms + after:
        return ErrorCode.invalid_timestamp, (
            f"Timestamp {h.max_timestamp} of a record is more than {after} ms after the broker's time "
            "(message.timestamp.after.max.ms)")
    if before is not None:
        oldest = min((r.timestamp for r in decode_records(records)), default=now_ms)
        if oldest < now_ms - before:
            return ErrorCode.invalid_timestamp, (
                f"Timestamp {oldest} of a record is more than {before} ms before the broker's time "
                "(message.timestamp.before.max.ms)")
    return None


def _append_partition(ctx, topic: str, partition: int, records, acks: int) -> tuple[dict, object | None]:
    """Returns (partition response dict, log needing a durable ack or None)."""
    b = ctx.broker
    resp = {"index": partition, "error_code": ErrorCode.none, "base_offset": -1, "log_append_time": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": None}
    timg = b.image.topics.get(topic)
    known = timg is not None and partition in timg.partitions
    plog = b.partition_log(topic, partition) if known else None
    if plog is None:
        # A partition whose log could not be opened (e.g. out of file descriptors) is a
        # storage problem, not an unknown partition.
        resp["error_code"] = ErrorCode.kafka_storage_error if known else ErrorCode.unknown_topic_or_partition
        return resp, None
    if timg.internal:
        resp["error_code"] = ErrorCode.invalid_topic_exception
        resp["error_message"] = f"Cannot append to internal topic {topic}"
        return resp, None
    if records is None:
        resp["error_code"] = ErrorCode.invalid_record
        resp["error_message"] = "records must not be null"
        return resp, None
    try:
        headers = validate_batches(records, plog.config.max_message_bytes)
    except InvalidRecords as exc:
        resp["error_code"] = ErrorCode(exc.error_code)
        resp["error_message"] = str(exc)
        if exc.error_code == ErrorCode.invalid_record:
            resp["record_errors"] = [{"batch_index": 0, "batch_index_error_message": str(exc)}]
        return resp, None
    h = headers[0]
    policy = _policy_error(plog.config, h, records, ctx.now_ms, acks)
    if policy is not None:
        resp["error_code"], resp["error_message"] = policy
        if policy[0] == ErrorCode.invalid_timestamp:
            resp["record_errors"] = [{"batch_index": 0, "batch_index_error_message": policy[1]}]
        return resp, None
    if plog.config.compact:
        problem = validate_compacted_batch(records)
        if problem is not None:
            resp["error_code"], resp["error_message"] = ErrorCode.invalid_record, problem
            resp["record_errors"] = [{"batch_index": 0, "batch_index_error_message": problem}]
            return resp, None
    if h.is_transactional:
        resp["error_code"] = ErrorCode.invalid_txn_state
        resp["error_message"] = "transactions are not supported by this hightide version"
        return resp, None
    try:
        result = plog.append(records, headers, ctx.now_ms, LEADER_EPOCH)
    except ProducerStateError as exc:
        resp["error_code"] = ErrorCode(exc.error_code)
        resp["error_message"] = str(exc)
        return resp, None
    except InvalidRecords as exc:
        resp["error_code"] = ErrorCode(exc.error_code)
        resp["error_message"] = str(exc)
        return resp, None
    except OSError as exc:  # nothing was written (see PartitionLog.append)
        resp["error_code"] = ErrorCode.kafka_storage_error
        resp["error_message"] = f"append failed: {exc.strerror or exc}"
        return resp, None
    if result.duplicate:
        resp.update(base_offset=result.base_offset, log_start_offset=result.log_start_offset,
                    log_append_time=result.log_append_time_ms if plog.config.log_append_time else -1)
        # A retry of a batch whose first answer was a failed fsync must not be
        # acknowledged before the batch is durable either.
        fsync_first = plog.config.flush_interval_messages is not None and plog.recovery_point <= result.last_offset
        return resp, plog if fsync_first else None
    b.waiters.wake((topic, partition))
    resp.update(base_offset=result.base_offset, log_append_time=result.log_append_time_ms,
                log_start_offset=result.log_start_offset)
    needs_fsync = plog.config.flush_interval_messages is not None and plog.unflushed_messages >= plog.config.flush_interval_messages
    return resp, plog if needs_fsync else None


@handles(0, 3, 11)
def handle(ctx, req):
    b = ctx.broker
    responses = []
    durable = []
    failed = False
    acks = req.acks
    for t in req.topic_data:
        parts = []
        for p in t.partition_data:
            if acks not in (0, 1, -1):
                resp = {"index": p.index, "error_code": ErrorCode.invalid_required_acks, "base_offset": -1,
                        "log_append_time": -1, "log_start_offset": -1, "record_errors": [], "error_message": None}
                plog = None
            else:
                resp, plog = _append_partition(ctx, t.name, p.index, p.records, acks)
            failed |= resp["error_code"] != ErrorCode.none
            if plog is not None:
                durable.append((resp, plog))
            parts.append(resp)
        responses.append({"name": t.name, "partition_responses": parts})
    if acks == 0:
        if failed:
            errs = sorted({p["error_code"].name for t in responses for p in t["partition_responses"]
                           if p["error_code"] != ErrorCode.none})
            raise CloseConnection(f"acks=0 produce failed ({', '.join(errs)}); closing so the client notices")
        for _, plog in durable:
            b.flusher.durable(plog)
        return None
    response = {"responses": responses, "throttle_time": 0}
    if durable:
        return _after_fsync(ctx, durable, response)
    return _encode(ctx, response)


async def _after_fsync(ctx, durable, response):
    """Answer once the partitions that need it are fsynced; a partition whose fsync
    failed answers KAFKA_STORAGE_ERROR (never an acknowledgement), the others succeed."""
    futures = [ctx.broker.flusher.durable(plog) for _, plog in durable]
    results = await asyncio.gather(*futures, return_exceptions=True)
    for (resp, _), r in zip(durable, results):
        if isinstance(r, BaseException):
            resp["error_code"] = ErrorCode.kafka_storage_error
            resp["error_message"] = f"fsync failed: {getattr(r, 'strerror', None) or r}"
            resp["base_offset"] = -1
    return _encode(ctx, response)


def _encode(ctx, response) -> RawResponse:
    topics = [(t["name"], [(p["index"], int(p["error_code"]), p["base_offset"], p["log_append_time"],
                            p["log_start_offset"], p["error_message"],
                            [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]])
                           for p in t["partition_responses"]]) for t in response["responses"]]
    frame = encode_produce_response(ctx.version, ctx.header.correlation_id, topics)
    return RawResponse([memoryview(frame)[4:]])
