"""A parked Fetch (Kafka's DelayedFetch, issue 11 defect 4): on every append it compares
positions, and reads the partitions once, when it completes.

Before the fix every append to any watched partition re-read every requested partition
(one measured 1 MiB fetch fed by 2 KB produces read 1.8 GB). These tests run an embedded
broker with real Produce and Fetch requests and count the reads of the log.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time

import pytest

from hightide import Broker, BrokerConfig
from hightide.client import BrokerConnection
from hightide.cluster.controller import NewTopic
from hightide.log.partition_log import PartitionLog
from hightide.protocol.records import build_batch

from tests.waiting import async_wait_until

TOPIC = "t"
MAX_WAIT_MS = 30_000  # never reached in these tests: each completes on its own condition


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Env:
    """An embedded broker, a consumer and a producer connection, and a read counter."""

    def __init__(self, broker: Broker, consumer: BrokerConnection, producer: BrokerConnection,
                 reads: list[tuple[int, int]]) -> None:
        self.broker, self.consumer, self.producer, self.reads = broker, consumer, producer, reads

    async def create(self, partitions: int = 2, **configs: str) -> None:
        b = self.broker
        _, records = b.controller.create_topics(b.image, [NewTopic(TOPIC, partitions, configs=configs)])
        await _commit(b, records)

    async def produce(self, partition: int, value: bytes, n: int = 1) -> None:
        batch = build_batch([(None, value, [], int(time.time() * 1000))] * n)
        resp = await self.producer.request(0, 9, {
            "transactional_id": None, "acks": -1, "timeout": 10_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]})
        assert resp.responses[0].partition_responses[0].error_code == 0

    def fetch(self, partitions: list[tuple[int, int]], min_bytes: int, pmax: int = 1 << 20) -> asyncio.Task:
        body = {"replica_id": -1, "max_wait": MAX_WAIT_MS, "min_bytes": min_bytes, "max_bytes": 50 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                "forgotten_topics_data": [], "topics": [{"topic": TOPIC, "topic_id": None, "partitions": [
                    {"partition": p, "fetch_offset": off, "partition_max_bytes": pmax, "current_leader_epoch": -1,
                     "log_start_offset": -1, "last_fetched_epoch": -1} for p, off in partitions]}]}
        return asyncio.create_task(self.consumer.request(1, 12, body, timeout_s=MAX_WAIT_MS / 1000 + 10))

    async def parked(self, fetch: asyncio.Task, reads_before: int, partitions: int) -> None:
        """Wait until ``fetch`` did its first pass over ``partitions`` partitions and parked."""
        await async_wait_until(lambda: len(self.reads) >= reads_before + partitions, 10, what="the first read pass")
        await asyncio.sleep(0)  # let it reach the waiters
        assert not fetch.done()


async def _commit(b: Broker, records) -> None:
    done = b.metadata_writer.commit_metadata(records)
    if inspect.isawaitable(done):  # the metadata commit is async since its fsync left the loop
        await done


async def _env(tmp_path, monkeypatch, body) -> None:
    reads: list[tuple[int, int]] = []
    real_read = PartitionLog.read_records  # what Fetch reads with (bytes or a file region)

    def counting_read(self, offset, max_bytes, *, max_offset=None):
        result = real_read(self, offset, max_bytes, max_offset=max_offset)
        if os.path.basename(self.path).startswith(TOPIC + "-"):  # not the internal topics
            reads.append((offset, len(result.data)))
        return result

    monkeypatch.setattr(PartitionLog, "read_records", counting_read)
    cfg = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1})
    async with Broker(cfg, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
        consumer = BrokerConnection("127.0.0.1", b.port, "consumer")
        producer = BrokerConnection("127.0.0.1", b.port, "producer")
        await consumer.connect()
        await producer.connect()
        try:
            await body(Env(b, consumer, producer, reads))
        finally:
            await consumer.close()
            await producer.close()


def _records_bytes(resp) -> list[int]:
    return [len(p.records or b"") for t in resp.responses for p in t.partitions]


def test_many_small_appends_read_the_log_once_per_completion(tmp_path, monkeypatch):
    """The regression: 2 partitions, min_bytes 64 KiB, fed 2 KB at a time into one of
    them. Kafka reads each partition once when the fetch arrives and once when it
    completes; the old long-poll re-read both on each of the ~33 appends."""
    async def body(env: Env) -> None:
        await env.create(partitions=2)
        fetch = env.fetch([(0, 0), (1, 0)], min_bytes=64 << 10)
        await env.parked(fetch, 0, 2)
        appends = 0
        while not fetch.done():
            assert appends < 60, "the fetch did not complete at min_bytes"
            await env.produce(0, b"x" * 2000)
            appends += 1
            await asyncio.sleep(0)
        resp = await fetch
        sizes = _records_bytes(resp)
        assert sizes[0] >= 64 << 10 and sizes[1] == 0
        assert appends >= 30
        assert len(env.reads) == 4, env.reads  # 2 partitions x (arrival + completion)
        read_bytes = sum(n for _, n in env.reads)
        assert read_bytes == sizes[0], (read_bytes, sizes)
    run(_env(tmp_path, monkeypatch, body))


def test_bytes_accumulate_across_partitions_up_to_their_max_bytes(tmp_path, monkeypatch):
    async def body(env: Env) -> None:
        await env.create(partitions=2)
        fetch = env.fetch([(0, 0), (1, 0)], min_bytes=3000, pmax=2000)
        await env.parked(fetch, 0, 2)
        await env.produce(0, b"a" * 2500)  # counts 2000 (partition max bytes): not enough
        await env.produce(0, b"b" * 2500)  # still 2000 from partition 0
        await asyncio.sleep(0.05)
        assert not fetch.done()
        await env.produce(1, b"c" * 1500)  # 2000 + ~1560 >= 3000
        resp = await fetch
        assert [n > 0 for n in _records_bytes(resp)] == [True, True]
        assert len(env.reads) == 4, env.reads
    run(_env(tmp_path, monkeypatch, body))


def test_a_fetch_behind_on_an_older_segment_is_answered_at_once(tmp_path, monkeypatch):
    """Kafka's case F: data past the end of the fetch offset's segment cannot be read in
    the same pass (reads stay within one segment), so waiting would not help."""
    async def body(env: Env) -> None:
        await env.create(partitions=1, **{"segment.bytes": "3000"})
        for _ in range(3):  # ~2 KB batches: a new segment every other one
            await env.produce(0, b"s" * 2000)
        plog = env.broker.hosted.partition_log(TOPIC, 0)
        assert len(plog.segments) >= 2
        last_of_first = plog.segments[1].base_offset - 1
        t0 = time.monotonic()
        resp = await env.fetch([(0, last_of_first)], min_bytes=1 << 20)
        assert time.monotonic() - t0 < MAX_WAIT_MS / 2000
        assert 0 < _records_bytes(resp)[0] < 3000
    run(_env(tmp_path, monkeypatch, body))


def test_deleting_the_topic_answers_a_parked_fetch(tmp_path, monkeypatch):
    async def body(env: Env) -> None:
        await env.create(partitions=1)
        fetch = env.fetch([(0, 0)], min_bytes=1 << 20)
        await env.parked(fetch, 0, 1)
        b = env.broker
        _, records = b.controller.delete_topics(b.image, [TOPIC])
        await _commit(b, records)
        resp = await asyncio.wait_for(fetch, 10)
        assert resp.responses[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    run(_env(tmp_path, monkeypatch, body))


def test_records_deleted_past_the_fetch_offset_answer_out_of_range(tmp_path, monkeypatch):
    async def body(env: Env) -> None:
        await env.create(partitions=1)
        await env.produce(0, b"d" * 100, n=5)
        fetch = env.fetch([(0, 5)], min_bytes=1 << 20)
        await env.parked(fetch, 0, 1)
        await env.produce(0, b"d" * 100, n=5)
        env.broker.hosted.partition_log(TOPIC, 0).delete_records_before(8)
        await env.produce(0, b"e" * 100)  # the next append wakes it; positions show the change
        resp = await asyncio.wait_for(fetch, 10)
        assert resp.responses[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE
    run(_env(tmp_path, monkeypatch, body))


@pytest.mark.parametrize("roll", [False, True])
def test_max_wait_answers_with_what_there_is(tmp_path, monkeypatch, roll):
    async def body(env: Env) -> None:
        await env.create(partitions=1, **({"segment.bytes": "1500"} if roll else {}))
        request = {"replica_id": -1, "max_wait": 300, "min_bytes": 1 << 20, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                "forgotten_topics_data": [], "topics": [{"topic": TOPIC, "topic_id": None, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                     "log_start_offset": -1, "last_fetched_epoch": -1}]}]}
        fetch = asyncio.create_task(env.consumer.request(1, 12, request))
        await env.parked(fetch, 0, 1)
        await env.produce(0, b"m" * 1000)
        if not roll:
            await asyncio.sleep(0.05)
            assert not fetch.done()  # 1 KB of 1 MiB: keeps waiting
        await env.produce(0, b"m" * 1000)  # with roll: a new segment -> answered at once
        resp = await asyncio.wait_for(fetch, 10)
        assert _records_bytes(resp)[0] > 1000
    run(_env(tmp_path, monkeypatch, body))


def test_position_of_matches_the_bytes_a_read_returns(tmp_path):
    """PartitionLog.position_of: (segment base, batch position); bytes between two
    positions in one segment are exactly what a read between those offsets returns."""
    from hightide.log import LogConfig, OffsetOutOfRange
    from hightide.protocol.records import validate_batches

    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=2000, index_interval_bytes=300), 0,
                             clean_shutdown=True)
    try:
        assert plog.position_of(0) == (0, 0)
        ends = []
        for i in range(12):  # ~300-byte batches of 2 records: several segments
            b = build_batch([(None, bytes([i]) * 120, [], 0)] * 2)
            plog.append(b, validate_batches(b), 0)
            ends.append(plog.log_end_offset)
        assert len(plog.segments) >= 2
        first, second = plog.segments[0], plog.segments[1]
        assert plog.position_of(plog.log_end_offset) == (plog.segments[-1].base_offset, plog.segments[-1].size)
        assert plog.position_of(second.base_offset) == (second.base_offset, 0)
        seg, pos = plog.position_of(3)  # inside the second batch: that batch's start
        seg4, pos4 = plog.position_of(4)
        assert seg == seg4 == 0 and 0 < pos < pos4
        assert pos4 - pos == len(plog.read(2, 1 << 20, max_offset=4).data)
        assert plog.position_of(second.base_offset - 1)[0] == first.base_offset
        for bad in (-1, plog.log_end_offset + 1):
            with pytest.raises(OffsetOutOfRange):
                plog.position_of(bad)
    finally:
        plog.close()
