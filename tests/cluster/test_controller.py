"""A real controller-only process (``hightide serve --set process.roles=controller``),
driven with raw Kafka requests the way a broker drives it: BrokerRegistration,
BrokerHeartbeat (with hightide's LowestAcknowledgedOffset tag), session expiry, the
observers' metadata Fetch (long-poll, diverging answer), Envelope (with the
MetadataOffset tag), the admin writes placed over registered brokers,
AllocateProducerIds, UpdateFeatures, DescribeQuorum and DescribeCluster (KIP-919),
AlterPartition."""

from __future__ import annotations

import struct
import threading
import time
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from hightide.cluster import records as R
from hightide.cluster.broker_records import FENCE, UNFENCE, BrokerRegistrationChangeRecord, NoOpRecord, \
    RegisterBrokerRecord
from hightide.protocol.broker_heartbeat_response import decode_broker_heartbeat_response
from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request
from hightide.protocol.envelope_response import decode_envelope_response
from hightide.protocol.records import decode_records, validate_batches
from tests.rawkafka import RawClient
from tests.waiting import wait_until

from .harness import SESSION_MS

METADATA_TOPIC_ID = uuid.UUID(int=1)
FEATURES = [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 25}]


class Controller(RawClient):
    """A raw connection to the controller with a broker's requests."""

    def __init__(self, address: str, cluster_id: str, node_id: int = -1) -> None:
        super().__init__(address)
        self.cluster_id = cluster_id
        self.node_id = node_id  # the controller's

    def raw(self, api_key: int, version: int, body: dict) -> bytes:
        """Send a request; return its response frame (no size prefix)."""
        req = materialize(load_request_schema(api_key, version), body)
        self.corr += 1
        self.send_bytes(encode_request(api_key, version, self.corr, "test-broker", req))
        return self.recv_frame()

    def register(self, broker_id: int, incarnation: uuid.UUID, port: int = 9092) -> Any:
        return self.request(62, 4, {
            "broker_id": broker_id, "cluster_id": self.cluster_id, "incarnation_id": incarnation,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port, "security_protocol": 0}],
            "features": FEATURES, "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
            "previous_broker_epoch": -1})

    def heartbeat(self, broker_id: int, epoch: int, offset: int, *, want_fence: bool = False,
                  want_shut_down: bool = False) -> Any:
        frame = self.raw(63, 2, {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": offset,
                                 "want_fence": want_fence, "want_shut_down": want_shut_down})
        corr, reply = decode_broker_heartbeat_response(2, frame)
        assert corr == self.corr
        return reply

    def fetch(self, offset: int, *, replica_id: int = 0, replica_epoch: int = -1, max_wait_ms: int = 0,
              last_fetched_epoch: int | None = None, version: int = 17) -> Any:
        """A metadata Fetch at ``offset``; ``last_fetched_epoch`` by default the
        controller's leader epoch (its log's batches below ``offset`` are of that epoch
        in these tests: the controller elects itself once, writing a LeaderChange
        first), 0 at offset 0."""
        if last_fetched_epoch is None:
            last_fetched_epoch = self.leader_epoch() if offset > 0 else 0
        return self.request(1, version, {
            "cluster_id": self.cluster_id, "replica_state": {"replica_id": replica_id, "replica_epoch": replica_epoch},
            "replica_id": replica_id, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": "__cluster_metadata", "topic_id": METADATA_TOPIC_ID, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1, "partition_max_bytes": 1 << 20,
                 "replica_directory_id": None}]}],
            "forgotten_topics_data": []})

    def leader_epoch(self) -> int:
        """The controller's Raft epoch (a lone controller elects itself as it starts)."""
        return int(self.fetch(0, last_fetched_epoch=0).responses[0].partitions[0].current_leader.leader_epoch)

    def records(self, offset: int = 0) -> list[tuple[int, Any]]:
        """Every committed metadata record from ``offset``: (offset, record); Raft's
        control batches (LeaderChange) skipped."""
        part = self.fetch(0).responses[0].partitions[0]
        out = []
        data = bytes(part.records or b"")
        for h in validate_batches(data, client_origin=False):
            if h.is_control:
                continue
            for rec in decode_records(memoryview(data)[h.position:h.position + h.size]):
                if rec.offset >= offset and rec.value is not None:
                    out.append((rec.offset, R.decode(rec.value)))
        return out

    def up(self, broker_id: int, incarnation: uuid.UUID | None = None) -> int:
        """Register and unfence a broker; returns its epoch."""
        reply = self.register(broker_id, incarnation or uuid.uuid4())
        assert reply.error_code == ErrorCode.none
        hb = self.heartbeat(broker_id, reply.broker_epoch, self.end() - 1)
        assert not hb.is_fenced, hb
        return int(reply.broker_epoch)

    def end(self) -> int:
        return int(self.fetch(0).responses[0].partitions[0].high_watermark)

    def create_topic(self, name: str, partitions: int = 1) -> Any:
        return self.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                                                "assignments": [], "configs": []}],
                                    "timeout": 30000, "validate_only": False}).topics[0]


