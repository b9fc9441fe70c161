"""``hightide transactions list|describe|describe-producers|find-hanging|abort``: Kafka's
``kafka-transactions.sh`` with its columns and options (headers in hightide's style:
upper case with dashes), against hightide or any Kafka cluster.

* ``list``: ListTransactions on every broker (``--state``, ``--producer-id``,
  ``--duration-filter`` in ms: Kafka 3.8+).
* ``describe --transactional-id``: DescribeTransactions at the id's coordinator.
* ``describe-producers --topic --partition``: DescribeProducers at the leader.
* ``find-hanging``: open transactions in partitions (``--broker-id``, or ``--topic``
  [``--partition``]) whose producer wrote nothing for ``--max-transaction-timeout`` ms
  (default 15 min) and that their coordinator does not complete.
* ``abort --topic --partition`` with ``--start-offset`` (the producer is looked up with
  DescribeProducers) or ``--producer-id --producer-epoch --coordinator-epoch``: an ABORT
  marker written by WriteTxnMarkers at the partition's leader, as Kafka's tool does.
"""

from __future__ import annotations

import time
from typing import Any

import click

from . import main
from ._common import Col, admin_options, emit, run_admin


@main.group()
def transactions() -> None:
    """Transactions: list, describe, producers of a partition, find and abort hanging ones."""


LIST_COLS = [Col("TRANSACTIONAL-ID", "transactional_id"), Col("COORDINATOR", "coordinator"),
             Col("PRODUCER-ID", "producer_id"), Col("TRANSACTION-STATE", "state")]


@transactions.command("list")
@admin_options
@click.option("--state", "states", multiple=True, help="Only transactions in this state, e.g. Ongoing (repeatable).")
@click.option("--producer-id", "producer_ids", type=int, multiple=True, help="Only this producer id (repeatable).")
@click.option("--duration-filter", type=int, default=-1, help="Only transactions running longer than this (ms).")
def list_cmd(bootstrap_server: str, output: str, states: tuple[str, ...], producer_ids: tuple[int, ...],
             duration_filter: int) -> None:
    """Transactions of every broker's coordinator."""
    from ..client.transactions import list_transactions

    async def go(admin: Any) -> list[dict[str, Any]]:
        found = await list_transactions(admin, states=states, producer_ids=producer_ids,
                                        min_duration_ms=duration_filter)
        return [{"transactional_id": t.transactional_id, "coordinator": t.coordinator_id,
                 "producer_id": t.producer_id, "state": t.state} for t in found]
    emit(output, LIST_COLS, run_admin(bootstrap_server, go))


DESCRIBE_COLS = [Col("COORDINATOR-ID", "coordinator_id", drop=3), Col("TRANSACTIONAL-ID", "transactional_id"),
                 Col("PRODUCER-ID", "producer_id"), Col("PRODUCER-EPOCH", "producer_epoch", drop=2),
                 Col("TRANSACTION-STATE", "state"), Col("TRANSACTION-TIMEOUT-MS", "timeout_ms", drop=4),
                 Col("CURRENT-TRANSACTION-START-TIME-MS", "start_time_ms", drop=5),
                 Col("TRANSACTION-DURATION-MS", "duration_ms", drop=1), Col("TOPIC-PARTITIONS", "partitions_text")]


@transactions.command("describe")
@admin_options
@click.option("--transactional-id", required=True, help="The transactional id.")
def describe_cmd(bootstrap_server: str, output: str, transactional_id: str) -> None:
    """One transactional id's state at its coordinator."""
    from ..client import KafkaError
    from ..client.transactions import describe_transactions

    async def go(admin: Any) -> dict[str, Any]:
        d = (await describe_transactions(admin, [transactional_id]))[transactional_id]
        if isinstance(d, KafkaError):
            raise d
        now = int(time.time() * 1000)
        parts = [f"{tp.topic}-{tp.partition}" for tp in sorted(d.partitions)]
        return {"coordinator_id": d.coordinator_id, "transactional_id": d.transactional_id,
                "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "state": d.state,
                "timeout_ms": d.timeout_ms, "start_time_ms": None if d.start_time_ms < 0 else d.start_time_ms,
                "duration_ms": None if d.start_time_ms < 0 else max(now - d.start_time_ms, 0),
                "partitions": parts, "partitions_text": ",".join(parts)}
    emit(output, DESCRIBE_COLS, [run_admin(bootstrap_server, go)])


PRODUCER_COLS = [Col("PRODUCER-ID", "producer_id"), Col("PRODUCER-EPOCH", "producer_epoch"),
                 Col("LATEST-COORDINATOR-EPOCH", "coordinator_epoch", drop=2), Col("LAST-SEQUENCE", "last_sequence"),
                 Col("LAST-TIMESTAMP", "last_timestamp", drop=1),
                 Col("CURRENT-TRANSACTION-START-OFFSET", "current_txn_start_offset")]


def _or_none(v: int) -> int | None:
    return None if v < 0 else v


