"""Group APIs and lag against fake brokers: coordinator discovery and retries, the
OffsetFetch forms, ListGroups fan-out, and the two lag paths."""

from __future__ import annotations

import asyncio

import pytest

from hightide.client import (
    AdminClient,
    CoordinatorNotAvailableError,
    KafkaError,
    NonEmptyGroupError,
    TopicPartition,
)
from hightide.client.errors import ErrorCode
from hightide.client.testing import FakeCluster, list_offsets_answer
from hightide.protocol.offset_fetch_response import (
    GroupOffsets,
    PartitionOffset,
    encode_offset_fetch_response,
)

ALL = FakeCluster.DEFAULT_VERSIONS


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def coordinator_answer(node_id_for, errors=None):
    """FindCoordinator handler for any version; ``errors`` is a list of codes to answer
    first (one per request), then ``node_id_for(key)``."""
    pending = list(errors or [])

    def handler(node, header, req):
        code = pending.pop(0) if pending else 0
        keys = list(req.coordinator_keys) if header.api_version >= 4 else [req.key]
        entries = [{"key": k, "node_id": node_id_for(k) if not code else -1, "host": "127.0.0.1",
                    "port": 0, "error_code": code, "error_message": None} for k in keys]
        if header.api_version >= 4:
            return {"throttle_time": 0, "coordinators": entries}
        e = entries[0]
        return {"throttle_time": 0, **{k: v for k, v in e.items() if k != "key"}}
    return handler


def fix_ports(c: FakeCluster, handler):
    """FindCoordinator answers must carry real ports: patch them from the cluster."""
    def wrapped(node, header, req):
        body = handler(node, header, req)
        for e in body.get("coordinators", [body]):
            if e.get("node_id", -1) > 0:
                e["port"] = c.broker(e["node_id"]).port
        return body
    return wrapped


def offset_fetch_raw(groups_for):
    """OffsetFetch handler returning hightide's hand-encoded frame (with extension tags)."""
    def handler(node, header, req):
        if header.api_version >= 8:
            groups = [groups_for(node, g.group_id) for g in req.groups]
        else:
            groups = [groups_for(node, req.group_id)]
        return encode_offset_fetch_response(header.api_version, header.correlation_id, groups)
    return handler


def test_find_coordinator_retries_coordinator_errors_and_caches():
    async def main():
        async with FakeCluster(2) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 2, [
                ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress])))
            async with AdminClient(c.bootstrap, retry_backoff_s=0.01) as admin:
                coord = await admin.find_coordinator("g")
                assert coord.node_id == 2 and coord.port == c.broker(2).port
                assert await admin.find_coordinator("g") == coord  # cached
                assert len([k for _, k in c.log if k == 10]) == 3
                h, req = c.broker(1).requests_for(10)[0]
                assert h.api_version == 6 and list(req.coordinator_keys) == ["g"]
    run(main())


def test_find_coordinator_gives_up_after_the_request_timeout():
    async def main():
        async with FakeCluster(1) as c:
            c.on(10, coordinator_answer(lambda k: 1, [ErrorCode.coordinator_not_available] * 1000))
            async with AdminClient(c.bootstrap, request_timeout_s=0.5, retry_backoff_s=0.02) as admin:
                with pytest.raises(CoordinatorNotAvailableError):
                    await admin.find_coordinator("g")
    run(main())


def test_find_coordinator_old_broker_uses_single_key_form():
    async def main():
        async with FakeCluster(1, {**ALL, 10: (0, 3)}) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 1)))
            async with AdminClient(c.bootstrap) as admin:
                got = await admin.find_coordinators(["a", "b"])
                assert set(got) == {"a", "b"}
                reqs = c.broker(1).requests_for(10)
                assert [h.api_version for h, _ in reqs] == [3, 3]
                assert sorted(r.key for _, r in reqs) == ["a", "b"]
    run(main())


