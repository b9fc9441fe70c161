"""AdminClient routing and retries against in-process fake brokers (a fake cluster of
two brokers where it matters): metadata, per-leader ListOffsets, controller requests."""

from __future__ import annotations

import asyncio

import pytest

from hightide.client import (
    AdminClient,
    KafkaConnectionError,
    KafkaError,
    ListOffsetsResult,
    NewTopic,
    TopicAlreadyExistsError,
    TopicPartition,
    UnknownTopicOrPartitionError,
    parse_servers,
)
from hightide.client.errors import ErrorCode
from hightide.client.testing import FakeBroker, FakeCluster, list_offsets_answer

ALL = FakeCluster.DEFAULT_VERSIONS


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_parse_servers():
    assert parse_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_servers(["[::1]:9092"]) == [("::1", 9092)]
    with pytest.raises(ValueError):
        parse_servers("nohost")
    with pytest.raises(ValueError):
        parse_servers("")


def test_bootstrap_skips_unreachable_servers_and_reads_metadata():
    async def main():
        async with FakeCluster(2, topics={"t": {0: 1, 1: 2}}) as c:
            dead = FakeBroker()
            await dead.start()
            dead_addr = dead.bootstrap
            await dead.close()
            async with AdminClient([dead_addr, c.bootstrap]) as admin:
                md = await admin.metadata()
                assert set(md.brokers) == {1, 2} and md.controller_id == 1
                assert md.cluster_id == "fake-cluster"
                assert md.topics["t"].partitions[1].leader == 2
                assert md.leader_for(TopicPartition("t", 0)) == 1
                assert await admin.list_topics() == ["t"]
                with pytest.raises(UnknownTopicOrPartitionError):
                    await admin.describe_topics(["t", "missing"])
            with pytest.raises(KafkaConnectionError):
                await AdminClient(dead_addr, request_timeout_s=2).start()
    run(main())


def test_list_offsets_goes_to_each_leader_with_the_right_specs():
    async def main():
        async with FakeCluster(2, topics={"t": {0: 1, 1: 2, 2: 2}}) as c:
            seen = []

            def values(node, topic, part, ts):
                seen.append((node, part, ts))
                return {-2: (0, -1), -1: (10 + part, -1), -3: (3, 900)}.get(ts, (5, ts))
            c.on(2, list_offsets_answer(values))
            async with AdminClient(c.bootstrap) as admin:
                tp = [TopicPartition("t", i) for i in range(3)]
                got = await admin.list_offsets({tp[0]: "earliest", tp[1]: "latest",
                                                tp[2]: "max_timestamp"})
                assert got == {tp[0]: (0, -1), tp[1]: (11, -1), tp[2]: (3, 900)}
                assert isinstance(got[tp[2]], ListOffsetsResult)
                assert sorted(seen) == [(1, 0, -2), (2, 1, -1), (2, 2, -3)]
                req = c.broker(2).requests_for(2)[-1]
                assert req[0].api_version >= 7  # max timestamp needs v7
                await admin.list_offsets({tp[0]: 1234}, isolation_level="read_committed")
                _, r = c.broker(1).requests_for(2)[-1]
                assert r.isolation_level == 1 and r.topics[0].partitions[0].timestamp == 1234
                assert r.replica_id == -1
                with pytest.raises(ValueError):
                    await admin.list_offsets({tp[0]: "newest"})
    run(main())


def test_list_offsets_retries_not_leader_after_refreshing_metadata():
    async def main():
        async with FakeCluster(2, topics={"t": {0: 1}}) as c:
            def values(node, topic, part, ts):
                if node == 1:
                    c.topics["t"] = {0: 2}  # leadership moved
                    return ErrorCode.not_leader_or_follower
                return (42, -1)
            c.on(2, list_offsets_answer(values))
            async with AdminClient(c.bootstrap, retry_backoff_s=0.01) as admin:
                tp = TopicPartition("t", 0)
                assert await admin.list_offsets({tp: "latest"}) == {tp: (42, -1)}
                assert [n for n, k in c.log if k == 2] == [1, 2]
    run(main())