def _producer_row(p: Any) -> dict[str, Any]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": _or_none(p.coordinator_epoch), "last_sequence": p.last_sequence,
            "last_timestamp": _or_none(p.last_timestamp), "current_txn_start_offset": _or_none(p.current_txn_start_offset)}


@transactions.command("describe-producers")
@admin_options
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
def describe_producers_cmd(bootstrap_server: str, output: str, topic: str, partition: int) -> None:
    """The active producers of a partition (open transactions show their start offset)."""
    from ..client import KafkaError, TopicPartition
    from ..client.transactions import describe_producers
    tp = TopicPartition(topic, partition)

    async def go(admin: Any) -> list[dict[str, Any]]:
        found = (await describe_producers(admin, [tp]))[tp]
        if isinstance(found, KafkaError):
            raise found
        return [_producer_row(p) for p in found]
    emit(output, PRODUCER_COLS, run_admin(bootstrap_server, go))


HANGING_COLS = [Col("TOPIC", "topic"), Col("PARTITION", "partition"), Col("PRODUCER-ID", "producer_id"),
                Col("PRODUCER-EPOCH", "producer_epoch", drop=2), Col("COORDINATOR-EPOCH", "coordinator_epoch", drop=3),
                Col("START-OFFSET", "start_offset"), Col("LAST-TIMESTAMP", "last_timestamp", drop=1),
                Col("DURATION(MIN)", "duration_min")]


@transactions.command("find-hanging")
@admin_options
@click.option("--broker-id", type=int, default=None, help="Search the partitions with a replica on this broker.")
@click.option("--topic", default=None, help="Search this topic's partitions.")
@click.option("--partition", type=int, default=None, help="With --topic: only this partition.")
@click.option("--max-transaction-timeout", type=int, default=900_000, show_default=True,
              help="The brokers' transaction.max.timeout.ms: a transaction quiet for longer is a candidate.")
def find_hanging_cmd(bootstrap_server: str, output: str, broker_id: int | None, topic: str | None,
                     partition: int | None, max_transaction_timeout: int) -> None:
    """Open transactions that their coordinator will not complete (they hold the LSO back)."""
    if (broker_id is None) == (topic is None):
        raise click.UsageError("give exactly one of --broker-id or --topic")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    from ..client.transactions import find_hanging, partitions_to_search

    async def go(admin: Any) -> list[dict[str, Any]]:
        tps = await partitions_to_search(admin, broker_id=broker_id, topic=topic, partition=partition)
        now = int(time.time() * 1000)
        found = await find_hanging(admin, tps, max_transaction_timeout, now)
        return [{"topic": h.partition.topic, "partition": h.partition.partition,
                 "producer_id": h.producer.producer_id, "producer_epoch": h.producer.producer_epoch,
                 "coordinator_epoch": _or_none(h.producer.coordinator_epoch),
                 "start_offset": h.producer.current_txn_start_offset,
                 "last_timestamp": _or_none(h.producer.last_timestamp),
                 "duration_min": (now - h.producer.last_timestamp) // 60_000} for h in found]
    emit(output, HANGING_COLS, run_admin(bootstrap_server, go))


@transactions.command("abort")
@admin_options
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, default=None, help="The open transaction's first offset.")
@click.option("--producer-id", type=int, default=None)
@click.option("--producer-epoch", type=int, default=None)
@click.option("--coordinator-epoch", type=int, default=None)
def abort_cmd(bootstrap_server: str, output: str, topic: str, partition: int, start_offset: int | None,
              producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Abort an open (hanging) transaction in one partition with an ABORT marker."""
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is not None and any(v is not None for v in explicit):
        raise click.UsageError("give --start-offset or --producer-id/--producer-epoch/--coordinator-epoch, not both")
    if start_offset is None and any(v is None for v in explicit):
        raise click.UsageError("give --start-offset, or all of --producer-id, --producer-epoch, --coordinator-epoch")
    from ..client import TopicPartition
    from ..client.transactions import abort_at_offset, abort_transaction
    tp = TopicPartition(topic, partition)

    async def go(admin: Any) -> dict[str, Any]:
        if start_offset is not None:
            p = await abort_at_offset(admin, tp, start_offset)
            pid, epoch, cepoch = p.producer_id, p.producer_epoch, p.coordinator_epoch
        else:
            assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
            pid, epoch, cepoch = producer_id, producer_epoch, coordinator_epoch
            await abort_transaction(admin, tp, pid, epoch, cepoch)
        return {"topic": topic, "partition": partition, "producer_id": pid, "producer_epoch": epoch,
                "coordinator_epoch": max(cepoch, 0), "result": "aborted"}
    row = run_admin(bootstrap_server, go)
    emit(output, [Col("TOPIC", "topic"), Col("PARTITION", "partition"), Col("PRODUCER-ID", "producer_id"),
                  Col("PRODUCER-EPOCH", "producer_epoch"), Col("COORDINATOR-EPOCH", "coordinator_epoch", drop=1),
                  Col("RESULT", "result")], [row])
