"""A restarted broker-only node acts on metadata only once it has caught up with the
controller's log (issue 26, item 1; Kafka's BrokerServer waits for the catch-up and the
first metadata publish before serving, and its group coordinator starts on that publish).

The data dir is prepared by an embedded single node (node 1), whose metadata log has the
shape of a broker's local copy: node 1 registered, ``orders`` (one replica, led here),
``mirrored`` (two replicas, led here) and ``__consumer_offsets`` (led here) with a
committed offset 5 of group ``g``, and a topic ``recent`` whose records the local copy
then loses (a crash before the copy's fsync: the broker fetches them again). The same
dir then starts as ``process.roles=broker`` with a controller that accepts connections
and never answers (paused controllers). Its local copy says it leads everything, yet it
must not lead, coordinate, acknowledge or delete anything.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from hightide import Broker, BrokerConfig
from hightide.client import BrokerConnection
from hightide.cluster.broker_records import RegisterBrokerRecord
from hightide.cluster.metadata_log import MetadataLog
from hightide.cluster.records import PartitionRecord, TopicRecord
from hightide.devcluster import free_ports
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch

ORDERS_ID = uuid.UUID("6f1b7a36-5c55-4a43-9a5e-2f4d1d8e0c11")
MIRRORED_ID = uuid.UUID("6f1b7a36-5c55-4a43-9a5e-2f4d1d8e0c12")
RECENT_ID = uuid.UUID("6f1b7a36-5c55-4a43-9a5e-2f4d1d8e0c13")


def run(coro):
    async def bounded():
        async with asyncio.timeout(60):
            return await coro
    return asyncio.run(bounded())


def commit_body(offset: int) -> dict:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


FETCH_BODY = {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0]}], "require_stable": False}


def produce_body(topic: str) -> dict:
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    return {"transactional_id": None, "acks": -1, "timeout": 5_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


async def prepare(data_dir: str, port: int) -> int:
    """The single node's run; returns the metadata offset the local copy is cut back to
    (``recent``'s records are past it)."""
    cfg = BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1})
    async with Broker(cfg, data_dir=data_dir, listen=("127.0.0.1", port)) as b:
        await b.metadata_writer.commit_metadata([
            RegisterBrokerRecord(1, str(uuid.uuid4()), 7, end_points=(("PLAINTEXT", "127.0.0.1", port, 0),), fenced=False),
            TopicRecord("orders", str(ORDERS_ID)), PartitionRecord(str(ORDERS_ID), 0, 1, 3, (1,)),
            TopicRecord("mirrored", str(MIRRORED_ID)), PartitionRecord(str(MIRRORED_ID), 0, 1, 3, (1, 2)),
        ])
        conn = BrokerConnection("127.0.0.1", b.port, "prepare")
        await conn.connect()
        try:
            found = await conn.request(10, 3, {"key": "g", "key_type": 0})  # creates __consumer_offsets
            assert found.error_code == ErrorCode.none and found.node_id == 1
            resp = await conn.request(8, 8, commit_body(5))
            assert resp.topics[0].partitions[0].error_code == ErrorCode.none
            lost_from = b.image.offset + 1
            await b.metadata_writer.commit_metadata([TopicRecord("recent", str(RECENT_ID)),
                                     PartitionRecord(str(RECENT_ID), 0, 1, 0, (1,))])
            resp = await conn.request(0, 9, produce_body("recent"))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        finally:
            await conn.close()
    metadata = MetadataLog(data_dir, int(time.time() * 1000), True)
    try:
        metadata.truncate_to(lost_from)  # the copy's unflushed tail, lost in a crash
    finally:
        metadata.close()
    return lost_from


async def silent_controller() -> asyncio.base_events.Server:
    """A controller that accepts connections and never answers (SIGSTOPped)."""
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()
    return await asyncio.start_server(swallow, "127.0.0.1", 0)


def broker_only(data_dir: str, port: int, controller_port: int) -> Broker:
    cfg = BrokerConfig.load(overrides={
        "process.roles": "broker", "node.id": 1, "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"0@127.0.0.1:{controller_port}", "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "offsets.topic.num.partitions": 1, "metadata.read.consistency": "local"})
    return Broker(cfg, data_dir=data_dir)


