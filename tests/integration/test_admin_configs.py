"""AlterConfigs (API 33), the non-incremental form: the configs sent replace the
resource's whole set of dynamic configs (Kafka's legacyAlterConfigs), per-resource
errors, ``validate_only``. Driven by kafkajs (whose ``alterConfigs`` is this API),
confluent-kafka's ``alter_configs`` and raw requests."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

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
