"""Data across brokers (issue 13, RF=1): a broker answers data requests only for the
partitions it leads, and Metadata/DescribeCluster describe the registered brokers.

An embedded broker (node 1) gets, through its own metadata log, the registrations of
brokers 1, 2 and 3 and a topic whose partitions are led by node 1, by node 2, and by
nobody (its only replica, node 3, was fenced): the state a broker of a 3-broker cluster
sees. Requests go over the wire with BrokerConnection, so kio decodes the tagged fields
(CurrentLeader, NodeEndpoints) the hand-written encoders produce.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from hightide import Broker, BrokerConfig
from hightide.client import BrokerConnection
from hightide.cluster.broker_records import FENCE, BrokerRegistrationChangeRecord, RegisterBrokerRecord
from hightide.cluster.records import PartitionRecord, TopicRecord
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch

TOPIC = "orders"
TOPIC_ID = uuid.UUID("6f1b7a36-5c55-4a43-9a5e-2f4d1d8e0c11")
NOT_LEADER = ErrorCode.not_leader_or_follower


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def register(broker_id: int, port: int, *, fenced: bool = False, listener: str = "PLAINTEXT",
             rack: str | None = None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id, str(uuid.uuid4()), 100 + broker_id,
                                end_points=((listener, f"127.0.0.{broker_id}", port, 0),), rack=rack, fenced=fenced)


async def cluster_view(b: Broker) -> None:
    """Brokers 1 (this one), 2 and 3 (fenced: its partition has no leader); partitions
    0 led here, 1 led by broker 2 in epoch 3, 2 leaderless in epoch 5."""
    await b.metadata_writer.commit_metadata([
        register(1, b.port), register(2, 9092, rack="r2"), register(3, 9092),
        BrokerRegistrationChangeRecord(3, 103, fenced=FENCE),
        TopicRecord(TOPIC, str(TOPIC_ID)),
        PartitionRecord(str(TOPIC_ID), 0, 1, 0, (1,)),
        PartitionRecord(str(TOPIC_ID), 1, 2, 3, (2,)),
        PartitionRecord(str(TOPIC_ID), 2, -1, 5, (3,)),
    ])


async def with_broker(tmp_path, body, *, cluster: bool = True) -> None:
    cfg = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1})
    async with Broker(cfg, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
        if cluster:
            await cluster_view(b)
        conn = BrokerConnection("127.0.0.1", b.port, "test")
        await conn.connect()
        try:
            await body(b, conn)
        finally:
            await conn.close()


def produce_body(partitions: list[int]) -> dict:
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    return {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": p, "records": batch} for p in partitions]}]}


def fetch_body(partitions: list[int], version: int) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TOPIC, "topic_id": TOPIC_ID if version >= 13 else None, "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                 "log_start_offset": -1, "last_fetched_epoch": -1} for p in partitions]}]}


# -- Produce ------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [9, 10, 11])
def test_produce_to_a_partition_led_elsewhere_names_the_leader(tmp_path, version):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        resp = await conn.request(0, version, produce_body([0, 1, 2]))
        parts = {p.index: p for p in resp.responses[0].partition_responses}
        assert parts[0].error_code == ErrorCode.none and parts[0].base_offset == 0
        assert parts[1].error_code == NOT_LEADER and parts[2].error_code == NOT_LEADER
        assert b.hosted.partition_log(TOPIC, 1) is None  # never opened: hosted on broker 2
        if version >= 10:  # KIP-951
            assert (parts[1].current_leader.leader_id, parts[1].current_leader.leader_epoch) == (2, 3)
            assert (parts[2].current_leader.leader_id, parts[2].current_leader.leader_epoch) == (-1, 5)
            assert [(n.node_id, n.host, n.port, n.rack) for n in resp.node_endpoints] == [(2, "127.0.0.2", 9092, "r2")]
            assert (parts[0].current_leader.leader_id, parts[0].current_leader.leader_epoch) == (-1, -1)  # not sent
    run(with_broker(tmp_path, body))


# -- Fetch --------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [11, 12, 15, 16, 17])
def test_fetch_from_a_partition_led_elsewhere_names_the_leader(tmp_path, version):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        resp = await conn.request(1, version, fetch_body([0, 1, 2], version))
        parts = {p.partition_index: p for p in resp.responses[0].partitions}
        assert parts[0].error_code == ErrorCode.none
        assert parts[1].error_code == NOT_LEADER and parts[2].error_code == NOT_LEADER
        if version >= 16:  # Kafka sets CurrentLeader and NodeEndpoints from v16 (KIP-951)
            assert (parts[1].current_leader.leader_id, parts[1].current_leader.leader_epoch) == (2, 3)
            assert (parts[2].current_leader.leader_id, parts[2].current_leader.leader_epoch) == (-1, 5)
            assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(2, 9092)]
        elif version >= 12:
            assert parts[1].current_leader.leader_id == -1
    run(with_broker(tmp_path, body))


def test_fetch_checks_the_client_leader_epoch_against_the_image(tmp_path):
    """A partition led here in epoch 4: the client's epoch 4 is current, 3 is fenced, 5
    unknown (the check used a fixed epoch 0 before)."""
    async def body(b: Broker, conn: BrokerConnection) -> None:
        await b.metadata_writer.commit_metadata([PartitionRecord(str(TOPIC_ID), 0, 1, 4, (1,))])
        codes = []
        for epoch in (4, 3, 5):
            req = fetch_body([0], 12)
            req["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
            resp = await conn.request(1, 12, req)
            codes.append(resp.responses[0].partitions[0].error_code)
        assert codes == [ErrorCode.none, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch]
    run(with_broker(tmp_path, body))


# -- ListOffsets, OffsetForLeaderEpoch, DeleteRecords ------------------------------------------------
def test_offset_requests_to_a_partition_led_elsewhere_are_refused(tmp_path):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        lo = await conn.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                           for p in (0, 1, 2)]}]})
        assert [p.error_code for p in lo.topics[0].partitions] == [ErrorCode.none, NOT_LEADER, NOT_LEADER]
        ofle = await conn.request(23, 4, {"replica_id": -1, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": p, "current_leader_epoch": -1, "leader_epoch": 0}
                                            for p in (0, 1, 2)]}]})
        assert [p.error_code for p in ofle.topics[0].partitions] == [ErrorCode.none, NOT_LEADER, NOT_LEADER]
        dr = await conn.request(21, 2, {"timeout": 5000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "offset": 0} for p in (0, 1, 2)]}]})
        assert [p.error_code for p in dr.topics[0].partitions] == [ErrorCode.none, NOT_LEADER, NOT_LEADER]
    run(with_broker(tmp_path, body))


# -- Metadata and DescribeCluster ----------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_lists_the_alive_brokers_and_each_partition_leader(tmp_path, version):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        resp = await conn.request(3, version, {"topics": [{"name": TOPIC, "topic_id": None}],
                                               "allow_auto_topic_creation": False,
                                               "include_cluster_authorized_operations": False,
                                               "include_topic_authorized_operations": False})
        assert [(x.node_id, x.host, x.port, x.rack) for x in resp.brokers] == [
            (1, "127.0.0.1", b.port, None), (2, "127.0.0.2", 9092, "r2")]  # 3 is fenced
        assert resp.controller_id in (1, 2)  # a random alive broker, as KRaft brokers answer
        parts = {p.partition_index: p for p in resp.topics[0].partitions}
        epochs = [getattr(parts[i], "leader_epoch", None) for i in range(3)]  # v7+
        assert epochs == ([0, 3, 5] if version >= 7 else [None] * 3)
        assert (parts[0].error_code, parts[0].leader_id) == (ErrorCode.none, 1)
        assert (parts[1].error_code, parts[1].leader_id) == (ErrorCode.none, 2)
        assert (parts[2].error_code, parts[2].leader_id) == (ErrorCode.leader_not_available, -1)
        assert list(parts[2].replica_nodes) == [3] and list(parts[2].isr_nodes) == [3]
        if version >= 5:
            assert list(parts[2].offline_replicas) == [3] and list(parts[1].offline_replicas) == []
    run(with_broker(tmp_path, body))


def test_metadata_v0_lists_only_available_replicas(tmp_path):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        resp = await conn.request(3, 0, {"topics": [{"name": TOPIC}]})
        p2 = [p for p in resp.topics[0].partitions if p.partition_index == 2][0]
        assert p2.error_code == ErrorCode.leader_not_available and list(p2.replica_nodes) == []
    run(with_broker(tmp_path, body))


def test_a_leader_without_the_request_listener_is_listener_not_found(tmp_path):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        await b.metadata_writer.commit_metadata([register(2, 9092, listener="INTERNAL")])
        resp = await conn.request(3, 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False})
        assert [x.node_id for x in resp.brokers] == [1]
        p1 = [p for p in resp.topics[0].partitions if p.partition_index == 1][0]
        assert (p1.error_code, p1.leader_id) == (ErrorCode.listener_not_found, -1)
        assert list(p1.offline_replicas) == [2]
    run(with_broker(tmp_path, body))


def test_describe_cluster_lists_alive_brokers_and_fenced_ones_on_request(tmp_path):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        plain = await conn.request(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                                           "include_fenced_brokers": False})
        assert [(x.broker_id, x.is_fenced) for x in plain.brokers] == [(1, False), (2, False)]
        assert plain.controller_id in (1, 2)
        fenced = await conn.request(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                                            "include_fenced_brokers": True})
        assert [(x.broker_id, x.is_fenced) for x in fenced.brokers] == [(1, False), (2, False), (3, True)]
    run(with_broker(tmp_path, body))


def test_single_node_answers_as_before(tmp_path):
    """No registrations (the single node): itself as the only broker and controller."""
    async def body(b: Broker, conn: BrokerConnection) -> None:
        resp = await conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
        assert [(x.node_id, x.port) for x in resp.brokers] == [(1, b.port)] and resp.controller_id == 1
        dc = await conn.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        assert [(x.broker_id, x.port) for x in dc.brokers] == [(1, b.port)] and dc.controller_id == 1
    run(with_broker(tmp_path, body, cluster=False))


# -- partition logs ----------------------------------------------------------------------------------
def test_logs_are_opened_only_for_hosted_partitions_and_kept_when_leadership_moves(tmp_path):
    async def body(b: Broker, conn: BrokerConnection) -> None:
        assert b.hosted.partition_log(TOPIC, 0) is not None
        assert b.hosted.partition_log(TOPIC, 1) is None and b.hosted.partition_log(TOPIC, 2) is None
        resp = await conn.request(0, 9, produce_body([0]))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        plog = b.hosted.partition_log(TOPIC, 0)
        await b.metadata_writer.commit_metadata([PartitionRecord(str(TOPIC_ID), 0, -1, 1, (1,))])  # fenced: no leader
        assert b.hosted.partition_log(TOPIC, 0) is plog and plog.log_end_offset == 1  # kept, data intact
        resp = await conn.request(0, 10, produce_body([0]))
        assert resp.responses[0].partition_responses[0].error_code == NOT_LEADER
        await b.metadata_writer.commit_metadata([PartitionRecord(str(TOPIC_ID), 0, 1, 2, (1,))])  # unfenced: leader again
        resp = await conn.request(0, 9, produce_body([0]))
        assert resp.responses[0].partition_responses[0].base_offset == 1
    run(with_broker(tmp_path, body))


# -- the hand-written Produce encoder's KIP-951 fields equal kio's -----------------------------------
@pytest.mark.parametrize("version", [10, 11])
def test_produce_encoder_current_leader_and_node_endpoints_match_kio(version):
    from hightide.protocol.build import materialize
    from hightide.protocol.codec import encode_response, response_schema
    from hightide.protocol.produce_response import encode_produce_response

    topics = [("orders", [(0, 0, 42, -1, 0, None, []), (1, 6, -1, -1, -1, None, [])])]
    body = {"throttle_time": 0, "node_endpoints": [{"node_id": 2, "host": "b2", "port": 9092, "rack": None},
                                                   {"node_id": 3, "host": "b3", "port": 9093, "rack": "r"}],
            "responses": [{"name": "orders", "partition_responses": [
                {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1, "log_start_offset": 0,
                 "error_message": None, "record_errors": []},
                {"index": 1, "error_code": 6, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1,
                 "error_message": None, "record_errors": [], "current_leader": {"leader_id": 2, "leader_epoch": 7}},
            ]}]}
    expected = encode_response(0, version, 5, materialize(response_schema(0, version), body))
    got = encode_produce_response(version, 5, topics, leaders={("orders", 1): (2, 7)},
                                  node_endpoints=[(2, "b2", 9092, None), (3, "b3", 9093, "r")])
    assert got == expected


def test_producing_to_an_internal_topic_led_elsewhere_is_refused_as_internal(tmp_path):
    """Kafka's order: the internal-topic check comes before the leader check."""
    async def body(b: Broker, conn: BrokerConnection) -> None:
        tid = uuid.uuid4()
        await b.metadata_writer.commit_metadata([TopicRecord("__internal", str(tid)), PartitionRecord(str(tid), 0, 2, 0, (2,))])
        req = produce_body([0])
        req["topic_data"][0]["name"] = "__internal"
        part = (await conn.request(0, 10, req)).responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.invalid_topic_exception
        assert part.error_message == "Cannot append to internal topic __internal"
    run(with_broker(tmp_path, body))


