"""Topic administration through confluent-kafka's and kafka-python's admin clients:
CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs, DescribeCluster, DeleteRecords, OffsetForLeaderEpoch,
Metadata auto-creation."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, OffsetSpec)

from ..rawkafka import RawClient
from ..waiting import wait_until
from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def _error_code(fut):
    with pytest.raises(KafkaException) as exc:
        fut.result(10)
    return exc.value.args[0].code()


def test_create_describe_delete(admin, topic_name):
    fs = admin.create_topics([NewTopic(topic_name, 4, 1, config={"retention.ms": "3600000"})])
    fs[topic_name].result(10)
    assert _error_code(admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name]) == 36  # TOPIC_ALREADY_EXISTS
    assert _error_code(admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"]) == 17  # INVALID_TOPIC_EXCEPTION
    assert _error_code(admin.create_topics([NewTopic(topic_name + "-rf", 1, 3)])[topic_name + "-rf"]) == 38
    assert _error_code(admin.create_topics([NewTopic(topic_name + "-cfg", 1, 1, config={"nope": "1"})])[
        topic_name + "-cfg"]) == 40  # INVALID_CONFIG
    md = admin.list_topics(topic_name, timeout=10)
    assert len(md.topics[topic_name].partitions) == 4
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "3600000" and not cfg["retention.ms"].is_default
    assert cfg["segment.bytes"].value == "1073741824" and cfg["segment.bytes"].is_default
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])])[res].result(10)
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "1000"
    assert cfg["cleanup.policy"].value == "delete,compact"
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert _error_code(admin.incremental_alter_configs([bad])[res]) == 40  # INVALID_CONFIG
    admin.create_partitions([NewPartitions(topic_name, 6)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 6
    assert _error_code(admin.create_partitions([NewPartitions(topic_name, 2)])[topic_name]) == 37  # INVALID_PARTITIONS
    admin.delete_topics([topic_name])[topic_name].result(10)
    assert topic_name not in admin.list_topics(timeout=10).topics
    assert _error_code(admin.delete_topics([topic_name])[topic_name]) == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_recreated_topic_starts_empty(server, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    confluent_produce(server.bootstrap, topic_name, [Rec(0, None, b"x", (), 1)] * 5)
    admin.delete_topics([topic_name])[topic_name].result(10)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    tp = TopicPartition(topic_name, 0)
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset == 0


def test_describe_cluster_and_broker_configs(server, admin):
    desc = admin.describe_cluster().result(10)
    assert desc.cluster_id and len(desc.nodes) == 1 and desc.controller.id == desc.nodes[0].id
    node = desc.nodes[0]
    assert (node.host, node.port) == ("127.0.0.1", server.port)
    res = ConfigResource(ConfigResource.Type.BROKER, str(node.id))
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["num.partitions"].value == "1"
    assert cfg["auto.create.topics.enable"].value == "true"


def test_delete_records(server, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"segment.bytes": "1024"})])[topic_name].result(10)
    recs = [Rec(0, None, b"x" * 200, (), 1_700_000_000_000 + i) for i in range(40)]
    for i in range(0, 40, 4):
        confluent_produce(server.bootstrap, topic_name, recs[i:i + 4], extra={"linger.ms": 0})
    tp = TopicPartition(topic_name, 0, 25)
    res = admin.delete_records([tp])[tp].result(10)
    assert res.low_watermark == 25
    tp0 = TopicPartition(topic_name, 0)
    assert admin.list_offsets({tp0: OffsetSpec.earliest()})[tp0].result(10).offset == 25
    with RawClient(server.bootstrap) as c:  # beyond the high watermark
        r = c.request(21, 2, {"topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "offset": 99}]}],
                              "timeout": 5000})
        assert r.topics[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE
        # fetching below the new log start is out of range
        f = c.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                  {"topic": topic_name, "partitions": [{"partition": 0, "fetch_offset": 3,
                                                                        "partition_max_bytes": 1 << 20}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
        p = f.responses[0].partitions[0]
        assert (p.error_code, p.log_start_offset) == (1, 25)


def test_offset_for_leader_epoch(server, topic_name, admin):
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    confluent_produce(server.bootstrap, topic_name, [Rec(0, None, b"x", (), 1)] * 7)
    with RawClient(server.bootstrap) as c:
        body = {"replica_id": -1, "topics": [{"topic": topic_name, "partitions": [
            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": 5, "leader_epoch": 0}]}]}
        r = c.request(23, 4, body)
        ok, fenced = r.topics[0].partitions
        assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (0, 0, 7)
        assert fenced.error_code == 75  # UNKNOWN_LEADER_EPOCH


def test_metadata_auto_creates_topics(server, topic_name):
    with RawClient(server.bootstrap) as c:
        r = c.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}], "allow_auto_topic_creation": True,
                              "include_topic_authorized_operations": False})
        t = r.topics[0]
        assert t.error_code == 0 and len(t.partitions) == 1 and t.topic_id.int != 0
        r = c.request(3, 12, {"topics": [{"name": topic_name + "-no", "topic_id": None}],
                              "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert r.topics[0].error_code == 3
        r = c.request(3, 4, {"topics": [{"name": "bad name"}], "allow_auto_topic_creation": True})
        assert r.topics[0].error_code == 17


def test_metadata_by_topic_id_with_an_empty_name(server, topic_name):
    """Issue 29 item 3: the Java client sends Metadata v12 topics with the id set and the
    name at its default "" (not null); Kafka looks a topic up by id whenever the id is not
    zero (and then ignores the names: entries with a zero id are dropped)."""
    import uuid as _uuid
    with RawClient(server.bootstrap) as c:
        r = c.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}], "allow_auto_topic_creation": True,
                              "include_topic_authorized_operations": False})
        tid = r.topics[0].topic_id
        for name in ("", None, "some-other-name"):
            r = c.request(3, 12, {"topics": [{"name": name, "topic_id": tid}], "allow_auto_topic_creation": True,
                                  "include_topic_authorized_operations": False})
            assert [(t.error_code, t.name, t.topic_id) for t in r.topics] == [(0, topic_name, tid)], name
            assert len(r.topics[0].partitions) == 1
        missing = _uuid.uuid4()
        r = c.request(3, 12, {"topics": [{"name": "", "topic_id": missing}, {"name": "", "topic_id": tid},
                                         {"name": topic_name + "-ignored", "topic_id": None}],
                              "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
        got = sorted((t.error_code, t.name, t.topic_id) for t in r.topics)
        assert got == [(0, topic_name, tid), (100, None, missing)]  # UNKNOWN_TOPIC_ID, name null
        r = c.request(3, 12, {"topics": [{"name": topic_name + "-ignored", "topic_id": None}],
                              "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert r.topics[0].error_code == 3  # the entry with a zero id was not auto-created above


def test_kafka_python_admin(server, topic_name):
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic
    from kafka.admin import ConfigResource as KRes, ConfigResourceType
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        a.create_topics([KNewTopic(topic_name, 2, 1, topic_configs={"retention.bytes": "1048576"})])
        wait_until(lambda: topic_name in a.list_topics(), timeout=5, interval=0.05, what="the created topic to be listed")
        cfgs = a.describe_configs([KRes(ConfigResourceType.TOPIC, topic_name)])
        assert "1048576" in repr(cfgs)
        a.delete_topics([topic_name])
    finally:
        a.close()


# -- authorized operations (KIP-430): Kafka without an authorizer allows everything -------------
ALL_TOPIC_OPS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
ALL_CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                   "DESCRIBE"}
ALL_GROUP_OPS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def test_authorized_operations_confluent(server, admin, topic_name):
    from confluent_kafka import Consumer, TopicCollection
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert {op.name for op in cluster.authorized_operations} == ALL_CLUSTER_OPS
    assert admin.describe_cluster().result(10).authorized_operations is None  # not asked: omitted
    topics = admin.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True)
    desc = topics[topic_name].result(10)
    assert {op.name for op in desc.authorized_operations} == ALL_TOPIC_OPS
    group = f"g-ops-{topic_name[-6:]}"
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)  # an Empty classic group
        got = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(10)
        assert {op.name for op in got.authorized_operations} == ALL_GROUP_OPS
    finally:
        c.close()


def test_authorized_operations_bit_fields(server, topic_name):
    """The exact bits Kafka sends: 1 << AclOperation code for each supported operation."""
    topic_bits = sum(1 << c for c in (3, 4, 5, 6, 7, 8, 10, 11))
    cluster_bits = sum(1 << c for c in (5, 7, 8, 9, 10, 11, 12))
    with RawClient(server.bootstrap) as c:
        r = c.request(3, 10, {"topics": [{"name": topic_name, "topic_id": None}], "allow_auto_topic_creation": True,
                              "include_cluster_authorized_operations": True,
                              "include_topic_authorized_operations": True})
        assert (r.topics[0].topic_authorized_operations, r.cluster_authorized_operations) == (topic_bits, cluster_bits)
        r = c.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        assert r.topics[0].topic_authorized_operations == -(2**31)
        d = c.request(60, 0, {"include_cluster_authorized_operations": True})
        assert d.cluster_authorized_operations == cluster_bits
        g = c.request(15, 5, {"groups": ["no-such-group"], "include_authorized_operations": True})
        assert g.groups[0].authorized_operations == sum(1 << c for c in (3, 6, 8, 10, 11))  # Dead, no error


def test_group_describe_apis_answer_authorized_operations(server, topic_name):
    """ConsumerGroupDescribe (69) and ShareGroupDescribe (77): a described group carries
    every group operation when asked (Kafka without an authorizer), INT32_MIN when not
    asked; a group that failed (GROUP_ID_NOT_FOUND) carries INT32_MIN either way."""
    group_bits, omitted = sum(1 << c for c in (3, 6, 8, 10, 11)), -(2**31)
    cg, sg = f"cg-ops-{topic_name[-6:]}", f"sg-ops-{topic_name[-6:]}"
    with RawClient(server.bootstrap) as c:
        c.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}], "allow_auto_topic_creation": True,
                          "include_topic_authorized_operations": False})
        hb = c.request(68, 0, {"group_id": cg, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                               "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
                               "subscribed_topic_names": [topic_name], "server_assignor": None,
                               "topic_partitions": []})
        assert hb.error_code == 0, hb.error_message
        hb = c.request(76, 1, {"group_id": sg, "member_id": str(uuid.uuid4()), "member_epoch": 0, "rack_id": None,
                               "subscribed_topic_names": [topic_name]})
        assert hb.error_code == 0, hb.error_message
        for api, version, group in ((69, 0, cg), (69, 1, cg), (77, 1, sg)):
            for asked, bits in ((True, group_bits), (False, omitted)):
                r = c.request(api, version, {"group_ids": [group, "no-such-group"],
                                             "include_authorized_operations": asked})
                ok, missing = r.groups
                assert (ok.error_code, ok.authorized_operations) == (0, bits), (api, version, asked)
                assert (missing.error_code, missing.authorized_operations) == (69, omitted)  # GROUP_ID_NOT_FOUND
