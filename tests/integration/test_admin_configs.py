"""AlterConfigs (API 33), the non-incremental form: the configs sent replace the
resource's whole set of dynamic configs (Kafka's legacyAlterConfigs), per-resource
errors, ``validate_only``. Driven by kafkajs (whose ``alterConfigs`` is this API),
confluent-kafka's ``alter_configs`` and raw requests."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from ..rawkafka import RawClient
from .kafkajs import run_kafkajs

pytestmark = pytest.mark.integration

DESCRIBE = ["retention.ms", "segment.bytes", "cleanup.policy"]


@pytest.fixture
def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def _create(admin, topic: str, configs: dict) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(10)


def _describe(admin, topic: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: (v.value, v.is_default) for k, v in admin.describe_configs([res])[res].result(10).items()}


def test_kafkajs_alter_configs_replaces_the_whole_set(server, admin, topic_name):
    _create(admin, topic_name, {"retention.ms": "3600000", "segment.bytes": "1048576"})
    got = run_kafkajs({"brokers": [server.bootstrap], "action": "alterConfigs", "describe": DESCRIBE,
                       "resources": [{"type": "topic", "name": topic_name, "configs": {"cleanup.policy": "compact"}}]})
    assert got["error"] is None
    cfg = got["configs"][0]
    assert cfg["cleanup.policy"] == {"value": "compact", "isDefault": False}
    # Not named: deleted, back to the broker default.
    assert cfg["retention.ms"] == {"value": "604800000", "isDefault": True}
    assert cfg["segment.bytes"] == {"value": "1073741824", "isDefault": True}


def test_kafkajs_alter_configs_validate_only_and_errors(server, admin, topic_name):
    _create(admin, topic_name, {"retention.ms": "3600000"})
    got = run_kafkajs({"brokers": [server.bootstrap], "action": "alterConfigs", "describe": DESCRIBE,
                       "validateOnly": True,
                       "resources": [{"type": "topic", "name": topic_name, "configs": {"segment.bytes": "2000000"}}]})
    assert got["error"] is None
    assert got["configs"][0]["retention.ms"]["value"] == "3600000"  # nothing written
    assert got["configs"][0]["segment.bytes"]["isDefault"] is True
    bad = run_kafkajs({"brokers": [server.bootstrap], "action": "alterConfigs", "describe": DESCRIBE,
                       "resources": [{"type": "topic", "name": topic_name, "configs": {"retention.ms": "soon"}}]})
    assert bad["error"]["type"] == "INVALID_CONFIG"
    assert bad["configs"][0]["retention.ms"]["value"] == "3600000"


def test_confluent_alter_configs(server, admin, topic_name):
    _create(admin, topic_name, {"retention.ms": "3600000"})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"retention.bytes": "1048576"})
    admin.alter_configs([res])[res].result(10)
    cfg = _describe(admin, topic_name)
    assert cfg["retention.bytes"] == ("1048576", False) and cfg["retention.ms"] == ("604800000", True)
    missing = ConfigResource(ConfigResource.Type.TOPIC, topic_name + "-missing", set_config={"retention.ms": "1"})
    with pytest.raises(KafkaException) as exc:
        admin.alter_configs([missing])[missing].result(10)
    assert exc.value.args[0].code() == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_raw_alter_configs_per_resource_answers(server, admin, topic_name):
    _create(admin, topic_name, {})
    other = topic_name + "-b"
    _create(admin, other, {"retention.ms": "1000"})

    def res(rtype, name, configs):
        return {"resource_type": rtype, "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs]}
    with RawClient(server.bootstrap) as c:
        r = c.request(33, 2, {"validate_only": False, "resources": [
            res(2, topic_name, [("retention.ms", "5"), ("retention.ms", "7")]),  # last value wins
            res(2, other, [("no.such.config", "1")]),
            res(2, topic_name + "-dup", []), res(2, topic_name + "-dup", []),
            res(2, topic_name + "-null", [("retention.ms", None)]),
            res(99, "x", []),
        ]})
        got = {(x.resource_type, x.resource_name): (x.error_code, x.error_message) for x in r.responses}
        assert len(r.responses) == 5
        assert got[(2, topic_name)] == (0, None)
        assert got[(2, other)][0] == 40 and "no.such.config" in got[(2, other)][1]  # INVALID_CONFIG
        assert got[(2, topic_name + "-dup")] == (42, "Duplicate resource.")  # INVALID_REQUEST
        assert got[(2, topic_name + "-null")] == (40, "Null value not supported for topic configs: retention.ms")
        assert got[(99, "x")][0] == 35  # UNSUPPORTED_VERSION: unknown resource type
    assert _describe(admin, topic_name)["retention.ms"] == ("7", False)
    assert _describe(admin, other)["retention.ms"] == ("1000", False)  # the failed resource is unchanged


# -- DescribeConfigs details: Kafka's synonyms and sources, every topic config -------------------
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


def _raw_describe(bootstrap: str, rtype: int, name: str, keys=None) -> dict:
    """{config: (value, source, read_only, [(synonym, value, source), ...])} via DescribeConfigs v4."""
    with RawClient(bootstrap) as c:
        r = c.request(32, 4, {"resources": [{"resource_type": rtype, "resource_name": name,
                                             "configuration_keys": keys}],
                              "include_synonyms": True, "include_documentation": False})
    res = r.results[0]
    assert res.error_code == 0, res.error_message
    return {e.name: (e.value, e.config_source, e.read_only, [(s.name, s.value, s.source) for s in e.synonyms])
            for e in res.configs}


def test_topic_synonyms_as_kafka(server, admin, topic_name):
    _create(admin, topic_name, {"segment.bytes": "1048576"})
    cfg = _raw_describe(server.bootstrap, 2, topic_name)
    # log.retention.ms has no default of its own in Kafka (log.retention.hours carries it),
    # so a default retention.ms lists no synonym at all.
    assert cfg["retention.ms"] == ("604800000", DEFAULT, False, [])
    assert cfg["segment.ms"] == ("604800000", DEFAULT, False, [])
    assert cfg["segment.bytes"] == ("1048576", DYNAMIC_TOPIC, False, [
        ("segment.bytes", "1048576", DYNAMIC_TOPIC), ("log.segment.bytes", "1073741824", DEFAULT)])
    assert cfg["max.message.bytes"][3] == [("message.max.bytes", "1048588", DEFAULT)]
    assert cfg["segment.index.bytes"][3] == [("log.index.size.max.bytes", "10485760", DEFAULT)]
    # The topic configs Kafka 4 describes that were missing.
    assert cfg["preallocate"] == ("false", DEFAULT, False, [("log.preallocate", "false", DEFAULT)])
    assert cfg["segment.jitter.ms"] == ("0", DEFAULT, False, [])
    assert cfg["leader.replication.throttled.replicas"] == ("", DEFAULT, False, [])
    assert cfg["follower.replication.throttled.replicas"] == ("", DEFAULT, False, [])


def test_static_retention_synonyms(fresh_server, topic_name):
    srv = fresh_server("--set", "log.retention.ms=7200000", "--set", "log.retention.hours=5")
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    _create(admin, topic_name, {})
    cfg = _raw_describe(srv.bootstrap, 2, topic_name, ["retention.ms"])
    assert cfg["retention.ms"] == ("7200000", STATIC, False, [
        ("log.retention.ms", "7200000", STATIC), ("log.retention.hours", "5", STATIC),
        ("log.retention.hours", "168", DEFAULT)])
    throttled = ConfigResource(ConfigResource.Type.TOPIC, topic_name,
                               set_config={"leader.replication.throttled.replicas": "0:1,1:1"})
    admin.alter_configs([throttled])[throttled].result(10)
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name,
                         set_config={"leader.replication.throttled.replicas": "zero"})
    with pytest.raises(KafkaException) as exc:
        admin.alter_configs([bad])[bad].result(10)
    assert exc.value.args[0].code() == 40  # INVALID_CONFIG


# -- dynamic broker configs ----------------------------------------------------------------------
def _incremental(bootstrap: str, name: str, ops: list, validate_only: bool = False):
    with RawClient(bootstrap) as c:
        r = c.request(44, 1, {"validate_only": validate_only, "resources": [{
            "resource_type": 4, "resource_name": name,
            "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}]})
    return r.responses[0].error_code, r.responses[0].error_message


def test_dynamic_broker_configs(fresh_server, topic_name):
    from confluent_kafka import Producer
    srv = fresh_server("--node-id", "1")
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    _create(admin, topic_name, {})
    # Cluster default: topics without an override follow it.
    assert _incremental(srv.bootstrap, "", [("log.retention.ms", 0, "3600000")]) == (0, None)
    cfg = _raw_describe(srv.bootstrap, 2, topic_name, ["retention.ms"])
    assert cfg["retention.ms"] == ("3600000", DYNAMIC_DEFAULT, False, [
        ("log.retention.ms", "3600000", DYNAMIC_DEFAULT), ("log.retention.hours", "168", DEFAULT)])
    assert _raw_describe(srv.bootstrap, 4, "") == {
        "log.retention.ms": ("3600000", DYNAMIC_DEFAULT, False, [("log.retention.ms", "3600000", DYNAMIC_DEFAULT)])}
    # Per broker, over the default; in force at once (max.message.bytes follows message.max.bytes).
    per_broker = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([per_broker])[per_broker].result(10)
    broker = _raw_describe(srv.bootstrap, 4, "1", ["message.max.bytes", "num.partitions"])
    assert broker["message.max.bytes"] == ("2000", DYNAMIC_BROKER, False, [
        ("message.max.bytes", "2000", DYNAMIC_BROKER), ("message.max.bytes", "1048588", DEFAULT)])
    assert broker["num.partitions"][1:3] == (DEFAULT, True)  # read-only: not dynamic
    p = Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 0, "message.send.max.retries": 0})
    errors = []
    p.produce(topic_name, value=b"x" * 5000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0].code() == 10  # MESSAGE_TOO_LARGE
    # Not dynamic, unknown or invalid: INVALID_REQUEST, nothing written; validate_only writes nothing.
    code, msg = _incremental(srv.bootstrap, "", [("num.partitions", 0, "3")])
    assert (code, msg) == (42, "Cannot update these configs dynamically: Set(num.partitions)")
    assert _incremental(srv.bootstrap, "", [("log.retention.ms", 0, "soon")])[0] == 42
    assert _incremental(srv.bootstrap, "", [("log.segment.bytes", 0, "2000000")], validate_only=True) == (0, None)
    assert "log.segment.bytes" not in _raw_describe(srv.bootstrap, 4, "")
    # Kept in the metadata log: in force again after a restart.
    assert srv.stop() == 0
    srv = fresh_server("--node-id", "1", data_dir=srv.data_dir, port=srv.port)
    assert _raw_describe(srv.bootstrap, 4, "1", ["message.max.bytes"])["message.max.bytes"][:2] == (
        "2000", DYNAMIC_BROKER)
    assert _raw_describe(srv.bootstrap, 2, topic_name, ["max.message.bytes"])["max.message.bytes"][:2] == (
        "2000", DYNAMIC_BROKER)
    # Kafka refuses only names it knows to be static (issue 29 item 4): a topic config's
    # name on broker "1" is accepted and kept, as Kafka keeps any name it does not know.
    with RawClient(srv.bootstrap) as c:
        r = c.request(33, 2, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "1",
            "configs": [{"name": "message.max.bytes", "value": "2000"}, {"name": "cleanup.policy", "value": "compact"}]}]})
        assert (r.responses[0].error_code, r.responses[0].error_message) == (0, None)
        r = c.request(33, 2, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "1", "configs": [{"name": "log.dirs", "value": "/x"}]}]})
        assert (r.responses[0].error_code, r.responses[0].error_message) == (
            42, "Cannot update these configs dynamically: Set(log.dirs)")
    kept = _raw_describe(srv.bootstrap, 4, "1", ["cleanup.policy", "message.max.bytes"])
    assert kept["cleanup.policy"][:3] == (None, DYNAMIC_BROKER, True)  # as Kafka: unknown type, so sensitive
    assert kept["message.max.bytes"][:2] == ("2000", DYNAMIC_BROKER)
    assert _incremental(srv.bootstrap, "1", [("cleanup.policy", 1, None)]) == (0, None)
    assert "cleanup.policy" not in _raw_describe(srv.bootstrap, 4, "1")
    # AlterConfigs replaces the cluster default's whole set.
    with RawClient(srv.bootstrap) as c:
        r = c.request(33, 2, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "",
            "configs": [{"name": "log.cleaner.backoff.ms", "value": "20000"}]}]})
        assert r.responses[0].error_code == 0
    assert set(_raw_describe(srv.bootstrap, 4, "")) == {"log.cleaner.backoff.ms"}
