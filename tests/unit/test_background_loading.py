"""Issue 33: a restarted broker listens before its partition logs are loaded, answers a
partition still loading with NOT_LEADER_OR_FOLLOWER (retriable, as Kafka answers for a
partition in the metadata that is not online on the broker yet), serves each partition
once its log is loaded, and writes no clean-shutdown marker when a stop comes before the
logs of an unclean start were all loaded (they were never recovered).

The loader thread is held at one partition (``slow-0``) by a storage that blocks there
until the test lets it go, so "still loading" is a state, not a race. No timing is
asserted: every wait is a poll with a generous deadline.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from hightide import Broker, BrokerConfig
from hightide.client import BrokerConnection
from hightide.disk import hosted_logs
from hightide.log.manager import CLEAN_SHUTDOWN
from hightide.log.storage import POSIX
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch

NOT_LEADER = ErrorCode.not_leader_or_follower
DEADLINE_S = 120.0


class HeldStorage:
    """POSIX, except that the loader thread waits at the directory of ``held`` until
    ``release`` is set (at most DEADLINE_S)."""

    def __init__(self, held: str) -> None:
        self.held = os.sep + held
        self.release = threading.Event()
        self.reached = threading.Event()

    def is_dir(self, path: str) -> bool:
        if path.endswith(self.held) and threading.current_thread().name.startswith("hightide-log-loader"):
            self.reached.set()
            self.release.wait(DEADLINE_S)
        return POSIX.is_dir(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(POSIX, name)


def _config() -> BrokerConfig:
    return BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1})


def _produce(topic: str, partitions: range) -> dict:
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    return {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": batch} for p in partitions]}]}


def _fetch(topic: str, partition: int) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "topic_id": None, "partitions": [
                {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}]}


async def _produce_codes(conn: BrokerConnection, topic: str, partitions: range) -> list[int]:
    resp = await conn.request(0, 9, _produce(topic, partitions))
    return [p.error_code for p in resp.responses[0].partition_responses]


async def _until(check, what: str) -> None:
    """Poll ``check()`` (async, truthy when done) until it holds (at most DEADLINE_S)."""
    async with asyncio.timeout(DEADLINE_S):
        while not await check():
            await asyncio.sleep(0.05)


async def _fill(data_dir: str) -> None:
    """Topics ``fast`` and ``slow`` (3 partitions each), one record in every partition."""
    async with Broker(_config(), data_dir=data_dir, listen=("127.0.0.1", 0)) as b:
        conn = BrokerConnection("127.0.0.1", b.port, "test")
        await conn.connect()
        try:
            resp = await conn.request(19, 5, {"topics": [
                {"name": n, "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []}
                for n in ("fast", "slow")], "timeout": 30_000, "validate_only": False})
            assert [t.error_code for t in resp.topics] == [0, 0]
            for topic in ("fast", "slow"):
                assert await _produce_codes(conn, topic, range(3)) == [0, 0, 0]
        finally:
            await conn.close()


def test_partitions_are_served_as_they_load(tmp_path, monkeypatch):
    monkeypatch.setattr(hosted_logs, "LOAD_BATCH", 1)  # one log per loader step: fast-* before slow-0
    data_dir = str(tmp_path)

    async def main() -> None:
        await _fill(data_dir)
        disk = HeldStorage("slow-0")
        b = Broker(_config(), data_dir=data_dir, listen=("127.0.0.1", 0), storage=disk)  # type: ignore[arg-type]
        b.background_load_min = 0
        await b.start()  # returns listening, with the loader still at work
        try:
            conn = BrokerConnection("127.0.0.1", b.port, "test")
            await conn.connect()
            try:
                async with asyncio.timeout(DEADLINE_S):
                    await asyncio.to_thread(disk.reached.wait, DEADLINE_S)
                assert disk.reached.is_set() and not b.hosted.loaded
                # loaded before slow-0: served
                await _until(lambda: _ok(conn, "fast", range(3)), "fast served")
                # still loading: retriable NOT_LEADER_OR_FOLLOWER on Produce, Fetch and ListOffsets
                assert b.hosted.loading("slow", 0)
                assert (await _produce_codes(conn, "slow", range(1))) == [NOT_LEADER]
                fetched = await conn.request(1, 12, _fetch("slow", 0))
                assert fetched.responses[0].partitions[0].error_code == NOT_LEADER
                listed = await conn.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": "slow", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                     "timestamp": -1}]}]})
                assert listed.topics[0].partitions[0].error_code == NOT_LEADER
                # the metadata lists it, led here
                md = await conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
                slow = next(t for t in md.topics if t.name == "slow")
                assert [p.leader_id for p in slow.partitions] == [b.node_id] * 3
                disk.release.set()
                await _until(lambda: _ok(conn, "slow", range(3)), "slow served")
                await _until(lambda: _true(b.hosted.loaded), "loading done")
                fetched = await conn.request(1, 12, _fetch("slow", 0))
                part = fetched.responses[0].partitions[0]
                assert part.error_code == 0 and part.high_watermark == 2  # the record from before and the new one
            finally:
                await conn.close()
        finally:
            disk.release.set()
            await b.stop()
        assert os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN))

    asyncio.run(main())


def test_a_stop_during_loading_after_an_unclean_start_marks_nothing_clean(tmp_path, monkeypatch):
    """The logs the loader never opened were not recovered after the unclean stop: the
    next start must recover them, so no clean-shutdown marker is written."""
    monkeypatch.setattr(hosted_logs, "LOAD_BATCH", 1)
    data_dir = str(tmp_path)

    async def main() -> None:
        await _fill(data_dir)
        os.unlink(os.path.join(data_dir, CLEAN_SHUTDOWN))  # as if killed
        disk = HeldStorage("slow-0")
        b = Broker(_config(), data_dir=data_dir, listen=("127.0.0.1", 0), storage=disk)  # type: ignore[arg-type]
        b.background_load_min = 0
        await b.start()
        try:
            async with asyncio.timeout(DEADLINE_S):
                await asyncio.to_thread(disk.reached.wait, DEADLINE_S)
            assert not b.hosted.loaded
            await b.stop()  # the loader is held at slow-0 all along
        finally:
            disk.release.set()
        assert not os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN))
        async with asyncio.timeout(DEADLINE_S):  # the held loader thread ends its batch
            while any(t.name.startswith("hightide-log-loader") for t in threading.enumerate()):
                await asyncio.sleep(0.05)
        # the next start recovers and serves everything
        async with Broker(_config(), data_dir=data_dir, listen=("127.0.0.1", 0)) as b2:
            conn = BrokerConnection("127.0.0.1", b2.port, "test")
            await conn.connect()
            try:
                await _until(lambda: _ok(conn, "slow", range(3)), "slow served")
            finally:
                await conn.close()

    asyncio.run(main())


async def _ok(conn: BrokerConnection, topic: str, partitions: range) -> bool:
    return not any(await _produce_codes(conn, topic, partitions))


async def _true(value: bool) -> bool:
    return value


def test_logs_recovered_in_the_background_are_flushed_before_they_are_served(tmp_path):
    """After an unclean stop a recovered log is flushed when it opens again (the loader
    flushes a batch after one sync): every loaded log's recovery point is its end."""
    data_dir = str(tmp_path)

    async def main() -> None:
        await _fill(data_dir)
        os.unlink(os.path.join(data_dir, CLEAN_SHUTDOWN))  # as if killed
        b = Broker(_config(), data_dir=data_dir, listen=("127.0.0.1", 0))
        b.background_load_min = 0
        await b.start()
        try:
            await _until(lambda: _true(b.hosted.loaded), "loading done")
            loaded = {tp: plog for tp, plog in b.hosted.hosted_logs() if not tp[0].startswith("__")}
            assert set(loaded) == {(t, p) for t in ("fast", "slow") for p in range(3)}
            for plog in loaded.values():
                assert not plog.recovery_flush_pending
                assert plog.recovery_point == plog.log_end_offset == 1
        finally:
            await b.stop()

    asyncio.run(main())
