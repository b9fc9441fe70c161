"""The cluster page's DescribeQuorum reading, on kio responses (hightide does not serve
DescribeQuorum yet: tests/console/test_app.py checks the page says so)."""

from __future__ import annotations

import asyncio

from hightide.client import UnsupportedVersionError
from hightide.client.errors import ErrorCode
from hightide.console import cluster
from hightide.protocol.build import materialize
from hightide.protocol.codec import response_schema


class FakeConn:
    host, port = "127.0.0.1", 9092

    def __init__(self, resp=None) -> None:
        self.resp = resp
        self.sent = []

    def pick_version(self, api_key: int, wanted_max: int, our_min: int = 0) -> int:
        if self.resp is None:
            raise UnsupportedVersionError(ErrorCode.unsupported_version, "not advertised")
        return wanted_max

    async def request(self, api_key, version, body):
        self.sent.append((api_key, version, body))
        return self.resp


def replica(rid: int, leo: int) -> dict:
    return {"replica_id": rid, "replica_directory_id": None, "log_end_offset": leo, "last_fetch_timestamp": 1000,
            "last_caught_up_timestamp": 900}


def test_a_quorum_is_read_with_voters_observers_and_lowest_offsets():
    resp = materialize(response_schema(55, 2), {
        "error_code": 0, "error_message": None, "nodes": [],
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{
            "partition_index": 0, "error_code": 0, "error_message": None, "leader_id": 1, "leader_epoch": 4,
            "high_watermark": 120, "current_voters": [replica(1, 120), replica(2, 118), replica(3, 119)],
            "observers": [replica(4, 117)]}]}]})
    conn = FakeConn(resp)
    q = asyncio.run(cluster._describe_quorum(conn))
    assert q.served and (q.leader_id, q.leader_epoch, q.high_watermark) == (1, 4, 120)
    assert [(r.replica_id, r.role, r.log_end_offset) for r in q.replicas] == [
        (1, "voter", 120), (2, "voter", 118), (3, "voter", 119), (4, "observer", 117)]
    assert q.lowest_voter_offset == 118 and q.lowest_replica_offset == 117
    assert conn.sent[0][0] == 55 and conn.sent[0][2]["topics"][0]["topic_name"] == "__cluster_metadata"


def test_not_served_and_errors_are_said_not_guessed():
    q = asyncio.run(cluster._describe_quorum(FakeConn()))
    assert not q.served and q.replicas == () and q.reason == (
        "DescribeQuorum (API 55) is not served by this cluster: broker 127.0.0.1:9092 does not advertise it in "
        "ApiVersions")
    resp = materialize(response_schema(55, 2), {"error_code": int(ErrorCode.not_leader_or_follower),
                                                "error_message": None, "topics": [], "nodes": []})
    q = asyncio.run(cluster._describe_quorum(FakeConn(resp)))
    assert not q.served and "NOT_LEADER_OR_FOLLOWER" in q.reason and q.lowest_replica_offset is None