def test_a_broker_that_has_not_caught_up_leads_and_coordinates_nothing(tmp_path):
    data_dir = str(tmp_path / "node1")
    port, = free_ports(1)

    async def scenario() -> None:
        lost_from = await prepare(data_dir, port)
        controller = await silent_controller()
        b = broker_only(data_dir, port, controller.sockets[0].getsockname()[1])
        await b.start()
        conn = BrokerConnection("127.0.0.1", port, "restarted")
        try:
            assert b.node is not None and b.image.offset == lost_from - 1  # the local copy, as it was
            assert b.image.topics["__consumer_offsets"].partitions[0].leader == 1
            assert os.path.isdir(os.path.join(data_dir, "recent-0")), "a log of a topic the stale copy lacks " \
                                                                      "was deleted before the catch-up"
            await conn.connect()
            for _ in range(10):  # the old code answered COORDINATOR_LOAD_IN_PROGRESS while loading
                found = await conn.request(10, 3, {"key": "g", "key_type": 0})
                committed = await conn.request(8, 8, commit_body(6))
                fetched = await conn.request(9, 7, FETCH_BODY)
                loading = ErrorCode.coordinator_load_in_progress
                if loading not in (found.error_code, committed.topics[0].partitions[0].error_code,
                                   fetched.error_code):
                    break
                await asyncio.sleep(0.2)
            assert (found.error_code, found.node_id) == (ErrorCode.coordinator_not_available, -1), \
                f"FindCoordinator named node {found.node_id} from the stale metadata"
            assert committed.topics[0].partitions[0].error_code == ErrorCode.not_coordinator, \
                "an OffsetCommit was acknowledged before the catch-up"
            assert fetched.error_code == ErrorCode.not_coordinator, \
                f"OffsetFetch answered {fetched.topics[0].partitions[0].committed_offset} before the catch-up"
            for coordinator in (b.groups, b.share_state, b.txns):
                assert not coordinator.runtime.partitions, f"{coordinator.topic} loaded before the catch-up"
            for topic in ("orders", "mirrored"):
                resp = await conn.request(0, 9, produce_body(topic))
                assert resp.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower, \
                    f"a produce to {topic}-0 was acknowledged before the catch-up"
                acked = await b.replica_manager.wait_replicated(topic, 0, 1)
                assert acked == ErrorCode.not_leader_or_follower
            assert not b.replica_manager.leaders
            md = await conn.request(3, 12, {"topics": [{"name": "orders", "topic_id": None}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
            part = md.topics[0].partitions[0]
            assert (part.error_code, part.leader_id) == (ErrorCode.leader_not_available, -1)
            assert [x.node_id for x in md.brokers] == []  # itself: fenced in truth
            assert not b.node.caught_up
        finally:
            await conn.close()
            await b.stop()
            controller.close()

    run(scenario())


def test_it_acts_on_the_whole_image_once_caught_up_and_registered(tmp_path):
    """The follower's catch-up alone is not enough while the image still holds the
    previous incarnation's registration (the controller has not moved its leadership
    yet); once this incarnation's registration is applied too, the image is put in force:
    coordinator partitions load, FindCoordinator names this broker, commits are
    acknowledged, the logs of topics missing from the image are deleted."""
    data_dir = str(tmp_path / "node1")
    port, = free_ports(1)

    async def scenario() -> None:
        await prepare(data_dir, port)
        controller = await silent_controller()
        b = broker_only(data_dir, port, controller.sockets[0].getsockname()[1])
        await b.start()
        conn = BrokerConnection("127.0.0.1", port, "restarted")
        try:
            assert b.node is not None and b.node.follower is not None
            b.node.follower.caught_up = True  # as if the controller's high watermark was reached
            b.node._on_caught_up()
            assert not b.node.caught_up and not b.groups.runtime.partitions  # the old incarnation's image
            offset = b.image.offset + 1
            b.metadata.apply([RegisterBrokerRecord(1, str(b.node.lifecycle.core.incarnation_id), offset,
                                                   end_points=(("PLAINTEXT", "127.0.0.1", port, 0),), fenced=False),
                              PartitionRecord(str(ORDERS_ID), 0, 1, 4, (1,))], [offset, offset + 1])
            b.node._on_applied(offset + 1, offset + 1)
            assert b.node.caught_up and b.metadata_ready
            assert sorted(b.groups.runtime.partitions) == [0]
            assert not os.path.isdir(os.path.join(data_dir, "recent-0"))  # not in the caught-up image
            await b.groups.wait_loaded()
            await conn.connect()
            found = await conn.request(10, 3, {"key": "g", "key_type": 0})
            assert (found.error_code, found.node_id, found.port) == (ErrorCode.none, 1, port)
            fetched = await conn.request(9, 7, FETCH_BODY)
            assert fetched.topics[0].partitions[0].committed_offset == 5
            committed = await conn.request(8, 8, commit_body(6))
            assert committed.topics[0].partitions[0].error_code == ErrorCode.none
            resp = await conn.request(0, 9, produce_body("orders"))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert b.hosted.partition_log("orders", 0).leader_epoch == 4  # the epoch the controller gave
        finally:
            await conn.close()
            await b.stop()
            controller.close()

    run(scenario())
