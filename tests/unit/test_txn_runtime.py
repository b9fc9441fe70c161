"""The transaction coordinator in a real (in-process) broker: a transaction decided
(PrepareCommit in ``__transaction_state``) whose markers were not written when the broker
stopped is completed after the restart — markers in the data partition (the LSO moves
past it) and in ``__consumer_offsets`` (the pending offsets become visible) — and a
transaction past its timeout is aborted with the producer fenced."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time

import pytest

from hightide.cluster.controller import NewTopic
from hightide.config import BrokerConfig
from hightide.group.offsets import CommitRequest
from hightide.group.records import OFFSETS_TOPIC
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, validate_batches
from hightide.coordinator import transactions as txn_runtime
from hightide.server.broker import Broker
from hightide.txn.state import TxnState
from tests.waiting import async_wait_until

TOPIC = "t"
GROUP = "g"


def _config() -> BrokerConfig:
    return BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 3,
                                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 50})


async def _create_topic(b: Broker) -> None:
    _, records = b.controller.create_topics(b.image, [NewTopic(TOPIC, 2)])
    done = b.metadata_writer.commit_metadata(records)
    if inspect.isawaitable(done):
        await done


def _produce(b: Broker, pid: int, epoch: int, seq: int, partition: int = 0) -> int:
    plog = b.hosted.partition_log(TOPIC, partition)
    assert plog is not None
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    return plog.append(batch, validate_batches(batch), int(time.time() * 1000)).base_offset


async def _open_transaction(b: Broker, tid: str, timeout_ms: int = 60000) -> tuple[int, int]:
    init = await b.txns.init_producer_id(tid, timeout_ms, None)
    assert init.error == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    await b.groups.ensure_topic()
    offsets_tp = (OFFSETS_TOPIC, b.groups.partition_for(GROUP))
    assert await b.txns.add_partitions(tid, pid, epoch, [(TOPIC, 0), offsets_tp]) == ErrorCode.none
    _produce(b, pid, epoch, 0)
    commit = CommitRequest(TOPIC, 0, 1)
    error, _ = await b.groups.execute(GROUP, lambda s: s.txn_commit_offsets(
        GROUP, pid, epoch, -1, "", None, [commit], int(time.time() * 1000), lambda t, p: True),
        int(time.time() * 1000))
    assert error == ErrorCode.none
    return pid, epoch


def _committed(b: Broker) -> int:
    return b.groups.shard_for(GROUP).fetch_offsets(GROUP, [(TOPIC, 0)])[0].offset


def test_decided_transaction_is_completed_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(txn_runtime, "END_TXN_WAIT_S", 0.05)

    async def before() -> None:
        async with Broker(_config(), data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await _create_topic(b)
            pid, epoch = await _open_transaction(b, "tx")

            async def stuck(*args: object) -> dict:
                await asyncio.Event().wait()  # the markers never get written
                return {}
            monkeypatch.setattr(b.txns, "write_markers", stuck)
            assert await b.txns.end_txn("tx", pid, epoch, True) == ErrorCode.none
            assert b.txns.describe("tx").state is TxnState.PREPARE_COMMIT
            plog = b.hosted.partition_log(TOPIC, 0)
            assert plog.last_stable_offset == 0 < plog.high_watermark  # the transaction holds the LSO
            assert _committed(b) == -1  # pending
            assert b.txns.verify("tx", pid, epoch, TOPIC, 0) == ErrorCode.concurrent_transactions

    async def after() -> None:
        async with Broker(_config(), data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await b.txns.wait_loaded()
            await async_wait_until(lambda: b.txns.describe("tx").state is TxnState.COMPLETE_COMMIT, 10,
                                   what="the decided transaction completed after the restart")
            plog = b.hosted.partition_log(TOPIC, 0)
            assert plog.last_stable_offset == plog.high_watermark == 2  # the record and the marker
            await b.groups.wait_loaded()
            assert _committed(b) == 1
            assert b.txns.describe("tx").partitions == frozenset()

    asyncio.run(before())
    asyncio.run(after())


def test_timed_out_transaction_is_aborted_and_fenced(tmp_path):
    async def run() -> None:
        async with Broker(_config(), data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await _create_topic(b)
            pid, epoch = await _open_transaction(b, "slow", timeout_ms=100)
            await async_wait_until(lambda: b.txns.describe("slow").state is TxnState.COMPLETE_ABORT, 10,
                                   what="the timed-out transaction aborted")
            meta = b.txns.describe("slow")
            assert (meta.producer_id, meta.producer_epoch) == (pid, epoch + 1)
            plog = b.hosted.partition_log(TOPIC, 0)
            assert plog.last_stable_offset == plog.high_watermark
            assert plog.aborted_transactions(0, plog.high_watermark) == [(pid, 0)]
            assert _committed(b) == -1  # the offsets were dropped
            assert await b.txns.end_txn("slow", pid, epoch, True) == ErrorCode.producer_fenced
            listed = b.txns.list_transactions(states=["CompleteAbort"])
            assert [m.transactional_id for m in listed] == ["slow"]

    asyncio.run(run())


@pytest.mark.parametrize("commit", [True, False])
def test_write_txn_markers_reaches_every_partition(tmp_path, commit):
    async def run() -> None:
        async with Broker(_config(), data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await _create_topic(b)
            _produce(b, 77, 0, 0, partition=1)
            errors = await b.txns.write_markers(77, 0, commit, 0, [(TOPIC, 1), (TOPIC, 5), ("nope", 0)])
            assert errors == {(TOPIC, 1): ErrorCode.none, (TOPIC, 5): ErrorCode.unknown_topic_or_partition,
                              ("nope", 0): ErrorCode.unknown_topic_or_partition}
            plog = b.hosted.partition_log(TOPIC, 1)
            assert plog.last_stable_offset == plog.high_watermark == 2
            assert bool(plog.aborted_transactions(0, 2)) is not commit
            old = await b.txns.write_markers(77, -1, commit, 0, [(TOPIC, 1)])
            assert old == {(TOPIC, 1): ErrorCode.invalid_producer_epoch}

    asyncio.run(run())


def test_idle_transactional_ids_expire(tmp_path):
    cfg = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 3,
                                       "transaction.abort.timed.out.transaction.cleanup.interval.ms": 50,
                                       "transaction.remove.expired.transaction.cleanup.interval.ms": 50,
                                       "transactional.id.expiration.ms": 300})

    async def run() -> None:
        async with Broker(cfg, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            assert (await b.txns.init_producer_id("idle", 60000, None)).error == ErrorCode.none
            assert b.txns.describe("idle") is not None
            await async_wait_until(lambda: b.txns.describe("idle") is None, 10, what="the idle id expired")
        async with Broker(cfg, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await b.txns.wait_loaded()
            assert b.txns.describe("idle") is None  # the tombstone is in the log

    asyncio.run(run())


def test_a_data_marker_is_answered_only_once_replicated(tmp_path, monkeypatch):
    """WriteTxnMarkers is a write with acks=all (Kafka appends markers with
    requiredAcks=-1): the marker is answered once the partition's high watermark passed it.
    A leader answering at its append (sim seed 21 --clients all: a paused leader, deposed
    meanwhile, appended the COMMIT marker on resuming and answered; the coordinator
    completed the transaction; the new leader never got the marker and the producer's
    next transaction's ABORT aborted the committed one there) loses a commit."""
    async def run() -> None:
        async with Broker(_config(), data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            await _create_topic(b)
            _produce(b, 77, 0, 0, partition=1)
            pending: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            asked = []

            def replicated(topic: str, partition: int, end: int) -> asyncio.Future[ErrorCode]:
                asked.append((topic, partition, end))
                return pending
            monkeypatch.setattr(b.txns, "env", dataclasses.replace(b.txns.env, replicated=replicated))
            task = asyncio.ensure_future(b.txns.write_markers(77, 0, True, 0, [(TOPIC, 1)]))
            await asyncio.sleep(0.05)
            assert not task.done()  # the followers do not have the marker yet
            assert asked == [(TOPIC, 1, 2)]  # the record at 0, the marker at 1
            pending.set_result(ErrorCode.none)
            assert await task == {(TOPIC, 1): ErrorCode.none}
            deposed: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            deposed.set_result(ErrorCode.not_leader_or_follower)
            monkeypatch.setattr(b.txns, "env", dataclasses.replace(b.txns.env, replicated=lambda *a: deposed))
            _produce(b, 78, 0, 0, partition=1)
            lost = await b.txns.write_markers(78, 0, True, 0, [(TOPIC, 1)])
            assert lost == {(TOPIC, 1): ErrorCode.not_leader_or_follower}  # the coordinator retries at the new leader

    asyncio.run(run())