@pytest.fixture
def controller(cluster):
    """A controller-only process (no brokers; NoOps off so the log only grows by what a
    test writes) and a raw connection to it. It runs the StandardAuthorizer with
    User:ANONYMOUS as a super user (the ACL APIs answer SECURITY_DISABLED without one)."""
    c = cluster(0, wait=False, metadata_max_idle_interval_ms=0, authorizer_class_name="standard",
                super_users="User:ANONYMOUS")
    with Controller(c.bootstrap_controller, c.cluster_id, c.controllers[0].spec.node_id) as conn:
        yield conn


def test_registration_epoch_is_the_record_offset_and_a_caught_up_heartbeat_unfences(controller):
    inc = uuid.uuid4()
    reply = controller.register(0, inc)
    assert reply.error_code == ErrorCode.none
    recs = dict(controller.records())
    rec = recs[reply.broker_epoch]
    assert isinstance(rec, RegisterBrokerRecord) and rec.broker_id == 0 and rec.fenced
    assert rec.incarnation_id == str(inc) and rec.broker_epoch == reply.broker_epoch
    # behind its registration record: not caught up, stays fenced; the seed's value is unknown
    hb = controller.heartbeat(0, reply.broker_epoch, reply.broker_epoch - 1)
    assert (hb.is_caught_up, hb.is_fenced, hb.lowest_acknowledged_offset) == (False, True, -1)
    hb = controller.heartbeat(0, reply.broker_epoch, reply.broker_epoch)
    assert (hb.error_code, hb.is_caught_up, hb.is_fenced) == (0, True, False)
    unfence = controller.records(reply.broker_epoch + 1)
    assert unfence == [(reply.broker_epoch + 1, BrokerRegistrationChangeRecord(0, reply.broker_epoch, fenced=UNFENCE))]
    # a heartbeat with its applied offset: the lowest acknowledged offset of the one broker
    hb = controller.heartbeat(0, reply.broker_epoch, reply.broker_epoch + 1)
    assert hb.lowest_acknowledged_offset == reply.broker_epoch + 1 and not hb.is_fenced
    # the same incarnation again keeps its epoch; a wrong epoch is stale
    assert controller.register(0, inc).broker_epoch == reply.broker_epoch
    assert controller.heartbeat(0, reply.broker_epoch + 100, 0).error_code == ErrorCode.stale_broker_epoch
    wrong = controller.request(62, 4, {
        "broker_id": 1, "cluster_id": "not-this-cluster", "incarnation_id": uuid.uuid4(), "listeners": [],
        "features": FEATURES, "rack": None})
    assert wrong.error_code == ErrorCode.inconsistent_cluster_id


def test_session_expiry_fences_the_broker_and_makes_its_partitions_leaderless(controller):
    epoch = controller.up(0)
    topic = controller.create_topic("orders", 2)
    assert topic.error_code == ErrorCode.none
    parts = [r for _, r in controller.records() if isinstance(r, R.PartitionRecord)]
    assert [(p.partition, p.leader) for p in parts] == [(0, 0), (1, 0)]
    stopped = time.monotonic()
    # no more heartbeats: fenced by the controller's timer after the session timeout
    fenced = wait_until(lambda: [(o, r) for o, r in controller.records()
                                 if isinstance(r, BrokerRegistrationChangeRecord) and r.fenced == FENCE],
                        timeout=SESSION_MS / 1000 + 10, what="the fencing record")
    took = time.monotonic() - stopped
    assert took >= SESSION_MS / 1000 - 0.5, took
    offset = fenced[0][0]
    after = controller.records(offset)
    assert after[0][1] == BrokerRegistrationChangeRecord(0, epoch, fenced=FENCE)
    moved = [r for _, r in after[1:] if isinstance(r, R.PartitionChangeRecord)]
    # no leader (the leader epoch + 1 as the record names one); its only ISR member stays in the ISR
    assert [(p.partition, p.leader, p.isr) for p in moved] == [(0, -1, None), (1, -1, None)]
    # back and caught up: unfenced, and leader again in the same batch
    hb = controller.heartbeat(0, epoch, controller.end() - 1)
    assert not hb.is_fenced
    back = [r for _, r in controller.records(offset + 3)]
    assert back[0] == BrokerRegistrationChangeRecord(0, epoch, fenced=UNFENCE)
    assert back[1:] == [R.PartitionChangeRecord(p.topic_id, p.partition, leader=0) for p in moved]