def test_offset_fetch_not_coordinator_refinds_the_coordinator():
    async def main():
        async with FakeCluster(2) as c:
            where = {"g": 1}
            c.on(10, fix_ports(c, coordinator_answer(lambda k: where[k])))

            def groups_for(node, gid):
                if node == 1:
                    where["g"] = 2  # the group moved
                    return GroupOffsets(gid, ErrorCode.not_coordinator, [])
                return GroupOffsets(gid, 0, [("t", [PartitionOffset(0, 5, metadata="m")])])
            c.on(9, offset_fetch_raw(groups_for))
            async with AdminClient(c.bootstrap, retry_backoff_s=0.01) as admin:
                got = await admin.list_consumer_group_offsets("g")
                assert got[TP0].offset == 5 and got[TP0].metadata == "m"
                assert got[TP0].high_watermark is None  # no extension tags sent
                assert [n for n, k in c.log if k in (9, 10)] == [1, 1, 1, 2]
                h, req = c.broker(2).requests_for(9)[0]
                assert h.api_version == 9 and req.groups[0].group_id == "g"
                assert req.groups[0].topics is None
    run(main())


def test_offset_fetch_old_form_and_explicit_partitions():
    async def main():
        async with FakeCluster(1, {**ALL, 9: (1, 7)}) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 1)))
            c.on(9, offset_fetch_raw(lambda n, g: GroupOffsets(g, 0, [("t", [PartitionOffset(0, 3)])])))
            async with AdminClient(c.bootstrap) as admin:
                got = await admin.list_consumer_group_offsets("g", [TP0, TP1])
                assert got[TP0].offset == 3 and got[TP1].offset == -1
                h, req = c.broker(1).requests_for(9)[0]
                assert h.api_version == 7 and req.group_id == "g"
                assert [(t.name, list(t.partition_indexes)) for t in req.topics] == [("t", [0, 1])]
    run(main())


def test_alter_and_delete_offsets():
    async def main():
        async with FakeCluster(1) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 1)))
            c.on(8, lambda n, h, r: {"throttle_time": 0, "topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": ErrorCode.offset_metadata_too_large if p.committed_metadata == "big" else 0}
                for p in t.partitions]} for t in r.topics]})
            c.on(47, lambda n, h, r: {"error_code": 0, "throttle_time": 0, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                 "error_code": ErrorCode.group_subscribed_to_topic}
                                                for p in t.partitions]} for t in r.topics]})
            async with AdminClient(c.bootstrap) as admin:
                out = await admin.alter_consumer_group_offsets("g", {TP0: 10, TP1: (20, "big")},
                                                               raise_on_error=False)
                assert out[TP0] is None and out[TP1].code == ErrorCode.offset_metadata_too_large
                _, req = c.broker(1).requests_for(8)[0]
                assert req.generation_id_or_member_epoch == -1 and req.member_id == ""
                assert [(p.committed_offset, p.committed_metadata) for p in req.topics[0].partitions] == \
                    [(10, ""), (20, "big")]
                with pytest.raises(KafkaError):
                    await admin.alter_consumer_group_offsets("g", {TP1: (1, "big")})
                out = await admin.delete_consumer_group_offsets("g", [TP0], raise_on_error=False)
                assert out[TP0].code == ErrorCode.group_subscribed_to_topic
    run(main())


def test_list_groups_asks_every_broker_and_merges():
    async def main():
        async with FakeCluster(2) as c:
            def groups(node, header, req):
                names = {1: ["a", "b"], 2: ["c", "a"]}[node]
                return {"throttle_time": 0, "error_code": 0, "groups": [
                    {"group_id": g, "protocol_type": "consumer", "group_state": "Stable",
                     "group_type": "classic"} for g in names]}
            c.on(16, groups)
            async with AdminClient(c.bootstrap) as admin:
                got = await admin.list_groups(states=["Stable"])
                assert [g.group_id for g in got] == ["a", "b", "c"]
                assert got[0].state == "Stable" and got[0].group_type == "classic"
                for b in c.brokers:
                    h, req = b.requests_for(16)[0]
                    assert h.api_version == 5 and list(req.states_filter) == ["Stable"]
    run(main())