def test_list_offsets_errors_per_partition():
    async def main():
        versions = {**ALL, 2: (1, 6)}  # no max-timestamp support
        async with FakeCluster(1, versions, topics={"t": {0: 1, 1: 1}}) as c:
            c.on(2, list_offsets_answer(lambda n, t, p, ts: (7, -1) if p == 0 else ErrorCode.offset_out_of_range))
            async with AdminClient(c.bootstrap) as admin:
                t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
                got = await admin.list_offsets({t0: "max_timestamp", t1: "latest",
                                                TopicPartition("nope", 0): "latest"},
                                               raise_on_error=False)
                assert got[t0].code == ErrorCode.unsupported_version
                assert got[t1].code == ErrorCode.offset_out_of_range
                assert isinstance(got[TopicPartition("nope", 0)], UnknownTopicOrPartitionError)
                with pytest.raises(KafkaError) as e:
                    await admin.list_offsets({t1: "latest"})
                assert e.value.code == ErrorCode.offset_out_of_range
                assert await admin.list_offsets({t0: "earliest"}) == {t0: (7, -1)}
    run(main())


def test_create_topics_goes_to_controller_and_retries_not_controller():
    async def main():
        async with FakeCluster(2) as c:
            c.controller = 2
            calls = []

            def create(node, header, req):
                calls.append((node, [t.name for t in req.topics]))
                results = []
                for t in req.topics:
                    if len(calls) == 1 and t.name == "a":
                        code = ErrorCode.not_controller
                        c.controller = 1
                    else:
                        code = ErrorCode.topic_already_exists if t.name == "b" else 0
                    results.append({"name": t.name, "topic_id": None, "error_code": code,
                                    "error_message": None, "num_partitions": -1,
                                    "replication_factor": -1, "configs": []})
                return {"throttle_time": 0, "topics": results}
            c.on(19, create)
            async with AdminClient(c.bootstrap, retry_backoff_s=0.01) as admin:
                out = await admin.create_topics([NewTopic("a", 3, 1, {"cleanup.policy": "compact"}), "b"],
                                                raise_on_error=False)
                assert out["a"] is None and isinstance(out["b"], TopicAlreadyExistsError)
                assert calls == [(2, ["a", "b"]), (1, ["a"])]
                _, req = c.broker(2).requests_for(19)[0]
                assert req.topics[0].num_partitions == 3 and req.topics[0].configs[0].name == "cleanup.policy"
                assert req.topics[1].num_partitions == -1
                with pytest.raises(TopicAlreadyExistsError):
                    await admin.create_topics(["b"])
    run(main())


def test_delete_topics_and_create_partitions_bodies():
    async def main():
        async with FakeCluster(1) as c:
            c.on(20, lambda n, h, r: {"throttle_time": 0, "responses": [
                {"name": t.name, "topic_id": None, "error_code": 0, "error_message": None} for t in r.topics]})
            c.on(37, lambda n, h, r: {"throttle_time": 0, "results": [
                {"name": t.name, "error_code": 0 if t.count > 1 else ErrorCode.invalid_partitions,
                 "error_message": "too few"} for t in r.topics]})
            async with AdminClient(c.bootstrap) as admin:
                assert await admin.delete_topics(["x", "y"]) == {"x": None, "y": None}
                h, r = c.broker(1).requests_for(20)[0]
                assert h.api_version == 6 and [t.name for t in r.topics] == ["x", "y"]
                out = await admin.create_partitions({"x": 4, "y": 1}, raise_on_error=False)
                assert out["x"] is None and out["y"].code == ErrorCode.invalid_partitions
                assert "too few" in str(out["y"])
    run(main())


def test_connections_are_reused_per_broker():
    async def main():
        async with FakeCluster(2, topics={"t": {0: 1, 1: 2}}) as c:
            c.on(2, list_offsets_answer(lambda n, t, p, ts: (1, -1)))
            async with AdminClient(c.bootstrap) as admin:
                tps = {TopicPartition("t", 0): "latest", TopicPartition("t", 1): "latest"}
                for _ in range(3):
                    await admin.list_offsets(tps)
                # broker 1: the bootstrap connection is adopted for node 1
                assert c.broker(1).connections == 1 and c.broker(2).connections == 1
    run(main())


def test_first_records_answers_every_covered_offset_from_one_fetch():
    from hightide.client.admin import _first_records
    from hightide.protocol.records import build_batch

    def batch(base, n, ts0, control=False):
        return build_batch([(None, b"v", [], ts0 + i) for i in range(n)], base_offset=base, is_control=control)
    data = batch(0, 3, 100) + batch(3, 1, 0, control=True) + batch(4, 3, 200)
    got = _first_records(data, [0, 2, 3, 5, 7, 9])
    # 3 is a control record: its answer is the next data record (4); 7 and 9 are past the data
    assert got == {0: ListOffsetsResult(0, 100), 2: ListOffsetsResult(2, 102),
                   3: ListOffsetsResult(4, 200), 5: ListOffsetsResult(5, 201)}
    assert _first_records(data[:-5], [4]) == {}  # a partial trailing batch answers nothing
    assert _first_records(b"", [0]) == {}
