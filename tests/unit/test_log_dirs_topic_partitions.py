"""DescribeLogDirs (35), DescribeTopicPartitions (75) and the broker's UnregisterBroker
(64) route (issue 29 items 5, 6, 8), driven in-process on a real single-node
:class:`Broker` (with and without an authorizer), plus the pure pagination and
offset-lag rules against Kafka's ``KRaftMetadataCache`` / ``ReplicaManager``."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from hightide import Broker, BrokerConfig
from hightide.client.connection import decode_response
from hightide.cluster.controller import NewTopic
from hightide.cluster.image import PartitionImage, TopicImage
from hightide.cluster.security_control import create_acls, delete_acls
from hightide.protocol.build import materialize
from hightide.protocol.codec import RequestHeader, request_schema
from hightide.protocol.errors import ErrorCode as E
from hightide.protocol.records import build_batch
from hightide.security.acl import AclBinding, AclBindingFilter, AclOperation, PatternType, ResourceType
from hightide.server.context import RequestContext
from hightide.server.registry import RawResponse
from hightide.node.forwarding import FORWARDED
from hightide.server.handlers import describe_log_dirs as dld
from hightide.server.handlers import describe_topic_partitions as dtp
from hightide.server.handlers import routes

ALICE, ADMIN = "User:alice", "User:admin"


class Env:
    def __init__(self, loop: asyncio.AbstractEventLoop, broker: Broker) -> None:
        self.loop, self.b = loop, broker

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def call(self, api_key: int, version: int, body: dict, principal: str = ALICE) -> Any:
        ctx = RequestContext(self.b.services, RequestHeader(api_key, version, 7, "t"), "10.0.0.1:5555", {},
                             principal=principal)
        result = self.b.routes[api_key].fn(ctx, materialize(request_schema(api_key, version), body))
        if hasattr(result, "__await__"):
            result = self.run(asyncio.wait_for(result, 10))
        if isinstance(result, RawResponse):
            _, result = decode_response(api_key, version, b"".join(bytes(b) for b in result.buffers))
        return result

    def acl(self, principal: str, op: AclOperation, rtype: ResourceType, name: str) -> None:
        binding = AclBinding.of(int(rtype), name, int(PatternType.LITERAL), principal, "*", int(op), 3)
        self.run(self.b.metadata_writer.commit_metadata(create_acls(self.b.image.security, [binding])[1]))

    def clear_acls(self) -> None:
        _, records = delete_acls(self.b.image.security, [AclBindingFilter.of(1, None, 1, None, None, 1, 1)])
        if records:
            self.run(self.b.metadata_writer.commit_metadata(records))

    def produce(self, topic: str, partition: int, n: int) -> None:
        batch = build_batch([(None, b"v" * 50, [], int(time.time() * 1000)) for _ in range(n)])
        r = self.call(0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}, ADMIN)
        assert r.responses[0].partition_responses[0].error_code == E.none


def _env(tmp_path_factory: pytest.TempPathFactory, name: str, **overrides: Any) -> Iterator[Env]:
    loop = asyncio.new_event_loop()
    cfg = BrokerConfig.load(overrides={"auto.create.topics.enable": False, **overrides})
    b = Broker(cfg, data_dir=str(tmp_path_factory.mktemp(name)), listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    try:
        _, records = b.controller.create_topics(b.image, [NewTopic("alpha", 3), NewTopic("beta", 2),
                                                          NewTopic("gamma", 1)])
        loop.run_until_complete(b.metadata_writer.commit_metadata(records))
        env = Env(loop, b)
        env.produce("alpha", 0, 5)
        env.produce("alpha", 2, 1)
        yield env
    finally:
        loop.run_until_complete(b.stop())
        loop.close()


@pytest.fixture(scope="module")
def open_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from _env(tmp_path_factory, "open")


@pytest.fixture(scope="module")
def acl_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from _env(tmp_path_factory, "acl", **{"authorizer.class.name": "standard", "super.users": ADMIN})


@pytest.fixture
def env(acl_env: Env) -> Iterator[Env]:
    acl_env.clear_acls()
    yield acl_env


def _disk_size(env: Env, topic: str, partition: int) -> int:
    d = os.path.join(env.b.data_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".log"))


# -- DescribeLogDirs ---------------------------------------------------------------------
def test_routes_advertise_the_new_apis() -> None:
    r = routes()
    assert {k: (r[k].min_version, r[k].max_version) for k in (35, 64, 75)} == {35: (1, 5), 64: (0, 0), 75: (0, 0)}
    assert 64 in FORWARDED  # a broker-only node forwards it, the controller runs it from an Envelope (one table)


def test_a_broker_only_node_gates_topic_partitions_and_forwards_unregister() -> None:
    from hightide.node.forwarding import Forwarder
    from hightide.node.read_gate import ReadGate
    from hightide.server.node_routes import forwarding_routes, gated_routes
    gate = ReadGate("acknowledged", 100, lao=lambda: -1, applied=lambda: -1, content=lambda: -1)
    fwd = Forwarder(SimpleNamespace(api_versions={}), gate)  # type: ignore[arg-type]
    table = gated_routes(forwarding_routes(routes(), fwd), gate)  # what BrokerNode.routes builds
    assert table[75].fn.__qualname__.startswith("gated(")  # held at the read gate like Metadata (3)
    assert table[3].fn.__qualname__.startswith("gated(") and table[35].fn is routes()[35].fn  # log dirs: local
    assert table[64].fn == fwd.forward and table[64].name == "forwarded unregister_broker"


def test_describe_log_dirs_reports_every_log_with_its_size(open_env: Env) -> None:
    r = open_env.call(35, 4, {"topics": None})
    assert r.error_code == E.none and len(r.results) == 1
    d = r.results[0]
    assert (d.error_code, d.log_dir) == (E.none, open_env.b.data_dir) and os.path.isabs(d.log_dir)
    st = os.statvfs(d.log_dir)
    assert d.total_bytes == st.f_blocks * st.f_frsize and 0 < d.usable_bytes <= d.total_bytes
    got = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
           for t in d.topics for p in t.partitions}
    assert [t.name for t in d.topics] == ["alpha", "beta", "gamma"]  # no __cluster_metadata
    assert set(got) == {("alpha", 0), ("alpha", 1), ("alpha", 2), ("beta", 0), ("beta", 1), ("gamma", 0)}
    for (t, p), (size, lag, future) in got.items():
        assert size == _disk_size(open_env, t, p) and lag == 0 and future is False
    assert got[("alpha", 0)][0] > got[("alpha", 2)][0] > 0 and got[("beta", 0)][0] == 0


def test_describe_log_dirs_topic_filter_and_versions(open_env: Env) -> None:
    r = open_env.call(35, 1, {"topics": [{"topic": "alpha", "partitions": [0, 2, 7]},
                                         {"topic": "nope", "partitions": [0]}]})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.results[0].topics] == [("alpha", [0, 2])]
    assert not hasattr(r, "error_code") and not hasattr(r.results[0], "total_bytes")  # v1: neither field
    r = open_env.call(35, 3, {"topics": []})  # an empty list asks for nothing (null asks for all)
    assert r.error_code == E.none and r.results[0].topics == ()
    r = open_env.call(35, 5, {"topics": [{"topic": "gamma", "partitions": [0]}]})
    assert r.results[0].is_cordoned is False and r.results[0].usable_bytes > 0


def test_describe_log_dirs_needs_describe_on_the_cluster(env: Env) -> None:
    r = env.call(35, 4, {"topics": None})
    assert (r.error_code, r.results) == (E.cluster_authorization_failed, ())
    assert env.call(35, 2, {"topics": None}).results == ()  # v2: no top-level error, just nothing
    env.acl(ALICE, AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
    r = env.call(35, 4, {"topics": None})
    assert r.error_code == E.none and [t.name for t in r.results[0].topics] == ["alpha", "beta", "gamma"]


def test_a_log_dir_whose_volume_cannot_be_read_is_a_storage_error(open_env: Env, monkeypatch) -> None:
    def broken(path: str) -> Any:
        raise OSError(5, "I/O error")
    monkeypatch.setattr(dld.os, "statvfs", broken)
    d = open_env.call(35, 4, {"topics": None}).results[0]
    assert (d.error_code, d.topics, d.log_dir) == (E.kafka_storage_error, (), open_env.b.data_dir)


def test_offset_lag_is_kafkas_for_a_current_log() -> None:
    assert dld.offset_lag(10, 10) == 0  # a leader, or a follower at its HW
    assert dld.offset_lag(7, 10) == 0  # HW behind the LEO: no lag (Kafka's max(HW - LEO, 0))
    assert dld.offset_lag(12, 10) == 2


# -- DescribeTopicPartitions -------------------------------------------------------------
def _dtp(env: Env, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None,
         principal: str = ALICE) -> Any:
    return env.call(75, 0, {"topics": [{"name": n} for n in names], "response_partition_limit": limit,
                            "cursor": None if cursor is None else {"topic_name": cursor[0],
                                                                    "partition_index": cursor[1]}}, principal)


def _pages(r: Any) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics]


def test_describe_topic_partitions_all_topics_and_fields(open_env: Env) -> None:
    r = _dtp(open_env, [])
    assert _pages(r) == [("alpha", [0, 1, 2]), ("beta", [0, 1]), ("gamma", [0])] and r.next_cursor is None
    t = r.topics[0]
    assert t.topic_id == open_env.b.image.topics["alpha"].topic_id and t.is_internal is False
    assert t.topic_authorized_operations > 0  # every operation (no authorizer)
    p = t.partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.offline_replicas,
            p.eligible_leader_replicas, p.last_known_elr) == (E.none, 1, 0, (1,), (1,), (), (), ())


def test_describe_topic_partitions_pages_with_the_cursor(open_env: Env) -> None:
    r = _dtp(open_env, [], limit=2)
    assert _pages(r) == [("alpha", [0, 1])]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("alpha", 2)
    r = _dtp(open_env, [], limit=3, cursor=("alpha", 2))
    assert _pages(r) == [("alpha", [2]), ("beta", [0, 1])]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("gamma", 0)  # limit used up at a topic end
    r = _dtp(open_env, [], limit=3, cursor=("gamma", 0))
    assert _pages(r) == [("gamma", [0])] and r.next_cursor is None
    r = _dtp(open_env, [], limit=3, cursor=("b", 0))  # a cursor between names starts at the next topic
    assert _pages(r)[0] == ("beta", [0, 1])
    r = _dtp(open_env, [], limit=0)  # clamped to 1
    assert _pages(r) == [("alpha", [0])] and r.next_cursor.partition_index == 1


def test_describe_topic_partitions_named_topics(open_env: Env) -> None:
    r = _dtp(open_env, ["gamma", "nope", "alpha", "bad name!", "alpha"], limit=3)
    assert _pages(r) == [("alpha", [0, 1, 2])] and r.next_cursor.topic_name == "bad name!"  # even if unknown
    r = _dtp(open_env, ["gamma", "nope", "alpha", "bad name!", "alpha"], limit=5)
    assert [(t.name, t.error_code) for t in r.topics] == [
        ("alpha", E.none), ("bad name!", E.invalid_topic_exception), ("gamma", E.none),
        ("nope", E.unknown_topic_or_partition)]
    assert r.topics[3].topic_id == uuid.UUID(int=0) and r.next_cursor is None
    r = _dtp(open_env, ["gamma", "alpha", "beta"], limit=3, cursor=("beta", 1))  # alpha is before the cursor
    assert _pages(r) == [("beta", [1]), ("gamma", [0])]
    r = _dtp(open_env, ["alpha", "beta"], cursor=("gamma", 0))  # the cursor's topic must be asked for
    assert [(t.name, t.error_code, t.partitions) for t in r.topics] == [
        ("alpha", E.invalid_request, ()), ("beta", E.invalid_request, ())]
    r = _dtp(open_env, ["alpha"], cursor=("alpha", -1))
    assert [(t.name, t.error_code) for t in r.topics] == [("alpha", E.invalid_request)]
    assert _dtp(open_env, [], cursor=("alpha", -1)).topics == ()  # Kafka: nothing to name


def test_describe_topic_partitions_authorization(env: Env) -> None:
    env.acl(ALICE, AclOperation.DESCRIBE, ResourceType.TOPIC, "beta")
    assert _pages(_dtp(env, [])) == [("beta", [0, 1])]  # all topics: the others are left out
    r = _dtp(env, ["gamma", "beta", "alpha"])
    assert [(t.name, t.error_code, t.topic_id) for t in r.topics] == [
        ("beta", E.none, env.b.image.topics["beta"].topic_id),
        ("alpha", E.topic_authorization_failed, uuid.UUID(int=0)),
        ("gamma", E.topic_authorization_failed, uuid.UUID(int=0))]
    assert r.topics[0].topic_authorized_operations == 1 << int(AclOperation.DESCRIBE)
    assert r.topics[1].topic_authorized_operations == -(2**31) and r.topics[1].partitions == ()
    assert _pages(_dtp(env, [], principal=ADMIN)) == [("alpha", [0, 1, 2]), ("beta", [0, 1]), ("gamma", [0])]


def test_cluster_mode_leaders_and_offline_replicas_as_kafka() -> None:
    def reg(fenced: bool, listeners: tuple[str, ...] = ("PLAINTEXT",)) -> Any:
        return SimpleNamespace(fenced=fenced, endpoint=lambda name: (name,) if name in listeners else None)
    brokers = dtp._Brokers({1: reg(False), 2: reg(True), 3: reg(False, ("OTHER",))}, "PLAINTEXT")
    t = TopicImage("t", uuid.uuid4(), {i: PartitionImage(i, leader, 3, (1, 2, 3, 4), (1, 2)) for i, leader in
                                       enumerate((1, 2, 3, 4, -1))})
    entries, nxt = dtp.describe({"t": t}, ["t"], False, None, 2000, brokers)
    parts = entries[0]["partitions"]
    # a fenced leader is still named (Kafka's getAliveEndpoint only needs the listener)
    assert [p["leader_id"] for p in parts] == [1, 2, -1, -1, -1] and nxt is None
    assert {tuple(p["offline_replicas"]) for p in parts} == {(2, 3, 4)}
    assert all(p["error_code"] == E.none for p in parts)


# -- UnregisterBroker on the single node ---------------------------------------------------
def test_single_node_unregister_broker(env: Env) -> None:
    assert env.call(64, 0, {"broker_id": 5}).error_code == E.cluster_authorization_failed  # needs ALTER
    env.acl(ALICE, AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    r = env.call(64, 0, {"broker_id": 5})
    assert (r.error_code, r.error_message) == (E.broker_id_not_registered, "Broker ID 5 is not currently registered")
    assert env.call(64, 0, {"broker_id": env.b.node_id}).error_code == E.invalid_request