def test_describe_and_delete_groups_batched_per_coordinator():
    async def main():
        async with FakeCluster(2) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 1 if k < "m" else 2)))

            def describe(node, header, req):
                return {"throttle_time": 0, "groups": [
                    {"error_code": 0, "error_message": None, "group_id": g, "group_state": "Stable",
                     "protocol_type": "consumer", "protocol_data": "range", "authorized_operations": 0,
                     "members": [{"member_id": f"m-{g}", "group_instance_id": None, "client_id": "c",
                                  "client_host": "/1.2.3.4", "member_metadata": b"md",
                                  "member_assignment": b"as"}]} for g in req.groups]}
            c.on(15, describe)
            c.on(42, lambda n, h, r: {"throttle_time": 0, "results": [
                {"group_id": g, "error_code": ErrorCode.non_empty_group if g == "x" else 0}
                for g in r.groups_names]})
            async with AdminClient(c.bootstrap) as admin:
                got = await admin.describe_groups(["a", "b", "x"])
                assert got["x"].coordinator == 2 and got["a"].coordinator == 1
                assert got["a"].members[0].member_id == "m-a" and got["a"].protocol == "range"
                assert sorted(r.groups for _, r in c.broker(1).requests_for(15)) == [("a", "b")]
                out = await admin.delete_groups(["a", "x"], raise_on_error=False)
                assert out["a"] is None and isinstance(out["x"], NonEmptyGroupError)
    run(main())


def test_lag_two_call_path_reads_committed_before_end_offsets():
    async def main():
        async with FakeCluster(2, topics={"t": {0: 1, 1: 2}}) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 2)))
            c.on(9, offset_fetch_raw(lambda n, g: GroupOffsets(g, 0, [
                ("t", [PartitionOffset(0, 4), PartitionOffset(1, 50)]), ("gone", [PartitionOffset(0, 1)])])))
            c.on(2, list_offsets_answer(lambda n, t, p, ts: {-1: (10, -1), -2: (5, -1)}[ts]))
            async with AdminClient(c.bootstrap) as admin:
                lag = await admin.lag("g")
                assert (lag[TP0].committed, lag[TP0].high_watermark, lag[TP0].log_start_offset,
                        lag[TP0].lag) == (4, 10, 5, 6)
                assert lag[TP0].source == "list_offsets"
                assert lag[TP0].anomalies == ("committed_before_log_start",)
                assert lag[TP1].lag == -40 and "committed_past_end" in lag[TP1].anomalies
                gone = lag[TopicPartition("gone", 0)]
                assert gone.lag is None and gone.error == ErrorCode.unknown_topic_or_partition
                assert gone.anomalies == ("end_unknown",)
                order = [k for _, k in c.log if k in (9, 2)]
                assert order.index(9) < order.index(2) and order.count(9) == 1
    run(main())


def test_lag_uses_offset_fetch_extension_and_skips_list_offsets():
    async def main():
        async with FakeCluster(1, topics={"t": {0: 1, 1: 1}}) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 1)))
            c.on(9, offset_fetch_raw(lambda n, g: GroupOffsets(g, 0, [("t", [
                PartitionOffset(0, 4, high_watermark=10, log_start_offset=0, last_stable_offset=8),
                PartitionOffset(1, 2)])])))  # partition 1 without tags: falls back
            c.on(2, list_offsets_answer(lambda n, t, p, ts: {-1: (7, -1), -2: (0, -1)}[ts]))
            async with AdminClient(c.bootstrap) as admin:
                lag = await admin.lag("g")
                assert lag[TP0].source == "extension" and lag[TP0].lag == 6
                assert lag[TP0].last_stable_offset == 8
                assert lag[TP1].source == "list_offsets" and lag[TP1].lag == 5
                asked = [p.partition_index for _, r in c.broker(1).requests_for(2)
                         for t in r.topics for p in t.partitions]
                assert asked == [1, 1]  # latest and earliest, only for partition 1
                rc = await admin.lag("g", isolation_level="read_committed")
                assert rc[TP0].lag == 4 and rc[TP0].end_offset == 8
                admin.use_extensions = False
                plain = await admin.lag("g")
                assert plain[TP0].source == "list_offsets" and plain[TP0].lag == 3
    run(main())


def test_load_in_progress_retries_the_same_coordinator():
    async def main():
        async with FakeCluster(2) as c:
            c.on(10, fix_ports(c, coordinator_answer(lambda k: 2)))
            answers = [ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_load_in_progress, 0]

            def groups_for(node, gid):
                code = answers.pop(0)
                return GroupOffsets(gid, code, [] if code else [("t", [PartitionOffset(1, 9)])])
            c.on(9, offset_fetch_raw(groups_for))
            async with AdminClient(c.bootstrap, retry_backoff_s=0.01) as admin:
                got = await admin.list_consumer_group_offsets("g")
                assert got[TP1].offset == 9
                # FindCoordinator once: a loading coordinator is still the coordinator
                assert [k for _, k in c.log] == [10, 9, 9, 9]
    run(main())
