"""Share group admin APIs against fake brokers: DescribeShareGroupOffsets v0 (no lag) and
v1, group-level errors, and the share snapshot without the state RPCs (other brokers)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from hightide.client import AdminClient, NonEmptyGroupError, TopicPartition
from hightide.client.testing import FakeCluster
from hightide.monitoring.share_monitor import share_snapshot

TID = uuid.UUID(int=7)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def _cluster(describe_max: int) -> FakeCluster:
    versions = {**FakeCluster.DEFAULT_VERSIONS, 16: (0, 5), 77: (1, 1), 90: (0, describe_max), 91: (0, 0)}
    return FakeCluster(1, versions=versions, topics={"t": {0: 1, 1: 1}})


def _coordinator(c: FakeCluster):
    def handler(node, header, req):
        return {"throttle_time": 0, "coordinators": [
            {"key": k, "node_id": 1, "host": "127.0.0.1", "port": c.broker(1).port, "error_code": 0,
             "error_message": None} for k in req.coordinator_keys]}
    return handler


def _install(c: FakeCluster) -> None:
    c.on(10, _coordinator(c))
    c.on(90, lambda node, header, req: {"throttle_time": 0, "groups": [{
        "group_id": req.groups[0].group_id, "error_code": 0, "error_message": None, "topics": [
            {"topic_name": "t", "topic_id": TID, "partitions": [
                {"partition_index": 0, "start_offset": 2, "leader_epoch": 0, "lag": 7, "error_code": 0,
                 "error_message": None},
                {"partition_index": 1, "start_offset": -1, "leader_epoch": 0, "lag": -1, "error_code": 0,
                 "error_message": None}]}]}]})
    c.on(16, lambda node, header, req: {"throttle_time": 0, "error_code": 0, "groups": [
        {"group_id": "sg", "protocol_type": "share", "group_state": "Empty", "group_type": "share"}]})
    c.on(77, lambda node, header, req: {"throttle_time": 0, "groups": [{
        "error_code": 0, "error_message": None, "group_id": "sg", "group_state": "Empty", "group_epoch": 3,
        "assignment_epoch": 3, "assignor_name": "simple", "members": [], "authorized_operations": -2**31}]})
    c.on(91, lambda node, header, req: {"throttle_time": 0, "error_code": 68, "error_message": "not empty",
                                        "responses": []})


@pytest.mark.parametrize("version,lag0", [(1, 7), (0, None)])
def test_share_group_offsets_v0_and_v1(version, lag0):
    async def go():
        async with _cluster(version) as c:
            _install(c)
            async with AdminClient(c.bootstrap) as a:
                got = await a.list_share_group_offsets("sg")
                assert c.broker(1).requests_for(90)[-1][0].api_version == version
                return got
    got = run(go())
    assert (got[TopicPartition("t", 0)].start_offset, got[TopicPartition("t", 0)].lag) == (2, lag0)
    assert (got[TopicPartition("t", 1)].start_offset, got[TopicPartition("t", 1)].lag) == (-1, None)


def test_alter_raises_the_group_error():
    async def go():
        async with _cluster(1) as c:
            _install(c)
            async with AdminClient(c.bootstrap) as a:
                with pytest.raises(NonEmptyGroupError):
                    await a.alter_share_group_offsets("sg", {TopicPartition("t", 0): 5})
    run(go())


def test_share_snapshot_without_state_rpcs():
    """A broker that does not serve ReadShareGroupState (Kafka): lag yes, in-flight counts no."""
    async def go():
        async with _cluster(1) as c:
            _install(c)
            from hightide.client.testing import list_offsets_answer
            c.on(2, list_offsets_answer(lambda node, topic, p, ts: (11, -1)))
            async with AdminClient(c.bootstrap) as a:
                return await share_snapshot(a)
    snap = run(go())
    rep = snap.groups["sg"]
    assert (rep.state, rep.members) == ("Empty", 0)
    p0, p1 = rep.partitions
    assert (p0.start_offset, p0.lag, p0.end_offset, p0.counts) == (2, 7, 11, None)
    assert (p1.start_offset, p1.lag, p1.counts) == (None, None, None)