def test_observer_fetch_long_polls_until_the_log_grows(controller):
    epoch = controller.up(0)
    end = controller.end()
    answer: dict[str, Any] = {}

    def poll() -> None:
        with Controller(f"{controller.sock.getpeername()[0]}:{controller.sock.getpeername()[1]}",
                        controller.cluster_id) as other:
            t0 = time.monotonic()
            answer["resp"] = other.fetch(end, replica_id=0, replica_epoch=epoch, max_wait_ms=10_000)
            answer["took"] = time.monotonic() - t0

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)  # the Fetch is parked (nothing to send)
    assert "resp" not in answer
    assert controller.create_topic("wake-up").error_code == ErrorCode.none
    t.join(10)
    part = answer["resp"].responses[0].partitions[0]
    assert answer["took"] < 5, answer["took"]
    assert part.error_code == ErrorCode.none and part.high_watermark > end and part.records
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (controller.node_id, 1)
    # a Fetch at N acknowledges N - 1: the next heartbeat's lowest acknowledged offset shows it
    hw = int(part.high_watermark)
    controller.fetch(hw, replica_id=0, replica_epoch=epoch)
    hb = controller.heartbeat(0, epoch, end - 1)  # an older offset in the heartbeat does not lower it
    assert hb.lowest_acknowledged_offset == hw - 1


def test_a_fetch_beyond_the_log_end_is_told_to_diverge(controller):
    end = controller.end()
    part = controller.fetch(end + 5).responses[0].partitions[0]
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (1, end)
    assert not part.records
    # (the Raft core answers every fetch at offset 0 with records: nothing below it can diverge; ask at 1)
    part = controller.fetch(1, last_fetched_epoch=3).responses[0].partitions[0]
    assert part.diverging_epoch.end_offset == end
    other = controller.request(1, 12, {
        "cluster_id": controller.cluster_id, "replica_id": 0, "max_wait": 0, "min_bytes": 1, "max_bytes": 1000,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"topic": "orders", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1000}]}], "forgotten_topics_data": []})
    assert other.error_code == ErrorCode.invalid_request