class _BrokerOnlyView:
    """A broker-only node's ClusterView that narrows nothing (ApiVersions as the broker's),
    caught up with the controller."""

    caught_up = True

    def narrow(self, ranges: list[dict[str, int]]) -> list[dict[str, int]]:
        return ranges

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        return 0, {}


def test_a_broker_only_node_that_knows_no_registration_lists_no_broker(tmp_path):
    """Before its image holds any registration (not registered yet), a broker-only node
    knows no broker — not itself alone: it must not look like a ready single node (found
    by dev-cluster --brokers 1 reporting ready before the broker could host anything)."""
    import dataclasses

    async def main() -> None:
        b = Broker(BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1}), data_dir=str(tmp_path),
                   listen=("127.0.0.1", 0))
        b.services = dataclasses.replace(b.services, cluster_view=_BrokerOnlyView())
        async with b:
            conn = BrokerConnection("127.0.0.1", b.port, "test")
            await conn.connect()
            try:
                md = await conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
                assert list(md.brokers) == [] and md.controller_id == -1
                dc = await conn.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
                assert list(dc.brokers) == [] and dc.controller_id == -1
                fc = await conn.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
                assert fc.coordinators[0].error_code == ErrorCode.coordinator_not_available
            finally:
                await conn.close()
    run(main())
