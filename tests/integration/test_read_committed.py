"""read_committed against the log's transactions (issue 16), with real clients.

Transactions are written through the broker's own paths without depending on the
transaction coordinator: transactional batches by Produce on the wire with a verifier
that accepts every partition (KIP-890's check is the coordinator's business), markers
with ``PartitionLog.append_marker`` on the broker's loop. The crash test prepares the
log with the log API between two runs of a ``hightide serve`` process (killed with -9
each time)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from hightide.log import LogConfig, PartitionLog
from hightide.log.storage import POSIX
from hightide.log.txn_index import txn_index_path
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, validate_batches

from ..rawkafka import RawClient
from ..reliability.embedded import EmbeddedBroker
from ..waiting import wait_until
from .clients import confluent_create_topic

pytestmark = pytest.mark.integration


class AcceptAll:
    """A TxnVerifier that confirms every partition (the coordinator is not under test)."""

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode:
        return ErrorCode.none


def _batch(pid: int, seq: int, values: list[bytes], *, txn: bool = True) -> bytes:
    return build_batch([(b"k", v, [], 1_700_000_000_000) for v in values], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=txn)


def _produce(c: RawClient, topic: str, batch: bytes, transactional_id: str | None = "tx") -> Any:
    r = c.request(0, 9, {"transactional_id": transactional_id, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return r.responses[0].partition_responses[0]


def _list_offset(c: RawClient, topic: str, isolation: int) -> int:
    r = c.request(2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def _consume(bootstrap: str, topic: str, isolation: str, want: int, timeout: float = 20) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        # and nothing more arrives
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


@pytest.fixture
def broker(tmp_path: Path):
    eb = EmbeddedBroker(tmp_path / "data", POSIX)
    eb.broker.services = dataclasses.replace(eb.broker.services, txn_verifier=AcceptAll())
    eb.start()
    try:
        yield eb
    finally:
        eb.stop()


def _marker(eb: EmbeddedBroker, topic: str, pid: int, commit: bool) -> int:
    def write() -> int:
        plog = eb.broker.hosted.partition_log(topic, 0)
        assert plog is not None
        off = plog.append_marker(pid, 0, commit, 0, int(time.time() * 1000))
        eb.broker.waiters.wake((topic, 0))
        return off
    return eb.call(write)


def test_aborted_data_is_invisible_to_read_committed_only(broker: EmbeddedBroker) -> None:
    topic = "rc-" + uuid.uuid4().hex[:6]
    confluent_create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as c:
        assert _produce(c, topic, _batch(-1, -1, [b"plain-0"], txn=False), None).error_code == 0
        assert _produce(c, topic, _batch(1000, 0, [b"abort-0", b"abort-1"])).error_code == 0
        assert _produce(c, topic, _batch(1001, 0, [b"commit-0"])).error_code == 0
        assert _produce(c, topic, _batch(1000, 2, [b"abort-2"])).error_code == 0
        assert _produce(c, topic, _batch(1001, 1, [b"commit-1"])).error_code == 0
        # transactional records without a transactional id: refused as Kafka does
        assert _produce(c, topic, _batch(1002, 0, [b"x"]), None).error_code == \
            ErrorCode.transactional_id_authorization_failed
        assert _list_offset(c, topic, 1) == 1  # the LSO: txn 1000 starts at 1
        assert _list_offset(c, topic, 0) == 6
        _marker(broker, topic, 1000, commit=False)
        assert _list_offset(c, topic, 1) == 3  # txn 1001 (offset 3) is still open
        _marker(broker, topic, 1001, commit=True)
        assert _produce(c, topic, _batch(-1, -1, [b"plain-1"], txn=False), None).error_code == 0
        assert _list_offset(c, topic, 1) == _list_offset(c, topic, 0) == 9
    committed = [b"plain-0", b"commit-0", b"commit-1", b"plain-1"]
    everything = [b"plain-0", b"abort-0", b"abort-1", b"commit-0", b"abort-2", b"commit-1", b"plain-1"]
    assert _consume(broker.bootstrap, topic, "read_committed", 4) == committed
    assert _consume(broker.bootstrap, topic, "read_uncommitted", 7) == everything
    assert _kafka_python(broker.bootstrap, topic, "read_committed", 4) == committed
    assert _kafka_python(broker.bootstrap, topic, "read_uncommitted", 7) == everything
    assert asyncio.run(_aiokafka(broker.bootstrap, topic, "read_committed", 4)) == committed
    assert asyncio.run(_aiokafka(broker.bootstrap, topic, "read_uncommitted", 7)) == everything


def _kafka_python(bootstrap: str, topic: str, isolation: str, want: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=1500)
    try:
        c.assign([KTP(topic, 0)])
        c.seek(KTP(topic, 0), 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = c.poll(timeout_ms=300)
            got += [m.value for msgs in batch.values() for m in msgs]
            if len(got) >= want and not batch:
                break
        return got
    finally:
        c.close()


async def _aiokafka(bootstrap: str, topic: str, isolation: str, want: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                         auto_offset_reset="earliest")
    await c.start()
    try:
        c.assign([ATP(topic, 0)])
        await c.seek_to_beginning(ATP(topic, 0))
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=300)
            got += [m.value for msgs in batch.values() for m in msgs]
            if len(got) >= want and not batch:
                break
        return got
    finally:
        await c.stop()


def test_parked_read_committed_fetch_wakes_when_the_marker_moves_the_lso(broker: EmbeddedBroker) -> None:
    topic = "rcw-" + uuid.uuid4().hex[:6]
    confluent_create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as c:
        assert _produce(c, topic, _batch(2000, 0, [b"t-0", b"t-1"])).error_code == 0
    got: list[bytes] = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-wake", "isolation.level":
                         "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 10000})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                m = consumer.poll(0.1)
                if m is not None and m.error() is None:
                    got.append(m.value())

        th = threading.Thread(target=poll)
        th.start()
        try:
            time.sleep(1.5)  # fixed on purpose: the fetch must be parked at the LSO by now, and see nothing
            assert got == []
            started = time.monotonic()
            _marker(broker, topic, 2000, commit=True)
            wait_until(lambda: len(got) == 2, 5, what="the committed records after the marker")
            # woken by the marker, not by fetch.wait.max.ms running out
            assert time.monotonic() - started < 5
        finally:
            done.set()
            th.join()
    finally:
        consumer.close()
    assert got == [b"t-0", b"t-1"]


def test_lso_and_aborted_index_survive_kill_9(fresh_server, tmp_path: Path) -> None:
    topic = "rck-" + uuid.uuid4().hex[:6]
    data = tmp_path / "data"
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic, 1)
    srv.kill9()
    # A crashed broker's log: an aborted, a committed and an open transaction, the last
    # process killed before any clean shutdown (abandon = no flush, no snapshot at the end).
    plog = PartitionLog.open(str(data / f"{topic}-0"), LogConfig(), 0, clean_shutdown=False)
    for pid, seq, values in ((10, 0, [b"a0", b"a1"]), (11, 0, [b"c0"]), (10, 2, [b"a2"])):
        b = _batch(pid, seq, values)
        plog.append(b, validate_batches(b), 1)
    plog.append_marker(10, 0, False, 0, 1)
    plog.append_marker(11, 0, True, 0, 1)
    b = _batch(12, 0, [b"open-0"])
    open_first = plog.append(b, validate_batches(b), 1).base_offset
    b = _batch(-1, -1, [b"plain"], txn=False)
    plog.append(b, validate_batches(b), 1)
    assert plog.last_stable_offset == open_first == 6
    plog.abandon()
    assert (data / f"{topic}-0" / Path(txn_index_path("", 0)).name).exists()
    for _ in range(2):
        srv = fresh_server()
        try:
            with RawClient(srv.bootstrap) as c:
                assert _list_offset(c, topic, 1) == 6
                assert _list_offset(c, topic, 0) == 8
            assert _consume(srv.bootstrap, topic, "read_committed", 1) == [b"c0"]
            assert _consume(srv.bootstrap, topic, "read_uncommitted", 5) == \
                [b"a0", b"a1", b"c0", b"a2", b"open-0", b"plain"]
        finally:
            srv.kill9()


def _fetch(c: RawClient, topic: str, offset: int, isolation: int, max_wait_ms: int) -> Any:
    body = {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [], "topics": [{"topic": topic, "topic_id": None, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                 "log_start_offset": -1, "last_fetched_epoch": -1}]}]}
    return c.request(1, 12, body).responses[0].partitions[0]


def test_read_committed_fetch_past_the_lso_waits_and_answers_the_fields(broker: EmbeddedBroker) -> None:
    topic = "rcf-" + uuid.uuid4().hex[:6]
    confluent_create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as c:
        assert _produce(c, topic, _batch(3000, 0, [b"o-0", b"o-1"])).error_code == 0  # open: LSO 0
        assert _produce(c, topic, _batch(-1, -1, [b"p"], txn=False), None).error_code == 0  # offset 2
        started = time.monotonic()
        p = _fetch(c, topic, 2, 1, 800)  # past the LSO, below the HW: nothing to read yet
        assert time.monotonic() - started >= 0.7  # parked until max_wait, not answered at once
        assert (p.error_code, p.high_watermark, p.last_stable_offset) == (0, 3, 0) and not p.records
        assert p.aborted_transactions == ()
        u = _fetch(c, topic, 0, 0, 0)  # read_uncommitted: everything, the LSO field set too
        assert (u.last_stable_offset, u.aborted_transactions) == (0, None)
        _marker(broker, topic, 3000, commit=False)
        r = _fetch(c, topic, 0, 1, 0)
        assert r.last_stable_offset == 4
        assert [(a.producer_id, a.first_offset) for a in r.aborted_transactions] == [(3000, 0)]