def test_envelope_runs_the_inner_create_topics_and_returns_the_metadata_offset(controller):
    controller.up(0)
    inner = materialize(load_request_schema(19, 7), {
        "topics": [{"name": "forwarded", "num_partitions": 3, "replication_factor": -1, "assignments": [],
                    "configs": []}], "timeout": 30000, "validate_only": False})
    data = encode_request(19, 7, 4242, "client-1", inner)[4:]
    frame = controller.raw(58, 0, {"request_data": data, "request_principal": b"", "client_host_address": b"\x7f\0\0\1"})
    _, env = decode_envelope_response(frame)
    assert env.error_code == ErrorCode.none and env.response_data is not None
    corr = struct.unpack_from(">i", env.response_data, 0)[0]
    resp, _ = entity_reader(load_response_schema(19, 7))(env.response_data, 5)
    assert corr == 4242 and resp.topics[0].error_code == ErrorCode.none and resp.topics[0].num_partitions == 3
    last = [o for o, r in controller.records() if not isinstance(r, NoOpRecord)][-1]
    assert env.metadata_offset == last
    # DescribeQuorum is forwardable too (kafka-metadata-quorum --bootstrap-server on a broker)
    quorum = materialize(load_request_schema(55, 2), {"topics": [{"topic_name": "__cluster_metadata",
                                                                  "partitions": [{"partition_index": 0}]}]})
    frame = controller.raw(58, 0, {"request_data": encode_request(55, 2, 7, "c", quorum)[4:],
                                   "request_principal": b"", "client_host_address": b""})
    _, env = decode_envelope_response(frame)
    assert env.error_code == ErrorCode.none and env.response_data is not None
    q, _ = entity_reader(load_response_schema(55, 2))(env.response_data, 5)
    assert q.topics[0].partitions[0].leader_id == controller.node_id
    # CreateAcls is forwardable: the binding is a metadata record of the controller's
    acl = materialize(load_request_schema(30, 3), {"creations": [
        {"resource_type": 2, "resource_name": "forwarded", "resource_pattern_type": 3, "principal": "User:alice",
         "host": "*", "operation": 3, "permission_type": 3}]})
    frame = controller.raw(58, 0, {"request_data": encode_request(30, 3, 8, "c", acl)[4:],
                                   "request_principal": b"", "client_host_address": b""})
    _, env = decode_envelope_response(frame)
    created, _ = entity_reader(load_response_schema(30, 3))(env.response_data, 5)
    assert created.results[0].error_code == ErrorCode.none
    assert env.metadata_offset == [o for o, r in controller.records() if not isinstance(r, NoOpRecord)][-1]
    # an API Kafka does not forward
    meta = materialize(load_request_schema(3, 12), {"topics": None, "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False})
    frame = controller.raw(58, 0, {"request_data": encode_request(3, 12, 1, "c", meta)[4:],
                                   "request_principal": b"", "client_host_address": b""})
    _, env = decode_envelope_response(frame)
    assert env.error_code == ErrorCode.invalid_request and env.response_data is None


def test_create_topics_without_unfenced_brokers_fails_with_kafkas_error(controller):
    res = controller.create_topic("nowhere")
    assert res.error_code == ErrorCode.invalid_replication_factor
    assert res.error_message == ("Unable to replicate the partition 1 time(s): The target replication factor of 1 "
                                 "cannot be reached because only 0 broker(s) are registered.")


def test_partitions_are_striped_over_the_unfenced_brokers(controller):
    for b in (0, 1, 2):
        controller.up(b)
    assert controller.create_topic("striped", 6).error_code == ErrorCode.none
    leaders = [r.leader for _, r in controller.records() if isinstance(r, R.PartitionRecord)]
    assert sorted(leaders) == [0, 0, 1, 1, 2, 2]


def test_allocate_producer_ids_checks_the_broker_epoch(controller):
    stale = controller.request(67, 0, {"broker_id": 0, "broker_epoch": 5})
    assert stale.error_code == ErrorCode.stale_broker_epoch
    epoch = controller.up(0)
    first = controller.request(67, 0, {"broker_id": 0, "broker_epoch": epoch})
    second = controller.request(67, 0, {"broker_id": 0, "broker_epoch": epoch})
    assert (first.error_code, first.producer_id_start, first.producer_id_len) == (ErrorCode.none, 0, 1000)
    assert second.producer_id_start == 1000


def test_unregister_and_describe_quorum_and_cluster(controller):
    assert controller.request(64, 0, {"broker_id": 7}).error_code == ErrorCode.broker_id_not_registered
    epoch = controller.up(0)
    end = controller.end()
    controller.fetch(end, replica_id=0, replica_epoch=epoch)
    q = controller.request(55, 2, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0}]}]})
    p = q.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none and p.high_watermark == end and p.leader_epoch == 1
    assert p.leader_id == controller.node_id
    assert [(v.replica_id, v.log_end_offset) for v in p.current_voters] == [(p.leader_id, end)]
    assert [(o.replica_id, o.log_end_offset) for o in p.observers] == [(0, end)]
    assert p.observers[0].last_caught_up_timestamp > 0 and q.nodes[0].node_id == p.leader_id
    d = controller.request(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 2,
                                   "include_fenced_brokers": False})
    assert d.error_code == ErrorCode.none and [b.broker_id for b in d.brokers] == [p.leader_id]
    assert d.controller_id == p.leader_id and d.cluster_id == controller.cluster_id
    d = controller.request(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                                   "include_fenced_brokers": False})
    assert d.error_code == ErrorCode.unsupported_endpoint_type
    assert controller.request(64, 0, {"broker_id": 0}).error_code == ErrorCode.none


