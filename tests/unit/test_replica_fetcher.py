"""The replica fetcher (replica/fetcher.py) between two embedded brokers.

Brokers 1 and 2 run in this process on loopback, each with its own data dir and metadata
log holding the same hand-made cluster: both registered, and a topic whose partition 0
has replicas (1, 2). The follower's fetcher fetches over the wire (Fetch v17 with
ReplicaState, DivergingEpoch), so the leader's Fetch handler, the replica manager and the
follower's log all take part. Checked: the follower's log equals the leader's byte for
byte (batches, offsets, leader epochs) and takes the leader's high watermark; after a
leader change the old leader's unreplicated tail is truncated (DivergingEpoch) and it
catches up with the new leader; OffsetForLeaderEpoch answers from the epoch cache.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from hightide import Broker, BrokerConfig
from hightide.client import BrokerConnection
from hightide.cluster.broker_records import RegisterBrokerRecord
from hightide.cluster.records import PartitionRecord, TopicRecord
from hightide.log.partition_log import PartitionLog
from hightide.protocol.records import build_batch, iter_headers, validate_batches

from tests.waiting import async_wait_until

TOPIC = "replicated"
TOPIC_ID = uuid.UUID("0b7c1e52-6a43-4d2e-9d51-3c7a3b2f9e01")
TP = (TOPIC, 0)


def register(broker_id: int, port: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id, str(uuid.uuid4()), 100 + broker_id,
                                end_points=(("PLAINTEXT", "127.0.0.1", port, 0),), fenced=False)


def log_bytes(lg: PartitionLog) -> bytes:
    out = b""
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).data
        out += bytes(data)
        off = list(iter_headers(data))[-1].next_offset
    return out


async def lead(brokers: list[Broker], leader: int, epoch: int, *, first: bool = False) -> None:
    """Both brokers learn that ``leader`` leads partition 0 in ``epoch``; roles follow."""
    for b in brokers:
        records = [register(1, brokers[0].port), register(2, brokers[1].port), TopicRecord(TOPIC, str(TOPIC_ID))] \
            if first else []
        await b.metadata_writer.commit_metadata(records + [PartitionRecord(str(TOPIC_ID), 0, leader, epoch, (1, 2))])
        b.after_metadata_change()


async def produce(b: Broker, n: int, acks: int = 1) -> None:
    conn = BrokerConnection("127.0.0.1", b.port, "test")
    await conn.connect()
    try:
        for i in range(n):
            batch = build_batch([(None, f"v{i}".encode() * 50, [], int(time.time() * 1000))] * 3)
            resp = await conn.request(0, 9, {"transactional_id": None, "acks": acks, "timeout": 10_000,
                                             "topic_data": [{"name": TOPIC, "partition_data": [
                                                 {"index": 0, "records": batch}]}]})
            assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        await conn.close()


def plog(b: Broker) -> PartitionLog:
    assert b.logs is not None
    lg = b.logs.get(TP)
    assert lg is not None
    return lg


async def two_brokers(tmp_path: Path, body: Callable[[list[Broker]], Awaitable[None]]) -> None:
    brokers: list[Broker] = []
    try:
        for node in (1, 2):
            cfg = BrokerConfig.load(overrides={"node.id": node, "offsets.topic.num.partitions": 1})
            b = Broker(cfg, data_dir=str(tmp_path / f"b{node}"), listen=("127.0.0.1", 0))
            await b.start()
            brokers.append(b)
        await body(brokers)
    finally:
        for b in brokers:
            await b.stop(grace_s=1)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))  # type: ignore[arg-type]


async def equal_logs(a: Broker, b: Broker, what: str) -> None:
    await async_wait_until(lambda: plog(a).log_end_offset == plog(b).log_end_offset, timeout=20, what=what)
    assert log_bytes(plog(a)) == log_bytes(plog(b))
    assert plog(a).epochs.entries() == [e for e in plog(b).epochs.entries() if e.start_offset < plog(b).log_end_offset]


def test_follower_replicates_byte_for_byte_and_truncates_after_a_leader_change(tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        b1, b2 = brokers
        await lead(brokers, leader=1, epoch=3, first=True)
        assert b2.replica_fetchers.following() == {TP: 1}
        await produce(b1, 20)
        await equal_logs(b2, b1, "the follower to catch up")
        assert {h.partition_leader_epoch for h in iter_headers(log_bytes(plog(b2)))} == {3}
        await async_wait_until(lambda: plog(b2).high_watermark == plog(b1).log_end_offset == 60, timeout=20,
                               what="the follower to take the leader's high watermark")

        b2.replica_fetchers.stop_following(TP)  # the follower falls behind (as if partitioned away)
        await produce(b1, 4)  # acks=1: the leader's unreplicated tail
        assert plog(b1).log_end_offset == 72 and plog(b2).log_end_offset == 60

        await lead(brokers, leader=2, epoch=4)  # the follower becomes leader; the old one diverged
        assert b1.replica_fetchers.following() == {TP: 2} and b2.replica_fetchers.following() == {}
        await produce(b2, 2)
        await equal_logs(b1, b2, "the old leader to truncate and catch up")
        assert plog(b1).log_end_offset == 66
        assert [e.epoch for e in plog(b1).epochs.entries()] == [3, 4]

        conn = BrokerConnection("127.0.0.1", b2.port, "test")
        await conn.connect()
        try:
            r = await conn.request(23, 4, {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "current_leader_epoch": 4, "leader_epoch": e} for e in (3, 4, 2)]}]})
        finally:
            await conn.close()
        assert [(p.error_code, p.leader_epoch, p.end_offset) for p in r.topics[0].partitions] == [
            (0, 3, 60), (0, 4, 66), (0, 2, 0)]
    run(two_brokers(tmp_path, body))


def test_follower_behind_the_leaders_log_start_restarts_there_and_a_fenced_epoch_waits(tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        b1, b2 = brokers
        await lead(brokers, leader=1, epoch=3, first=True)
        await produce(b1, 20)
        await equal_logs(b2, b1, "the follower to catch up")
        await async_wait_until(lambda: plog(b1).high_watermark == 60, timeout=20, what="the leader's HW")

        old = b2.replica_fetchers.fetchers[1]
        b2.replica_fetchers.stop_following(TP)  # its last partition: the fetcher task ends
        await async_wait_until(lambda: old._task is not None and old._task.done(), timeout=5,
                               what="the fetcher without partitions to end")
        plog(b2).truncate_to(0)  # the follower lost its copy (a replaced disk)
        assert plog(b1).delete_records_before(30) == 30
        b2.replica_fetchers.follow(TP, 1, 3)  # fetch at 0 < the leader's log start: OFFSET_OUT_OF_RANGE
        await async_wait_until(lambda: plog(b2).log_start_offset == 30 and plog(b2).log_end_offset == 60,
                               timeout=20, what="the follower to restart at the leader's log start and catch up")
        assert log_bytes(plog(b2)) == log_bytes(plog(b1))

        b2.replica_fetchers.follow(TP, 1, 2)  # an epoch older than the leader's: FENCED_LEADER_EPOCH
        fetcher = b2.replica_fetchers.fetchers[1]
        await async_wait_until(lambda: fetcher.partitions[TP].delayed_until == float("inf"), timeout=20,
                               what="the fenced partition to wait for the metadata")
        await produce(b1, 1)
        assert plog(b2).log_end_offset == 60
        b2.replica_fetchers.follow(TP, 1, 3)  # the metadata names the leader's epoch again
        await equal_logs(b2, b1, "the follower to fetch again")

        b2.replica_fetchers.stop_following(TP)
        extra = build_batch([(None, b"never on the leader", [], 1)] * 2)
        plog(b2).append(extra, validate_batches(extra), 0, leader_epoch=3)  # a tail the leader never had
        b2.replica_fetchers.follow(TP, 1, 3)
        state = b2.replica_fetchers.fetchers[1].partitions[TP]
        state.truncating = True  # Kafka's truncating state: OffsetForLeaderEpoch before fetching
        await equal_logs(b2, b1, "the follower to cut its tail where OffsetForLeaderEpoch says")
        assert not state.truncating
    run(two_brokers(tmp_path, body))
