"""AdminClient's data-plane calls (hightide.client.data) against in-process fake brokers:
partition leaders, Fetch of raw record batches, InitProducerId and Produce, with their
routing to the leader and their retries."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from hightide.client import (
    AdminClient,
    FetchResult,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PartitionLeaders,
    ProducerId,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from hightide.client.errors import ErrorCode, error_for
from hightide.client.testing import CLOSE, FakeCluster
from hightide.protocol.records import build_batch

VERSIONS = {**FakeCluster.DEFAULT_VERSIONS, 0: (3, 9), 1: (4, 12), 22: (0, 4)}
T0, T1, T2 = (TopicPartition("t", i) for i in range(3))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def client(c: FakeCluster, timeout_s: float = 10.0) -> AdminClient:
    return AdminClient(c.bootstrap, request_timeout_s=timeout_s, retry_backoff_s=0.01, max_backoff_s=0.05)


def batch(base: int, n: int) -> bytes:
    return build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(n)], base_offset=base)


def fetch_partition(index: int, records: bytes = b"", error: int = 0, hw: int = -1, lso: int = 0,
                    last_stable: int = -1) -> dict:
    return {"partition_index": index, "error_code": error, "high_watermark": hw,
            "last_stable_offset": last_stable, "log_start_offset": lso, "aborted_transactions": [],
            "preferred_read_replica": -1, "records": records}


def fetch_body(topic: str, partitions: list[dict]) -> dict:
    return {"throttle_time": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": topic, "partitions": partitions}]}


def produce_answer(code_for):
    """A Produce handler: ``code_for(node, topic, partition)`` → error code, or 0 for
    success with base offset ``100 * partition``."""
    def handler(node, header, req):
        topics = []
        for t in req.topic_data:
            parts = []
            for p in t.partition_data:
                code = code_for(node, t.name, p.index)
                parts.append({"index": p.index, "error_code": code, "base_offset": -1 if code else 100 * p.index,
                              "log_append_time": -1, "log_start_offset": 0, "record_errors": [],
                              "error_message": "nope" if code else None})
            topics.append({"name": t.name, "partition_responses": parts})
        return {"responses": topics, "throttle_time": 0}
    return handler


def sent(c: FakeCluster, node: int, api_key: int) -> list[list[tuple[str, int]]]:
    """Partitions of each request ``api_key`` that broker ``node`` received."""
    out = []
    for _, req in c.broker(node).requests_for(api_key):
        if api_key == 0:
            out.append([(t.name, p.index) for t in req.topic_data for p in t.partition_data])
        else:
            out.append([(t.topic, p.partition) for t in req.topics for p in t.partitions])
    return out


# -- partition leaders -------------------------------------------------------------------
def test_partition_leaders_groups_by_leader_and_reports_the_rest():
    async def main():
        async with FakeCluster(2, VERSIONS, topics={"t": {0: 1, 1: 2, 2: 2, 3: -1}}) as c, client(c) as admin:
            t3, t9, u0 = TopicPartition("t", 3), TopicPartition("t", 9), TopicPartition("u", 0)
            got = await admin.partition_leaders([T2, T0, ("t", 1), t3, t9, u0])
            assert isinstance(got, PartitionLeaders)
            by_leader, errors = got
            assert by_leader == {1: [T0], 2: [T2, T1]}
            assert set(errors) == {t3, t9, u0}
            assert errors[t3].code == ErrorCode.leader_not_available and errors[t3].retriable
            assert isinstance(errors[t9], UnknownTopicOrPartitionError)
            assert isinstance(errors[u0], UnknownTopicOrPartitionError)
    run(main())


# -- fetch -------------------------------------------------------------------------------
def test_fetch_asks_the_leader_and_returns_the_raw_batches():
    data = batch(5, 3) + batch(8, 2)

    async def main():
        async with FakeCluster(2, VERSIONS, topics={"t": {0: 1, 1: 2}}) as c:
            c.on(1, lambda node, h, req: fetch_body("t", [fetch_partition(1, data, hw=10, lso=2, last_stable=9)]))
            async with client(c) as admin:
                got = await admin.fetch(T1, 5, max_bytes=4096, isolation_level="read_committed",
                                        max_wait_ms=250, min_bytes=7)
                assert got == FetchResult(data, 10, 2, 9)
                assert type(got.records) is bytes
                assert sent(c, 1, 1) == [] and sent(c, 2, 1) == [[("t", 1)]]
                header, req = c.broker(2).requests_for(1)[0]
                assert header.api_version == 12
                p = req.topics[0].partitions[0]
                assert (p.fetch_offset, p.partition_max_bytes, req.max_bytes) == (5, 4096, 4096)
                assert req.isolation_level == 1 and req.min_bytes == 7
                assert req.max_wait.total_seconds() == 0.25
                assert req.replica_id == -1 and req.session_epoch == -1
                await admin.fetch(T1, 0)  # defaults: read_uncommitted
                assert c.broker(2).requests_for(1)[1][1].isolation_level == 0
    run(main())


def test_fetch_follows_a_leadership_move():
    async def main():
        async with FakeCluster(2, VERSIONS, topics={"t": {0: 1}}) as c:
            def answer(node, h, req):
                if node == 1:
                    c.topics["t"] = {0: 2}  # the leader moves to broker 2
                    return fetch_body("t", [fetch_partition(0, error=ErrorCode.not_leader_or_follower)])
                return fetch_body("t", [fetch_partition(0, batch(0, 1), hw=1)])
            c.on(1, answer)
            async with client(c) as admin:
                got = await admin.fetch(T0, 0)
                assert got.high_watermark == 1 and got.records == batch(0, 1)
                assert [e for e in c.log if e[1] == 1] == [(1, 1), (2, 1)]
    run(main())


def test_fetch_retries_a_lost_connection():
    async def main():
        async with FakeCluster(1, VERSIONS, topics={"t": {0: 1}}) as c:
            calls = []

            def answer(node, h, req):
                calls.append(node)
                return CLOSE if len(calls) == 1 else fetch_body("t", [fetch_partition(0, b"", hw=0)])
            c.on(1, answer)
            async with client(c) as admin:
                assert await admin.fetch(T0, 0) == FetchResult(b"", 0, 0, -1)
                assert len(calls) == 2 and c.broker(1).connections == 2
    run(main())


def test_fetch_offset_out_of_range_is_not_retried():
    async def main():
        async with FakeCluster(1, VERSIONS, topics={"t": {0: 1}}) as c:
            c.on(1, lambda node, h, req: fetch_body("t", [fetch_partition(0, error=ErrorCode.offset_out_of_range)]))
            async with client(c) as admin:
                with pytest.raises(OffsetOutOfRangeError) as e:
                    await admin.fetch(T0, 3)
                assert isinstance(e.value, KafkaError) and not e.value.retriable
                assert "t-0 offset 3" in str(e.value)
                assert len(sent(c, 1, 1)) == 1
                # error_for maps the code to the class everywhere
                assert type(error_for(ErrorCode.offset_out_of_range)) is OffsetOutOfRangeError
    run(main())


def test_fetch_gives_up_after_the_request_timeout():
    async def main():
        async with FakeCluster(1, VERSIONS, topics={"t": {0: 1}}) as c:
            c.on(1, lambda node, h, req: fetch_body("t", [fetch_partition(0, error=ErrorCode.not_leader_or_follower)]))
            async with client(c, timeout_s=0.3) as admin:
                with pytest.raises(NotLeaderOrFollowerError):
                    await admin.fetch(T0, 0)
                assert len(sent(c, 1, 1)) >= 3
            async with client(c, timeout_s=0.3) as admin:
                with pytest.raises(UnknownTopicOrPartitionError):
                    await admin.fetch(TopicPartition("nope", 0), 0)
    run(main())


# -- init producer id --------------------------------------------------------------------
def test_init_producer_id_retries_retriable_errors():
    async def main():
        async with FakeCluster(1, VERSIONS) as c:
            answers = [ErrorCode.coordinator_load_in_progress, 0]

            def answer(node, h, req):
                code = answers.pop(0)
                return {"throttle_time": 0, "error_code": code, "producer_id": -1 if code else 4321,
                        "producer_epoch": -1 if code else 3}
            c.on(22, answer)
            async with client(c) as admin:
                got = await admin.init_producer_id()
                assert got == ProducerId(4321, 3) and got.epoch == 3
                pid, epoch = got
                assert (pid, epoch) == (4321, 3)
                reqs = c.broker(1).requests_for(22)
                assert len(reqs) == 2 and reqs[0][1].transactional_id is None
                assert reqs[0][1].producer_id == -1
    run(main())


# -- produce -----------------------------------------------------------------------------
def test_produce_sends_one_request_per_leader():
    async def main():
        async with FakeCluster(2, VERSIONS, topics={"t": {0: 1, 1: 2, 2: 2}, "u": {0: 2}}) as c:
            c.on(0, produce_answer(lambda node, t, p: 0))
            async with client(c) as admin:
                u0 = TopicPartition("u", 0)
                batches = {T0: batch(0, 1), T1: batch(0, 2), T2: batch(0, 3), u0: batch(0, 4)}
                got = await admin.produce(batches, acks=1, timeout_ms=1234)
                assert got == {T0: 0, T1: 100, T2: 200, u0: 0}
                assert sent(c, 1, 0) == [[("t", 0)]]
                assert sorted(sent(c, 2, 0)[0]) == [("t", 1), ("t", 2), ("u", 0)]
                header, req = c.broker(2).requests_for(0)[0]
                assert header.api_version == 9
                assert req.acks == 1 and req.timeout.total_seconds() == 1.234 and req.transactional_id is None
                recs = {(t.name, p.index): p.records for t in req.topic_data for p in t.partition_data}
                assert recs[("u", 0)] == batches[u0]
                assert await admin.produce({}) == {}
                with pytest.raises(ValueError):
                    await admin.produce(batches, acks=0)
    run(main())


def test_produce_retries_only_what_was_not_acknowledged():
    async def main():
        async with FakeCluster(2, VERSIONS, topics={"t": {0: 1, 1: 2, 2: 2}}) as c:
            def code_for(node, t, p):
                if node == 2 and p == 1:
                    c.topics["t"] = {0: 1, 1: 1, 2: 2}  # t-1 moves to broker 1
                    return ErrorCode.not_leader_or_follower
                return 0
            c.on(0, produce_answer(code_for))
            async with client(c) as admin:
                got = await admin.produce({T0: batch(0, 1), T1: batch(0, 1), T2: batch(0, 1)})
                assert got == {T0: 0, T1: 100, T2: 200}
                # t-0 and t-2 were acknowledged the first time: only t-1 is sent again
                assert sent(c, 1, 0) == [[("t", 0)], [("t", 1)]]
                assert sorted(sent(c, 2, 0)[0]) == [("t", 1), ("t", 2)] and len(sent(c, 2, 0)) == 1
    run(main())


def test_produce_retries_a_lost_connection():
    async def main():
        async with FakeCluster(1, VERSIONS, topics={"t": {0: 1}}) as c:
            handler = produce_answer(lambda node, t, p: 0)
            calls = []

            def answer(node, h, req):
                calls.append(node)
                return CLOSE if len(calls) == 1 else handler(node, h, req)
            c.on(0, answer)
            async with client(c) as admin:
                assert await admin.produce({T0: batch(0, 1)}) == {T0: 0}
                assert len(calls) == 2
    run(main())


def test_produce_raises_a_non_retriable_error_at_once():
    async def main():
        async with FakeCluster(2, VERSIONS, topics={"t": {0: 1, 1: 2}}) as c:
            c.on(0, produce_answer(lambda node, t, p: ErrorCode.out_of_order_sequence_number if p == 1
                                   else (ErrorCode.not_enough_replicas if node == 1 else 0)))
            async with client(c) as admin:
                with pytest.raises(KafkaError) as e:
                    await admin.produce({T0: batch(0, 1), T1: batch(0, 1)})
                assert e.value.code == ErrorCode.out_of_order_sequence_number
                assert "t-1: nope" in str(e.value)
                assert len(sent(c, 2, 0)) == 1 and len(sent(c, 1, 0)) == 1
            async with client(c, timeout_s=0.3) as admin:
                with pytest.raises(UnknownTopicOrPartitionError):
                    await admin.produce({TopicPartition("nope", 0): batch(0, 1)})
    run(main())


# -- the Spark parts use only this public API -------------------------------------------
def test_spark_package_uses_no_private_attributes_of_other_objects():
    """Nothing in hightide.spark reaches into another object's ``_private`` attributes
    (``self._x`` and ``cls._x`` are its own). PySpark's ``StreamingQuery._jsq`` has no
    public equivalent and is allowed."""
    allowed = {("progress.py", "_jsq")}
    root = Path(__file__).resolve().parents[2] / "src" / "hightide" / "spark"
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not (node.attr.startswith("__") and node.attr.endswith("__")) \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    and (path.name, node.attr) not in allowed:
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert not found, found
