"""Read-after-write across brokers (seed 004): a topic created and a config altered
through broker A are visible through broker B the moment A answers — 100 times, 0 misses
with ``metadata.read.consistency=acknowledged`` — while ``local`` (Kafka's behaviour)
shows the gap when B's link to the controller is slow (50 ms each way through the fault
proxy). A paused broker holds the lowest acknowledged offset back: the bounded wait
answers after ``metadata.read.max.wait.ms`` and the broker logs why."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from hightide.client.connection import BrokerConnection
from hightide.protocol.errors import ErrorCode

TOPIC = 2  # ConfigResource type


@dataclass
class Trials:
    topic_misses: int = 0
    config_misses: int = 0
    written: int = 0


async def _connect(address: str) -> BrokerConnection:
    host, port = address.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), "raw-test", request_timeout_s=30.0)
    await conn.connect()
    return conn


async def create(conn: BrokerConnection, name: str) -> None:
    v = conn.pick_version(19, 7, 2)
    resp = await conn.request(19, v, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                                  "assignments": [], "configs": []}],
                                      "timeout": 30000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.none, resp


async def alter(conn: BrokerConnection, name: str, value: str) -> None:
    v = conn.pick_version(44, 1)
    resp = await conn.request(44, v, {"resources": [{"resource_type": TOPIC, "resource_name": name, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": value}]}], "validate_only": False})
    assert resp.responses[0].error_code == ErrorCode.none, resp


async def topic_known(conn: BrokerConnection, name: str) -> bool:
    v = conn.pick_version(3, 12, 1)
    resp = await conn.request(3, v, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                     "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
    return bool(resp.topics[0].error_code == ErrorCode.none)


async def config_value(conn: BrokerConnection, name: str) -> str | None:
    v = conn.pick_version(32, 4, 1)
    resp = await conn.request(32, v, {"resources": [{"resource_type": TOPIC, "resource_name": name,
                                                     "configuration_keys": ["retention.ms"]}]})
    result = resp.results[0]
    if result.error_code != ErrorCode.none:
        return None
    return next((c.value for c in result.configs if c.name == "retention.ms"), None)


async def trials(writer_address: str, reader_address: str, n: int, prefix: str) -> Trials:
    """n rounds of: create a topic through the writer, read it through the reader at
    once; alter its retention.ms through the writer, read it through the reader at once."""
    out = Trials()
    w, r = await _connect(writer_address), await _connect(reader_address)
    try:
        for i in range(n):
            name = f"{prefix}-{i}"
            await create(w, name)
            out.written += 1
            if not await topic_known(r, name):
                out.topic_misses += 1
            value = str(60_000 + i)
            await alter(w, name, value)
            if await config_value(r, name) != value:
                out.config_misses += 1
    finally:
        await w.close()
        await r.close()
    return out


def test_acknowledged_reads_never_miss_a_write_made_through_another_broker(cluster) -> None:
    c = cluster(2, proxied=[1])
    c.proxies[1].set_latency(50, 50)  # broker 1 hears of every change ~100 ms late
    got = c.run(trials(c.address(0), c.address(1), 100, "ack"))
    assert (got.written, got.topic_misses, got.config_misses) == (100, 0, 0)


def test_local_reads_show_the_gap(cluster) -> None:
    c = cluster(2, proxied=[1], metadata_read_consistency="local")
    c.proxies[1].set_latency(50, 50)
    got = c.run(trials(c.address(0), c.address(1), 30, "local"))
    assert got.written == 30
    assert got.topic_misses > 0 and got.config_misses > 0, got  # the check above is real


def test_a_paused_broker_holds_writes_back_for_the_bounded_wait_and_it_is_logged(cluster) -> None:
    c = cluster(3, metadata_read_max_wait_ms=1000)
    c.pause(2)
    try:
        async def timed_create() -> float:
            conn = await _connect(c.address(0))
            try:
                t0 = time.monotonic()
                await create(conn, "while-paused")
                return time.monotonic() - t0
            finally:
                await conn.close()
        elapsed = c.run(timed_create())
    finally:
        c.resume(2)
    assert 0.9 <= elapsed < 3.0, elapsed  # held for metadata.read.max.wait.ms, then answered
    c.wait_until(lambda: "after metadata.read.max.wait.ms=1000 without read-after-write" in c.node(0).output(),
                 timeout=5, what="the read gate's warning in broker 0's log")
    line = next(x for x in c.node(0).output().splitlines() if "WARNING hightide.read_gate" in x)
    assert "the forwarded CreateTopics" in line and "lowest acknowledged offset is" in line


async def update_metadata_version(conn: BrokerConnection, level: int) -> None:
    v = conn.pick_version(57, 1, 1)
    resp = await conn.request(57, v, {"timeout": 30000, "validate_only": False, "feature_updates": [
        {"feature": "metadata.version", "max_version_level": level, "upgrade_type": 1}]})
    assert resp.error_code == ErrorCode.none, resp


async def finalized_metadata_version(conn: BrokerConnection) -> int | None:
    resp = await conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    return next((int(f.max_version_level) for f in resp.finalized_features if f.name == "metadata.version"), None)


def test_a_new_metadata_version_shows_in_api_versions_once_every_broker_has_it(cluster) -> None:
    c = cluster(3, metadata_read_max_wait_ms=500)

    async def upgrade_then_read(level: int) -> tuple[int | None, int | None]:
        w, r = await _connect(c.address(0)), await _connect(c.address(1))
        try:
            await update_metadata_version(w, level)
            return await finalized_metadata_version(r), await finalized_metadata_version(w)
        finally:
            await w.close()
            await r.close()

    assert c.run(upgrade_then_read(20)) == (20, 20)  # every broker has it when the write is answered
    c.pause(2)
    try:
        # broker 2 cannot apply level 21: the write is answered after the bounded wait,
        # but no broker shows 21 while the lowest acknowledged offset is below its record
        assert c.run(upgrade_then_read(21)) == (20, 20)

        async def shown() -> int | None:
            r = await _connect(c.address(1))
            try:
                return await finalized_metadata_version(r)
            finally:
                await r.close()
        # once broker 2 is fenced (session timeout) the others' acknowledgements cover 21
        c.wait_until(lambda: c.run(shown()) == 21, timeout=15, what="metadata.version 21 shown after the fencing")
    finally:
        c.resume(2)


async def all_topics(conn: BrokerConnection) -> set[str]:
    v = conn.pick_version(3, 12, 1)
    resp = await conn.request(3, v, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
    return {t.name for t in resp.topics if t.error_code == ErrorCode.none}


async def reads_going_backwards(c, writes: int) -> tuple[int, int]:
    """Create ``writes`` topics through broker 0 while reading every topic through
    brokers 1, 2, 1, 2, ... back to back; returns (reads, reads that missed a topic an
    earlier read had shown)."""
    import asyncio

    w = await _connect(c.address(0))
    readers = [await _connect(c.address(1)), await _connect(c.address(2))]
    done = asyncio.Event()

    async def write() -> None:
        for i in range(writes):
            await create(w, f"mono-{i}")
        done.set()
    writer = asyncio.ensure_future(write())
    seen: set[str] = set()
    reads = backwards = 0
    try:
        while not done.is_set():
            got = await all_topics(readers[reads % 2])
            reads += 1
            if not seen <= got:
                backwards += 1
            seen |= got
        await writer
    finally:
        for conn in [w, *readers]:
            await conn.close()
    return reads, backwards


def test_reads_on_different_brokers_never_go_backwards(cluster) -> None:
    c = cluster(3, proxied=[2])
    c.proxies[2].set_latency(50, 50)
    reads, backwards = c.run(reads_going_backwards(c, 40))
    assert reads >= 20 and backwards == 0, (reads, backwards)


def test_local_reads_on_different_brokers_can_go_backwards(cluster) -> None:
    c = cluster(3, proxied=[2], metadata_read_consistency="local")
    c.proxies[2].set_latency(50, 50)
    reads, backwards = c.run(reads_going_backwards(c, 40))
    assert backwards > 0, (reads, backwards)


def test_forwarded_write_without_a_controller_times_out_with_the_apis_error(cluster) -> None:
    c = cluster(2, proxied=[1])
    c.proxies[1].pause()  # broker 1 hears nothing from the controller (and is fenced later)
    try:
        async def main() -> tuple[int, float]:
            conn = await _connect(c.address(1))
            try:
                t0 = time.monotonic()
                resp = await conn.request(19, conn.pick_version(19, 7, 2), {
                    "topics": [{"name": "nowhere", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                "configs": []}], "timeout": 2000, "validate_only": False})
                return int(resp.topics[0].error_code), time.monotonic() - t0
            finally:
                await conn.close()
        code, elapsed = c.run(main())
    finally:
        c.proxies[1].resume()
    assert code == ErrorCode.request_timed_out and 1.5 <= elapsed < 6, (code, elapsed)
