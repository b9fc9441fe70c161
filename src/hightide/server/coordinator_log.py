"""The log side of a coordinator runtime: the pieces every coordinator over an internal
topic needs (``__consumer_offsets``, ``__share_group_state``), without the state machine.

* :func:`ensure_internal_topic` creates the topic on first use, as Kafka does;
* :func:`read_records` yields ``(offset, key, value)`` of every non-control record from the
  log start offset to the high watermark (start-up replay);
* :func:`append_records` appends already encoded records as one batch and returns the
  offset of each record, raising :class:`CoordinatorUnavailable` when the log refuses.

A runtime calls its shard, appends the shard's records with :func:`append_records`, and
replays them into the shard only after the append succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..cluster.controller import NewTopic
from ..protocol.records import build_batch, decode_records, validate_batches

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.coordinator")


class CoordinatorUnavailable(Exception):
    """The coordinator cannot serve (its log failed); answer COORDINATOR_NOT_AVAILABLE."""


def ensure_internal_topic(broker: Broker, name: str, partitions: int, configs: dict[str, str]) -> int:
    """Create ``name`` if missing; return its partition count (fixed once created)."""
    image = broker.image
    if name not in image.topics:
        results, records = broker.controller.create_topics(image, [NewTopic(name, partitions, 1, configs=configs)])
        if results[0].error_code:
            raise CoordinatorUnavailable(f"cannot create {name}: {results[0].message}")
        broker.commit_metadata(records)
        log.info("created %s with %d partitions", name, partitions)
    return len(broker.image.topics[name].partitions)


def read_records(broker: Broker, topic: str, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]:
    """Every keyed, non-control record of the partition up to the high watermark."""
    plog = broker.partition_log(topic, partition)
    if plog is None:
        return
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        chunk = plog.read(offset, 1 << 20, max_offset=plog.high_watermark)
        if not chunk.data:
            return
        for h in validate_batches(chunk.data, client_origin=False):
            batch = memoryview(chunk.data)[h.position:h.position + h.size]
            if not h.is_control:
                for rec in decode_records(batch):
                    if rec.offset >= offset and rec.key is not None:
                        yield rec.offset, bytes(rec.key), None if rec.value is None else bytes(rec.value)
            offset = h.last_offset + 1


def append_records(broker: Broker, topic: str, partition: int, encoded: list[tuple[bytes, bytes | None]],
                   now_ms: int) -> list[int]:
    """Append ``encoded`` (key, value) records as one batch; return their offsets."""
    plog = broker.partition_log(topic, partition)
    if plog is None:
        raise CoordinatorUnavailable(f"{topic}-{partition} is not available")
    batch = build_batch([(k, v, [], now_ms) for k, v in encoded])
    try:
        result = plog.append(batch, validate_batches(batch, client_origin=False), now_ms)
    except OSError as exc:
        log.error("append to %s-%d failed: %s", topic, partition, exc)
        raise CoordinatorUnavailable(str(exc)) from exc
    broker.waiters.wake((topic, partition))
    return list(range(result.base_offset, result.base_offset + len(encoded)))


def needs_fsync(broker: Broker, topic: str, partition: int):
    """The partition log when its flush policy says an append must be fsynced before
    it is acknowledged (``flush.messages``), else None."""
    plog = broker.partition_log(topic, partition)
    if plog is None:
        return None
    n = plog.config.flush_interval_messages
    return plog if n is not None and plog.unflushed_messages >= n else None
