"""The authorization matrix (issue 17): for each API, a principal with and without the
ACL Kafka's KafkaApis checks gets the right answer, with Kafka's error code in the right
place; prefixed and DENY rules, super users, allow.everyone.if.no.acl.found; without an
authorizer everything is allowed.

Handlers are driven in-process on a real :class:`Broker` with the principal set on the
:class:`RequestContext` (what the SASL/TLS listeners set after authentication)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hightide import Broker, BrokerConfig
from hightide.client.connection import decode_response
from hightide.cluster.controller import NewTopic
from hightide.cluster.security_control import create_acls
from hightide.protocol.build import materialize
from hightide.protocol.codec import RequestHeader, request_schema
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch
from hightide.security.acl import AclBinding, AclOperation, PatternType, ResourceType
from hightide.server.context import RequestContext
from hightide.server.registry import RawResponse

ALICE, BOB, ADMIN = "User:alice", "User:bob", "User:admin"
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = 3, 2
E = ErrorCode

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
O = AclOperation


class Env:
    """A started broker on its own loop, with helpers to add ACLs and call handlers."""

    def __init__(self, loop: asyncio.AbstractEventLoop, broker: Broker) -> None:
        self.loop, self.b = loop, broker
        self.acl_ids: list[str] = []

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def acl(self, principal: str, op: AclOperation, rtype: ResourceType, name: str, pattern: PatternType = LIT,
            permission: int = ALLOW, host: str = "*") -> None:
        binding = AclBinding.of(int(rtype), name, int(pattern), principal, host, int(op), permission)
        results, records = create_acls(self.b.image.security, [binding])
        assert results == [(E.none, None)]
        self.run(self.b.metadata_writer.commit_metadata(records))

    def clear_acls(self) -> None:
        """Delete every ACL (what each test starts from)."""
        from hightide.cluster.security_control import delete_acls
        from hightide.security.acl import AclBindingFilter
        _, records = delete_acls(self.b.image.security, [AclBindingFilter.of(1, None, 1, None, None, 1, 1)])
        if records:
            self.run(self.b.metadata_writer.commit_metadata(records))

    def call(self, api_key: int, version: int, body: dict, principal: str = ALICE, host: str = "10.0.0.1") -> Any:
        header = RequestHeader(api_key, version, 7, "matrix")
        ctx = RequestContext(self.b.services, header, f"{host}:5555", {}, principal=principal)
        req = materialize(request_schema(api_key, version), body)
        result = self.b.routes[api_key].fn(ctx, req)
        if hasattr(result, "__await__"):
            result = self.run(asyncio.wait_for(result, 10))
        if isinstance(result, RawResponse):
            _, result = decode_response(api_key, version, b"".join(bytes(b) for b in result.buffers))
        elif isinstance(result, bytes):  # a complete frame, size prefix included
            _, result = decode_response(api_key, version, result[4:])
        return result


def _env(tmp_path_factory: pytest.TempPathFactory, name: str, **overrides: Any) -> Iterator[Env]:
    loop = asyncio.new_event_loop()
    cfg = BrokerConfig.load(overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1,
                                       "auto.create.topics.enable": True, **overrides})
    b = Broker(cfg, data_dir=str(tmp_path_factory.mktemp(name)), listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    try:
        _, records = b.controller.create_topics(b.image, [NewTopic("orders", 1), NewTopic("app-events", 1),
                                                          NewTopic("secret", 1)])
        loop.run_until_complete(b.metadata_writer.commit_metadata(records))
        yield Env(loop, b)
    finally:
        loop.run_until_complete(b.stop())
        loop.close()


@pytest.fixture(scope="module")
def module_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from _env(tmp_path_factory, "authz", **{"authorizer.class.name": "standard", "super.users": ADMIN})


@pytest.fixture
def env(module_env: Env) -> Iterator[Env]:
    module_env.clear_acls()
    yield module_env


@pytest.fixture(scope="module")
def open_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """No authorizer configured (the default): everything allowed."""
    yield from _env(tmp_path_factory, "open")


def _batch() -> bytes:
    return build_batch([(None, b"v", [], int(time.time() * 1000))])


def produce(env: Env, topic: str, principal: str = ALICE, txn: str | None = None) -> tuple[ErrorCode, str | None]:
    r = env.call(0, 9, {"transactional_id": txn, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": _batch()}]}]}, principal)
    p = r.responses[0].partition_responses[0]
    return ErrorCode(p.error_code), p.error_message


def fetch(env: Env, topic: str, principal: str = ALICE, replica_id: int = -1) -> ErrorCode:
    r = env.call(1, 12, {"replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                         "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                             {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                              "fetch_offset": 0, "last_fetched_epoch": -1,
                                                              "log_start_offset": -1,
                                                              "partition_max_bytes": 1 << 20}]}],
                         "forgotten_topics_data": [], "rack_id": ""}, principal)
    return ErrorCode(r.responses[0].partitions[0].error_code)


def metadata(env: Env, topics: list[str] | None, principal: str = ALICE, auto_create: bool = False,
             version: int = 10) -> Any:
    return env.call(3, version, {"topics": None if topics is None else [{"name": t, "topic_id": uuid.UUID(int=0)}
                                                                         for t in topics],
                                 "allow_auto_topic_creation": auto_create,
                                 "include_cluster_authorized_operations": True,
                                 "include_topic_authorized_operations": True}, principal)


# -- the authorizer's rules, seen through Produce -------------------------------------
def test_produce_needs_write_on_the_topic(env: Env) -> None:
    assert produce(env, "orders")[0] == E.topic_authorization_failed  # no ACL, no allow.everyone
    env.acl(ALICE, O.WRITE, TOPIC, "orders")
    assert produce(env, "orders")[0] == E.none
    assert produce(env, "orders", BOB)[0] == E.topic_authorization_failed
    env.acl(ALICE, O.READ, TOPIC, "secret")  # READ does not imply WRITE
    assert produce(env, "secret")[0] == E.topic_authorization_failed


def test_prefixed_allow_and_deny_wins(env: Env) -> None:
    env.acl(ALICE, O.WRITE, TOPIC, "app-", PRE)
    assert produce(env, "app-events")[0] == E.none
    env.acl(ALICE, O.WRITE, TOPIC, "app-ev", PRE, permission=DENY)
    assert produce(env, "app-events")[0] == E.topic_authorization_failed
    env.acl("User:*", O.ALL, TOPIC, "orders")
    env.acl(ALICE, O.WRITE, TOPIC, "orders", permission=DENY)
    assert produce(env, "orders")[0] == E.topic_authorization_failed
    assert produce(env, "orders", BOB)[0] == E.none  # the wildcard principal


def test_host_restricted_acl(env: Env) -> None:
    env.acl(ALICE, O.WRITE, TOPIC, "orders", host="10.0.0.9")
    assert produce(env, "orders")[0] == E.topic_authorization_failed  # calls come from 10.0.0.1
    env.acl(ALICE, O.WRITE, TOPIC, "orders", host="10.0.0.1")
    assert produce(env, "orders")[0] == E.none


def test_super_user_is_allowed_everything(env: Env) -> None:
    env.acl(ADMIN, O.WRITE, TOPIC, "orders", permission=DENY)
    assert produce(env, "orders", ADMIN)[0] == E.none


def test_produce_to_an_unknown_topic_is_refused_before_existence(env: Env) -> None:
    assert produce(env, "nope")[0] == E.topic_authorization_failed
    env.acl(ALICE, O.WRITE, TOPIC, "nope")
    assert produce(env, "nope")[0] == E.unknown_topic_or_partition


def test_transactional_produce_needs_write_on_the_transactional_id(env: Env) -> None:
    env.acl(ALICE, O.WRITE, TOPIC, "orders")
    assert produce(env, "orders", txn="tx1")[0] == E.transactional_id_authorization_failed
    env.acl(ALICE, O.WRITE, TXN, "tx1")
    assert produce(env, "orders", txn="tx1")[0] == E.none  # a plain batch with a transactional id


def test_fetch_needs_read_and_a_follower_cluster_action(env: Env) -> None:
    assert fetch(env, "orders") == E.topic_authorization_failed
    env.acl(ALICE, O.READ, TOPIC, "orders")
    assert fetch(env, "orders") == E.none
    env.acl(ALICE, O.WRITE, TOPIC, "secret")
    assert fetch(env, "secret") == E.topic_authorization_failed
    assert fetch(env, "orders", replica_id=2) == E.topic_authorization_failed  # a follower needs CLUSTER_ACTION
    env.acl(ALICE, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert fetch(env, "orders", replica_id=2) != E.topic_authorization_failed


def test_metadata_hides_and_refuses_topics(env: Env) -> None:
    env.acl(ALICE, O.DESCRIBE, TOPIC, "orders")
    env.acl(ALICE, O.READ, TOPIC, "app-", PRE)  # READ implies DESCRIBE
    listed = metadata(env, None)
    assert sorted(t.name for t in listed.topics) == ["app-events", "orders"]
    named = {t.name: t for t in metadata(env, ["orders", "secret"]).topics}
    assert named["orders"].error_code == E.none and named["secret"].error_code == E.topic_authorization_failed
    assert not named["secret"].partitions and named["secret"].topic_id == uuid.UUID(int=0)
    ops = named["orders"].topic_authorized_operations
    assert ops == 1 << O.DESCRIBE
    assert metadata(env, ["orders"]).cluster_authorized_operations == 0
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")
    assert metadata(env, ["orders"]).cluster_authorized_operations == (1 << O.ALTER) | (1 << O.DESCRIBE)
    assert len(metadata(env, None, ADMIN).topics) >= 3  # a super user sees everything


def test_metadata_auto_create_needs_create(env: Env) -> None:
    env.acl(ALICE, O.DESCRIBE, TOPIC, "auto-", PRE)
    t = metadata(env, ["auto-a"], auto_create=True).topics[0]
    assert t.error_code == E.topic_authorization_failed and "auto-a" not in env.b.image.topics
    env.acl(ALICE, O.CREATE, TOPIC, "auto-a")
    assert metadata(env, ["auto-a"], auto_create=True).topics[0].error_code in (E.none, E.leader_not_available)
    assert "auto-a" in env.b.image.topics
    env.acl(ALICE, O.CREATE, CLUSTER, "kafka-cluster")
    metadata(env, ["auto-b"], auto_create=True)
    assert "auto-b" in env.b.image.topics


def test_metadata_by_topic_id_refused_keeps_the_id(env: Env) -> None:
    tid = env.b.image.topics["secret"].topic_id
    r = env.call(3, 12, {"topics": [{"name": None, "topic_id": tid}], "allow_auto_topic_creation": False,
                         "include_topic_authorized_operations": False})
    t = r.topics[0]
    assert (t.error_code, t.name, t.topic_id) == (E.topic_authorization_failed, None, tid)


def test_allow_everyone_if_no_acl_found(tmp_path_factory: pytest.TempPathFactory) -> None:
    for e in _env(tmp_path_factory, "everyone", **{"authorizer.class.name": "standard",
                                                   "allow.everyone.if.no.acl.found": True}):
        assert produce(e, "orders")[0] == E.none  # no ACL on the topic at all
        e.acl(BOB, O.WRITE, TOPIC, "orders")
        assert produce(e, "orders")[0] == E.topic_authorization_failed  # an ACL exists: the rules decide


def test_no_authorizer_allows_everything(open_env: Env) -> None:
    assert produce(open_env, "orders", BOB)[0] == E.none
    assert fetch(open_env, "secret", BOB) == E.none
    assert len(metadata(open_env, None, BOB).topics) >= 3


# -- offsets of partitions ------------------------------------------------------------
def test_list_offsets_needs_describe(env: Env) -> None:
    def code(principal: str = ALICE) -> ErrorCode:
        r = env.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
            principal)
        return ErrorCode(r.topics[0].partitions[0].error_code)
    assert code() == E.topic_authorization_failed
    env.acl(ALICE, O.READ, TOPIC, "orders")  # implies DESCRIBE
    assert code() == E.none


def test_offset_for_leader_epoch(env: Env) -> None:
    def code(replica_id: int = -1) -> ErrorCode:
        r = env.call(23, 4, {"replica_id": replica_id, "topics": [
            {"topic": "orders", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
        return ErrorCode(r.topics[0].partitions[0].error_code)
    assert code() == E.topic_authorization_failed
    env.acl(ALICE, O.DESCRIBE, TOPIC, "orders")
    assert code() == E.none
    assert code(replica_id=2) == E.cluster_authorization_failed
    env.acl(ALICE, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert code(replica_id=2) == E.none


def test_delete_records_needs_delete(env: Env) -> None:
    def code() -> ErrorCode:
        r = env.call(21, 2, {"timeout": 1000, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "offset": 0}]}]})
        return ErrorCode(r.topics[0].partitions[0].error_code)
    env.acl(ALICE, O.WRITE, TOPIC, "orders")
    assert code() == E.topic_authorization_failed
    env.acl(ALICE, O.DELETE, TOPIC, "orders")
    assert code() == E.none


# -- consumer groups ------------------------------------------------------------------
def find_coordinator(env: Env, key: str, key_type: int = 0, principal: str = ALICE) -> ErrorCode:
    r = env.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]}, principal)
    return ErrorCode(r.coordinators[0].error_code)


def test_find_coordinator_needs_describe_on_the_key(env: Env) -> None:
    assert find_coordinator(env, "g1") == E.group_authorization_failed
    assert find_coordinator(env, "tx1", key_type=1) == E.transactional_id_authorization_failed
    env.acl(ALICE, O.READ, GROUP, "g", PRE)
    env.acl(ALICE, O.WRITE, TXN, "tx1")
    assert find_coordinator(env, "g1") == E.none
    assert find_coordinator(env, "tx1", key_type=1) == E.none


def commit(env: Env, group: str, topic: str, principal: str = ALICE) -> ErrorCode:
    r = env.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                            {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                             "committed_metadata": ""}]}]}, principal)
    return ErrorCode(r.topics[0].partitions[0].error_code)


def test_offset_commit_needs_read_on_group_and_topic(env: Env) -> None:
    env.acl(ALICE, O.READ, TOPIC, "orders")
    assert commit(env, "g1", "orders") == E.group_authorization_failed
    env.acl(ALICE, O.READ, GROUP, "g1")
    assert commit(env, "g1", "orders") == E.none
    env.acl(ALICE, O.DESCRIBE, TOPIC, "secret")
    assert commit(env, "g1", "secret") == E.topic_authorization_failed


def test_offset_fetch_needs_describe_on_group_and_topic(env: Env) -> None:
    env.acl(ADMIN, O.ALL, GROUP, "*")
    assert commit(env, "g2", "orders", ADMIN) == E.none and commit(env, "g2", "secret", ADMIN) == E.none

    def fetch_offsets(topics: list[str] | None, version: int = 8) -> Any:
        ts = None if topics is None else [{"name": t, "partition_indexes": [0]} for t in topics]
        if version >= 8:
            return env.call(9, 8, {"groups": [{"group_id": "g2", "topics": ts}], "require_stable": False}).groups[0]
        return env.call(9, 7, {"group_id": "g2", "topics": ts, "require_stable": False})
    env.clear_acls()
    assert fetch_offsets(["orders"]).error_code == E.group_authorization_failed
    assert fetch_offsets(["orders"], 7).error_code == E.group_authorization_failed  # top-level before v8
    env.acl(ALICE, O.DESCRIBE, GROUP, "g2")
    env.acl(ALICE, O.DESCRIBE, TOPIC, "orders")
    g = fetch_offsets(["orders", "secret"])
    codes = {t.name: t.partitions[0].error_code for t in g.topics}
    assert g.error_code == E.none and codes == {"orders": E.none, "secret": E.topic_authorization_failed}
    assert [t.name for t in fetch_offsets(None).topics] == ["orders"]  # all topics: unlisted


def test_offset_delete_needs_delete_on_group_and_read_on_topic(env: Env) -> None:
    def delete(topic: str) -> Any:
        return env.call(47, 0, {"group_id": "g3", "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]})
    assert commit(env, "g3", "orders", ADMIN) == E.none
    assert delete("orders").error_code == E.group_authorization_failed
    env.acl(ALICE, O.DELETE, GROUP, "g3")
    r = delete("orders")
    assert r.error_code == E.none and r.topics[0].partitions[0].error_code == E.topic_authorization_failed
    env.acl(ALICE, O.READ, TOPIC, "orders")
    assert delete("orders").topics[0].partitions[0].error_code != E.topic_authorization_failed


def test_classic_group_apis_need_read(env: Env) -> None:
    join = env.call(11, 5, {"group_id": "cg", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                            "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b""}]})
    assert join.error_code == E.group_authorization_failed
    sync = env.call(14, 5, {"group_id": "cg", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                            "protocol_type": None, "protocol_name": None, "assignments": []})
    assert sync.error_code == E.group_authorization_failed
    hb = env.call(12, 4, {"group_id": "cg", "generation_id": 1, "member_id": "m", "group_instance_id": None})
    assert hb.error_code == E.group_authorization_failed
    leave = env.call(13, 4, {"group_id": "cg", "members": [{"member_id": "m", "group_instance_id": None}]})
    assert leave.error_code == E.group_authorization_failed
    env.acl(ALICE, O.READ, GROUP, "cg")
    hb = env.call(12, 4, {"group_id": "cg", "generation_id": 1, "member_id": "m", "group_instance_id": None})
    assert hb.error_code != E.group_authorization_failed


def test_describe_list_delete_groups(env: Env) -> None:
    env.acl(ADMIN, O.ALL, GROUP, "*")
    for g in ("ga", "gb"):
        assert commit(env, g, "orders", ADMIN) == E.none
    env.clear_acls()
    env.acl(ALICE, O.DESCRIBE, GROUP, "ga")
    d = {g.group_id: g for g in env.call(15, 5, {"groups": ["ga", "gb"], "include_authorized_operations": True}).groups}
    assert d["gb"].error_code == E.group_authorization_failed
    assert d["ga"].error_code == E.none and d["ga"].authorized_operations == 1 << O.DESCRIBE
    listed = {g.group_id for g in env.call(16, 4, {"states_filter": []}).groups}
    assert listed == {"ga"}
    env.acl(ALICE, O.DESCRIBE, CLUSTER, "kafka-cluster")
    assert {"ga", "gb"} <= {g.group_id for g in env.call(16, 4, {"states_filter": []}).groups}
    r = {g.group_id: g.error_code for g in env.call(42, 2, {"groups_names": ["ga", "gb"]}).results}
    assert r == {"ga": E.group_authorization_failed, "gb": E.group_authorization_failed}
    env.acl(ALICE, O.DELETE, GROUP, "gb")
    assert env.call(42, 2, {"groups_names": ["gb"]}).results[0].error_code == E.none


# -- topics, configs, cluster administration ------------------------------------------
def create_topic(env: Env, name: str, principal: str = ALICE) -> Any:
    r = env.call(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                     "configs": []}], "timeout": 5000, "validate_only": False}, principal)
    return r.topics[0]


def test_create_topics_needs_create_on_cluster_or_topic(env: Env) -> None:
    t = create_topic(env, "made-a")
    assert (t.error_code, t.error_message) == (E.topic_authorization_failed, "Authorization failed.")
    assert "made-a" not in env.b.image.topics
    env.acl(ALICE, O.CREATE, TOPIC, "made-", PRE)
    t = create_topic(env, "made-a")  # created, but its configs may not be described
    assert t.error_code == E.none and t.topic_config_error_code == E.topic_authorization_failed and not t.configs
    env.acl(ALICE, O.CREATE, CLUSTER, "kafka-cluster")
    env.acl(ALICE, O.DESCRIBE_CONFIGS, TOPIC, "other-b")
    t = create_topic(env, "other-b")
    assert t.error_code == E.none and t.topic_config_error_code == E.none and t.configs


def test_delete_topics_needs_delete(env: Env) -> None:
    env.acl(ADMIN, O.ALL, TOPIC, "*")
    assert create_topic(env, "doomed", ADMIN).error_code == E.none
    tid = env.b.image.topics["doomed"].topic_id
    env.clear_acls()

    def delete(name: str | None = None, topic_id: uuid.UUID | None = None) -> Any:
        r = env.call(20, 6, {"topics": [{"name": name, "topic_id": topic_id or uuid.UUID(int=0)}], "timeout": 5000})
        return r.responses[0]
    r = delete("doomed")
    assert (r.name, r.error_code) == ("doomed", E.topic_authorization_failed)
    r = delete(topic_id=tid)  # not even DESCRIBE: the id's name is not revealed
    assert (r.name, r.error_code) == (None, E.topic_authorization_failed)
    env.acl(ALICE, O.DESCRIBE, TOPIC, "doomed")
    assert delete(topic_id=tid).name == "doomed"
    assert delete("no-such").error_code == E.topic_authorization_failed  # not describable
    env.acl(ALICE, O.DESCRIBE, TOPIC, "no-such")
    assert delete("no-such").error_code == E.unknown_topic_or_partition
    env.acl(ALICE, O.DELETE, TOPIC, "doomed")
    assert delete("doomed").error_code == E.none and "doomed" not in env.b.image.topics


def test_create_partitions_needs_alter(env: Env) -> None:
    def grow() -> ErrorCode:
        r = env.call(37, 3, {"topics": [{"name": "app-events", "count": 2, "assignments": None}], "timeout": 5000,
                             "validate_only": True})
        return ErrorCode(r.results[0].error_code)
    env.acl(ALICE, O.CREATE, TOPIC, "app-events")
    assert grow() == E.topic_authorization_failed
    env.acl(ALICE, O.ALTER, TOPIC, "app-events")
    assert grow() == E.none


def test_configs_need_describe_configs_and_alter_configs(env: Env) -> None:
    def describe(rtype: int, name: str) -> ErrorCode:
        r = env.call(32, 4, {"resources": [{"resource_type": rtype, "resource_name": name,
                                            "configuration_keys": None}], "include_synonyms": False,
                             "include_documentation": False})
        return ErrorCode(r.results[0].error_code)

    def alter(rtype: int, name: str, incremental: bool = True) -> ErrorCode:
        if incremental:
            r = env.call(44, 1, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
                {"name": "retention.ms" if rtype == 2 else "log.retention.ms", "config_operation": 0,
                 "value": "1000"}]}], "validate_only": True})
        else:
            r = env.call(33, 2, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
                {"name": "retention.ms", "value": "1000"}]}], "validate_only": True})
        return ErrorCode(r.responses[0].error_code)
    assert describe(2, "orders") == E.topic_authorization_failed
    assert describe(4, "1") == E.cluster_authorization_failed
    assert describe(32, "g1") == E.group_authorization_failed
    assert alter(2, "orders") == E.topic_authorization_failed
    assert alter(2, "orders", incremental=False) == E.topic_authorization_failed
    assert alter(4, "") == E.cluster_authorization_failed
    env.acl(ALICE, O.ALTER_CONFIGS, TOPIC, "orders")  # implies DESCRIBE_CONFIGS
    env.acl(ALICE, O.DESCRIBE_CONFIGS, CLUSTER, "kafka-cluster")
    assert describe(2, "orders") == E.none and describe(4, "1") == E.none
    assert alter(2, "orders") == E.none and alter(2, "orders", incremental=False) == E.none
    assert alter(4, "") == E.cluster_authorization_failed  # DESCRIBE_CONFIGS does not imply ALTER_CONFIGS


def test_acl_apis_need_cluster_describe_and_alter(env: Env) -> None:
    creation = {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": BOB,
                "host": "*", "operation": 3, "permission_type": 3}
    flt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": BOB, "host_filter": None, "operation": 1, "permission_type": 1}
    describe_filter = {k: v for k, v in flt.items() if k != "resource_type_filter"} | {"resource_type_filter": 1}
    assert env.call(30, 3, {"creations": [creation]}).results[0].error_code == E.cluster_authorization_failed
    assert env.call(31, 3, {"filters": [flt]}).filter_results[0].error_code == E.cluster_authorization_failed
    assert env.call(29, 3, describe_filter).error_code == E.cluster_authorization_failed
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")  # ALTER implies DESCRIBE
    assert env.call(30, 3, {"creations": [creation]}).results[0].error_code == E.none
    assert len(env.call(29, 3, describe_filter).resources) == 1
    assert env.call(31, 3, {"filters": [flt]}).filter_results[0].error_code == E.none


def test_scram_credentials_need_cluster_describe_and_alter(env: Env) -> None:
    upsert = {"deletions": [], "upsertions": [{"name": "carol", "mechanism": 2, "iterations": 4096,
                                               "salt": b"salt", "salted_password": b"p" * 64}]}
    assert env.call(51, 0, upsert).results[0].error_code == E.cluster_authorization_failed
    assert env.call(50, 0, {"users": None}).error_code == E.cluster_authorization_failed
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")
    assert env.call(51, 0, upsert).results[0].error_code == E.none
    assert env.call(50, 0, {"users": None}).error_code == E.none


def test_client_quotas_need_cluster_describe_configs_and_alter_configs(env: Env) -> None:
    entity = [{"entity_type": "client-id", "entity_name": "matrix-app"}]
    alter = {"entries": [{"entity": entity, "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
             "validate_only": False}
    describe = {"components": [{"entity_type": "client-id", "match_type": 0, "match": "matrix-app"}], "strict": True}
    denied = env.call(49, 1, alter).entries[0]
    assert (denied.error_code, denied.entity[0].entity_name) == (E.cluster_authorization_failed, "matrix-app")
    got = env.call(48, 1, describe)
    assert (got.error_code, got.entries) == (E.cluster_authorization_failed, None)
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")  # ALTER is not ALTER_CONFIGS
    assert env.call(49, 1, alter).entries[0].error_code == E.cluster_authorization_failed
    env.acl(ALICE, O.ALTER_CONFIGS, CLUSTER, "kafka-cluster")  # (implies DESCRIBE_CONFIGS, as in Kafka)
    assert env.call(49, 1, alter).entries[0].error_code == E.none
    assert env.call(48, 1, describe, principal=BOB).error_code == E.cluster_authorization_failed
    env.acl(BOB, O.DESCRIBE_CONFIGS, CLUSTER, "kafka-cluster")
    got = env.call(48, 1, describe, principal=BOB)
    assert got.error_code == E.none and [(v.key, v.value) for v in got.entries[0].values] == [
        ("producer_byte_rate", 1024.0)]
    assert env.call(49, 1, alter, principal=BOB).entries[0].error_code == E.cluster_authorization_failed


def test_cluster_describe_apis(env: Env) -> None:
    quorum = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    assert env.call(55, 2, quorum).error_code == E.cluster_authorization_failed
    dc = env.call(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
    assert dc.error_code == E.none and dc.cluster_authorized_operations == 0
    features = {"timeout_ms": 1000, "feature_updates": [{"feature": "metadata.version", "max_version_level": 1,
                                                         "upgrade_type": 1}], "validate_only": True}
    assert env.call(57, 1, features).error_code == E.cluster_authorization_failed
    env.acl(ALICE, O.DESCRIBE, CLUSTER, "kafka-cluster")
    assert env.call(55, 2, quorum).error_code == E.none
    dc = env.call(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
    assert dc.cluster_authorized_operations == 1 << O.DESCRIBE
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")
    assert env.call(57, 1, features).error_code != E.cluster_authorization_failed


# -- producers and transactions -------------------------------------------------------
def init_pid(env: Env, txn: str | None) -> ErrorCode:
    r = env.call(22, 4, {"transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1,
                         "producer_epoch": -1})
    return ErrorCode(r.error_code)


def test_init_producer_id(env: Env) -> None:
    assert init_pid(env, None) == E.cluster_authorization_failed
    env.acl(ALICE, O.WRITE, TOPIC, "any-", PRE)  # WRITE on some topic is enough (authorizeByResourceType)
    assert init_pid(env, None) == E.none
    env.clear_acls()
    env.acl(ALICE, O.IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster")
    assert init_pid(env, None) == E.none
    assert init_pid(env, "tx-a") == E.transactional_id_authorization_failed
    env.acl(ALICE, O.WRITE, TXN, "tx-", PRE)
    assert init_pid(env, "tx-a") == E.none


def test_add_partitions_to_txn_v3_and_batched_v4(env: Env) -> None:
    def add(topic: str) -> dict[str, ErrorCode]:
        r = env.call(24, 3, {"v3_and_below_transactional_id": "tx-b", "v3_and_below_producer_id": 1,
                             "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
                                 {"name": topic, "partitions": [0]}, {"name": "orders", "partitions": [0]}]})
        return {t.name: ErrorCode(t.results_by_partition[0].partition_error_code)
                for t in r.results_by_topic_v3_and_below}
    assert set(add("secret").values()) == {E.transactional_id_authorization_failed}
    env.acl(ALICE, O.WRITE, TXN, "tx-b")
    env.acl(ALICE, O.WRITE, TOPIC, "orders")
    assert add("secret") == {"secret": E.topic_authorization_failed, "orders": E.operation_not_attempted}
    assert add("__consumer_offsets")["__consumer_offsets"] in (E.topic_authorization_failed,
                                                               E.unknown_topic_or_partition)
    batched = {"transactions": [{"transactional_id": "tx-b", "producer_id": 1, "producer_epoch": 0,
                                 "verify_only": True, "topics": [{"name": "orders", "partitions": [0]}]}]}
    assert env.call(24, 4, batched).error_code == E.cluster_authorization_failed
    env.acl(ALICE, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert env.call(24, 4, batched).error_code == E.none


def test_add_offsets_txn_offset_commit_end_txn(env: Env) -> None:
    def add_offsets() -> ErrorCode:
        return ErrorCode(env.call(25, 3, {"transactional_id": "tx-c", "producer_id": 1, "producer_epoch": 0,
                                          "group_id": "tg"}).error_code)

    def txn_commit(topic: str = "orders") -> ErrorCode:
        r = env.call(28, 3, {"transactional_id": "tx-c", "group_id": "tg", "producer_id": 1, "producer_epoch": 0,
                             "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                                 {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": ""}]}]})
        return ErrorCode(r.topics[0].partitions[0].error_code)

    def end() -> ErrorCode:
        return ErrorCode(env.call(26, 3, {"transactional_id": "tx-c", "producer_id": 1, "producer_epoch": 0,
                                          "committed": True}).error_code)
    assert add_offsets() == E.transactional_id_authorization_failed
    assert txn_commit() == E.transactional_id_authorization_failed
    assert end() == E.transactional_id_authorization_failed
    env.acl(ALICE, O.WRITE, TXN, "tx-c")
    assert add_offsets() == E.group_authorization_failed
    assert txn_commit() == E.group_authorization_failed
    assert end() not in (E.transactional_id_authorization_failed, E.none)  # no such transaction: the coordinator's
    env.acl(ALICE, O.READ, GROUP, "tg")
    assert add_offsets() not in (E.group_authorization_failed, E.transactional_id_authorization_failed)
    assert txn_commit() == E.topic_authorization_failed
    env.acl(ALICE, O.READ, TOPIC, "orders")
    assert txn_commit() != E.topic_authorization_failed


def test_write_txn_markers_needs_cluster_action_or_alter(env: Env) -> None:
    body = {"markers": [{"producer_id": 9, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                         "topics": [{"name": "orders", "partition_indexes": [0]}]}]}

    def code() -> ErrorCode:
        return ErrorCode(env.call(27, 1, body).markers[0].topics[0].partitions[0].error_code)
    assert code() == E.cluster_authorization_failed
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")
    assert code() != E.cluster_authorization_failed
    env.clear_acls()
    env.acl(ALICE, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert code() != E.cluster_authorization_failed


# -- KIP-848 and share groups ---------------------------------------------------------
def test_consumer_group_heartbeat_and_describe(env: Env) -> None:
    def hb(topics: list[str]) -> Any:
        return env.call(68, 0, {"group_id": "kg", "member_id": uuid.uuid4().hex[:22], "member_epoch": 0,
                                "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
                                "subscribed_topic_names": topics, "server_assignor": None,
                                "topic_partitions": []})
    assert hb(["orders"]).error_code == E.group_authorization_failed
    env.acl(ALICE, O.READ, GROUP, "kg")
    assert hb(["orders", "secret"]).error_code == E.topic_authorization_failed
    env.acl(ALICE, O.DESCRIBE, TOPIC, "orders")
    assert hb(["orders"]).error_code == E.none

    def describe(principal: str = ALICE) -> Any:
        return env.call(69, 0, {"group_ids": ["kg"], "include_authorized_operations": True}, principal).groups[0]
    d = describe(BOB)
    assert d.error_code == E.group_authorization_failed
    d = describe()
    assert d.error_code == E.none and d.authorized_operations == (1 << O.READ) | (1 << O.DESCRIBE)
    env.clear_acls()
    env.acl(ALICE, O.DESCRIBE, GROUP, "kg")  # the group yes, its topic no
    d = describe()
    assert d.error_code == E.topic_authorization_failed and not d.members


def test_share_group_apis(env: Env) -> None:
    def hb() -> Any:
        return env.call(76, 1, {"group_id": "sg", "member_id": uuid.uuid4().hex[:22], "member_epoch": 0,
                                "rack_id": None, "subscribed_topic_names": ["orders"]})
    assert hb().error_code == E.group_authorization_failed
    env.acl(ALICE, O.READ, GROUP, "sg")
    assert hb().error_code == E.topic_authorization_failed
    d = env.call(77, 1, {"group_ids": ["sg"], "include_authorized_operations": False}, BOB).groups[0]
    assert d.error_code == E.group_authorization_failed
    tid = env.b.image.topics["orders"].topic_id
    fetch_body = {"group_id": "other", "member_id": "m", "share_session_epoch": 0, "max_wait": 0, "min_bytes": 1,
                  "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                  "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                               "acknowledgement_batches": []}]}],
                  "forgotten_topics_data": []}
    assert env.call(78, 1, fetch_body).error_code == E.group_authorization_failed
    ack_body = {"group_id": "other", "member_id": "m", "share_session_epoch": 1, "topics": []}
    assert env.call(79, 1, ack_body).error_code == E.group_authorization_failed
    offsets = {"groups": [{"group_id": "sg", "topics": [{"topic_name": "orders", "partitions": [0]}]}]}
    g = env.call(90, 0, offsets, BOB).groups[0]
    assert g.error_code == E.group_authorization_failed
    env.acl(ALICE, O.DESCRIBE, GROUP, "sg")
    g = env.call(90, 0, offsets).groups[0]
    assert g.error_code == E.none and g.topics[0].partitions[0].error_code == E.topic_authorization_failed
    alter = {"group_id": "sg", "topics": [{"topic_name": "orders", "partitions": [{"partition_index": 0,
                                                                                   "start_offset": 0}]}]}
    assert env.call(91, 0, alter, BOB).error_code == E.group_authorization_failed
    assert env.call(92, 0, {"group_id": "sg", "topics": [{"topic_name": "orders"}]}).error_code \
        == E.group_authorization_failed  # DESCRIBE/READ on the group do not imply DELETE


def test_share_state_rpcs_need_cluster_action(env: Env) -> None:
    tid = env.b.image.topics["orders"].topic_id
    body = {"group_id": "sg", "topics": [{"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}

    def code() -> ErrorCode:
        return ErrorCode(env.call(87, 1, body).results[0].partitions[0].error_code)
    assert code() == E.cluster_authorization_failed
    env.acl(ALICE, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert code() != E.cluster_authorization_failed
    assert find_coordinator(env, f"sg:{'A' * 22}:0", key_type=2) != E.cluster_authorization_failed


def test_transaction_admin_apis(env: Env) -> None:
    p = env.call(61, 0, {"topics": [{"name": "orders", "partition_indexes": [0]}]})
    assert p.topics[0].partitions[0].error_code == E.topic_authorization_failed
    env.acl(ALICE, O.READ, TOPIC, "orders")
    assert env.call(61, 0, {"topics": [{"name": "orders", "partition_indexes": [0]}]}
                    ).topics[0].partitions[0].error_code == E.none
    d = env.call(65, 0, {"transactional_ids": ["tx-d"]}).transaction_states[0]
    assert d.error_code == E.transactional_id_authorization_failed
    env.acl(ALICE, O.DESCRIBE, TXN, "tx-d")
    assert env.call(65, 0, {"transactional_ids": ["tx-d"]}).transaction_states[0].error_code \
        != E.transactional_id_authorization_failed


def test_list_transactions_lists_only_describable_ids(env: Env) -> None:
    env.acl(ADMIN, O.ALL, TXN, "*")
    r = env.call(22, 4, {"transactional_id": "tx-list", "transaction_timeout": 60000, "producer_id": -1,
                         "producer_epoch": -1}, ADMIN)
    assert r.error_code == E.none
    env.clear_acls()
    listed = env.call(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    assert "tx-list" not in {t.transactional_id for t in listed.transaction_states}
    env.acl(ALICE, O.DESCRIBE, TXN, "tx-list")
    listed = env.call(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    assert "tx-list" in {t.transactional_id for t in listed.transaction_states}


# -- controller RPCs (a controller's listener) ----------------------------------------
def test_controller_rpcs_need_cluster_action_and_unregister_alter(env: Env) -> None:
    from hightide.cluster.lifecycle import LifecycleConfig
    from hightide.node.controller_service import ControllerService
    from hightide.server.handlers import controller_routes
    b = env.b
    assert b.metadata is not None
    metadata = b.metadata
    service = ControllerService(node_id=1, cluster_id=b.cluster_id or "c", config=LifecycleConfig(),
                                write=b.metadata_writer.write_metadata, image=lambda: b.image, metadata_log=lambda: metadata.log,
                                committed_end=lambda: b.image.offset + 1)
    routes = controller_routes(service)

    def call(api_key: int, version: int, body: dict) -> Any:
        header = RequestHeader(api_key, version, 7, "matrix")
        ctx = RequestContext(b.services, header, "10.0.0.1:5555", {}, principal=ALICE)
        result = routes[api_key].fn(ctx, materialize(request_schema(api_key, version), body))
        result = env.run(result) if hasattr(result, "__await__") else result
        if isinstance(result, bytes):
            return decode_response(api_key, version, result[4:])[1]
        return result
    registration = {"broker_id": 7, "cluster_id": b.cluster_id or "c", "incarnation_id": uuid.uuid4(),
                    "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": 0}],
                    "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
                    "previous_broker_epoch": -1}
    heartbeat = {"broker_id": 7, "broker_epoch": 1, "current_metadata_offset": 0, "want_fence": False,
                 "want_shut_down": False}
    metadata_fetch = {"replica_id": 7, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                      "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}
    pids = {"broker_id": 7, "broker_epoch": 1}
    refused = E.cluster_authorization_failed
    assert call(62, 3, registration).error_code == refused
    assert call(63, 1, heartbeat).error_code == refused
    assert call(1, 12, metadata_fetch).error_code == refused
    assert call(67, 0, pids).error_code == refused
    assert call(64, 0, {"broker_id": 7}).error_code == refused
    assert call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}).error_code == refused
    envelope = call(58, 0, {"request_data": b"\x00", "request_principal": None, "client_host_address": b""})
    assert envelope.error_code == refused
    env.acl(ALICE, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert call(62, 3, registration).error_code != refused
    assert call(63, 1, heartbeat).error_code != refused
    assert call(1, 12, metadata_fetch).error_code != refused
    assert call(67, 0, pids).error_code != refused
    assert call(58, 0, {"request_data": b"\x00", "request_principal": None, "client_host_address": b""}
                ).error_code == E.invalid_request  # past the check: an unreadable inner request
    assert call(64, 0, {"broker_id": 7}).error_code == refused  # UnregisterBroker needs ALTER
    env.acl(ALICE, O.ALTER, CLUSTER, "kafka-cluster")
    assert call(64, 0, {"broker_id": 7}).error_code != refused
    assert call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}).error_code == E.none


def test_without_an_authorizer_the_acl_apis_are_security_disabled(open_env: Env) -> None:
    creation = {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": BOB,
                "host": "*", "operation": 3, "permission_type": 3}
    flt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    created = open_env.call(30, 3, {"creations": [creation]}).results[0]
    assert (created.error_code, created.error_message) == (E.security_disabled, "No Authorizer is configured.")
    assert open_env.call(29, 3, flt).error_code == E.security_disabled
    assert open_env.call(31, 3, {"filters": [flt]}).filter_results[0].error_code == E.security_disabled
    assert len(open_env.b.image.security.acls) == 0


# -- random requests with the authorizer on -------------------------------------------
def test_random_requests_with_the_authorizer_on_never_crash_handlers(env: Env) -> None:
    """Every route, its newest version, a few random requests as alice (a prefixed
    ALLOW and a DENY in force): answered (or the connection closed), never an exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from hightide.protocol.codec import encode_response
    from hightide.server.registry import CloseConnection

    import dataclasses

    from kio.static.primitive import Records
    st.register_type_strategy(Records, st.one_of(  # as tests/reliability/test_fuzz_handlers.py
        st.binary(max_size=200),
        st.builds(lambda v: build_batch([(None, v, [], int(time.time() * 1000))]), st.binary(max_size=50))))

    def _cap_admin(api_key: int, request: Any) -> Any:  # what a random request may create stays small
        if api_key == 19:
            return dataclasses.replace(request, topics=tuple(
                dataclasses.replace(t, num_partitions=min(t.num_partitions, 4)) for t in request.topics[:3]))
        return dataclasses.replace(request, topics=tuple(
            dataclasses.replace(t, count=min(t.count, 4)) for t in request.topics[:3]))
    env.acl(ALICE, O.ALL, TOPIC, "a", PRE)
    env.acl(ALICE, O.READ, TOPIC, "ab", PRE, permission=DENY)
    env.acl(ALICE, O.ALL, GROUP, "*")
    def checker(api_key: int, version: int) -> Callable[[], None]:
        @settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(st.from_type(request_schema(api_key, version)))
        def check(request: Any) -> None:
            if api_key in (19, 37):
                request = _cap_admin(api_key, request)
            header = RequestHeader(api_key, version, 7, "fuzz")
            ctx = RequestContext(env.b.services, header, "10.0.0.1:5555", {}, principal=ALICE)
            try:
                result = env.b.routes[api_key].fn(ctx, request)
                if hasattr(result, "__await__"):
                    result = env.run(asyncio.wait_for(result, 0.5))
            except (CloseConnection, asyncio.TimeoutError):
                return
            if result is not None and not isinstance(result, (RawResponse, bytes)):
                encode_response(api_key, version, 7, result)
        return check
    for api_key, route in sorted(env.b.routes.items()):
        checker(api_key, route.max_version)()