def test_update_features_finalizes_metadata_version_within_every_brokers_range(controller):
    controller.up(0)

    def update(level: int, upgrade_type: int = 1) -> Any:
        return controller.request(57, 1, {"timeout": 30000, "validate_only": False, "feature_updates": [
            {"feature": "metadata.version", "max_version_level": level, "upgrade_type": upgrade_type}]})
    assert update(20).error_code == ErrorCode.none
    assert [r for _, r in controller.records() if isinstance(r, R.FeatureLevelRecord)] == \
        [R.FeatureLevelRecord("metadata.version", 20)]
    too_high = update(26)
    assert too_high.error_code == ErrorCode.invalid_update_version
    assert "only supports versions 7-25" in too_high.error_message
    down = update(19)
    assert down.error_code == ErrorCode.invalid_update_version and "downgrade" in down.error_message
    api = controller.request(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k.api_key for k in api.api_keys}
    assert {1, 55, 57, 58, 62, 63, 64, 67}.issubset(keys) and 0 not in keys  # no Produce on a controller


def test_idle_noop_records_keep_the_offsets_moving(cluster):
    c = cluster(0, wait=False, metadata_max_idle_interval_ms=200)
    with Controller(c.bootstrap_controller, c.cluster_id) as conn:
        start = conn.end()
        wait_until(lambda: conn.end() >= start + 5, timeout=10, what="five NoOp records")
        noops = [o for o, r in conn.records(start) if isinstance(r, NoOpRecord)]
        assert len(noops) >= 5


def test_a_restarted_controller_fences_a_broker_that_never_comes_back(cluster):
    c = cluster(0, wait=False, metadata_max_idle_interval_ms=0)
    node = c.controllers[0]
    with Controller(c.bootstrap_controller, c.cluster_id, node.spec.node_id) as conn:
        epoch = conn.up(0)
        conn.heartbeat(0, epoch, conn.end() - 1)
    node.restart()
    restarted = time.monotonic()
    with Controller(c.bootstrap_controller, c.cluster_id, node.spec.node_id) as conn:
        # the image says unfenced; the new controller gives it a session and fences it when it expires
        fenced = wait_until(lambda: [r for _, r in conn.records() if isinstance(r, BrokerRegistrationChangeRecord)
                                     and r.fenced == FENCE], timeout=SESSION_MS / 1000 + 15, what="the fencing")
        assert fenced == [BrokerRegistrationChangeRecord(0, epoch, fenced=FENCE)]
        assert time.monotonic() - restarted >= SESSION_MS / 1000 - 0.5


def test_alter_partition_from_the_leader(controller):
    """AlterPartition (56) v3 on the controller listener: STALE_BROKER_EPOCH, the new state
    in the answer (partition epoch + 1, leader epoch kept) and a PartitionChangeRecord,
    INVALID_UPDATE_VERSION for a stale partition epoch, INVALID_REQUEST from a follower."""
    epochs = {0: controller.up(0), 1: controller.up(1)}
    created = controller.request(19, 7, {"topics": [{"name": "isr", "num_partitions": 1, "replication_factor": 2,
                                                     "assignments": [], "configs": []}],
                                         "timeout": 30000, "validate_only": False}).topics[0]
    assert created.error_code == ErrorCode.none
    tid = created.topic_id
    [part] = [r for _, r in controller.records() if isinstance(r, R.PartitionRecord) and r.topic_id == str(tid)]
    leader, follower = part.replicas
    assert part.isr == (leader, follower)

    def alter(broker: int, isr: list[int], partition_epoch: int, broker_epoch: int | None = None) -> Any:
        return controller.request(56, 3, {
            "broker_id": broker, "broker_epoch": epochs[broker] if broker_epoch is None else broker_epoch,
            "topics": [{"topic_id": tid, "partitions": [{
                "partition_index": 0, "leader_epoch": 0, "leader_recovery_state": 0, "partition_epoch": partition_epoch,
                "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs[b]} for b in isr]}]}]})

    assert alter(leader, [leader], 0, broker_epoch=12345).error_code == ErrorCode.stale_broker_epoch
    answer = alter(leader, [leader], 0)
    p = answer.topics[0].partitions[0]
    assert (answer.error_code, p.error_code, p.leader_id, p.leader_epoch, tuple(p.isr), p.partition_epoch) == \
        (ErrorCode.none, ErrorCode.none, leader, 0, (leader,), 1)
    assert controller.records()[-1][1] == R.PartitionChangeRecord(str(tid), 0, isr=(leader,))
    assert alter(leader, [leader, follower], 0).topics[0].partitions[0].error_code == ErrorCode.invalid_update_version
    p = alter(leader, [leader, follower], 1).topics[0].partitions[0]
    assert (p.error_code, tuple(p.isr), p.partition_epoch) == (ErrorCode.none, (leader, follower), 2)
    assert alter(follower, [follower], 2).topics[0].partitions[0].error_code == ErrorCode.invalid_request
