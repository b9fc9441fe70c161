"""Kafka's DescribeConfigs synonyms (ConfigHelper.configSynonyms), dynamic broker configs
in the metadata image and in force on the BrokerConfig."""

import pytest

from hightide.cluster import records as R
from hightide.cluster.image import MetadataImage
from hightide.config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    BrokerConfig,
    ConfigError,
    config_synonyms,
    effective_topic_config,
    validate_dynamic_broker_configs,
)


def test_default_retention_has_no_synonym_of_its_own_name():
    assert config_synonyms(BrokerConfig(), "log.retention.ms") == []
    assert config_synonyms(BrokerConfig(), "log.retention.hours") == [("log.retention.hours", "168", DEFAULT_CONFIG)]
    assert config_synonyms(BrokerConfig(), "log.segment.bytes") == [("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]


def test_levels_in_kafka_order():
    cfg = BrokerConfig.load(overrides={"log.retention.minutes": "30"})
    assert cfg["log.retention.ms"] == 1_800_000 and cfg.originals == {"log.retention.minutes": "30"}
    assert config_synonyms(cfg, "log.retention.ms") == []  # no log.retention.ms anywhere
    cfg.apply_dynamic({"log.retention.ms": "5000"}, {"log.retention.ms": "7000"})
    assert cfg["log.retention.ms"] == 7000
    assert config_synonyms(cfg, "log.retention.ms") == [
        ("log.retention.ms", "7000", DYNAMIC_BROKER_CONFIG), ("log.retention.ms", "5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.minutes", "30", STATIC_BROKER_CONFIG), ("log.retention.hours", "168", DEFAULT_CONFIG)]
    assert effective_topic_config(cfg, {})["retention.ms"] == 7000
    cfg.apply_dynamic({}, {})  # removed again: the static value is back
    assert cfg["log.retention.ms"] == 1_800_000


def test_dynamic_validation():
    validate_dynamic_broker_configs({"log.retention.ms": "1", "message.max.bytes": "100"})
    with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically: Set\(node.id, num.partitions\)"):
        validate_dynamic_broker_configs({"num.partitions": "3", "no.such": "1", "node.id": "2"})
    with pytest.raises(ConfigError, match="log.retention.ms"):
        validate_dynamic_broker_configs({"log.retention.ms": "soon"})


def test_dynamic_validation_refuses_only_names_known_to_be_static():
    """Issue 29 item 4, as Kafka's DynamicBrokerConfig.validateConfigs: a name is refused
    only when Kafka knows it as a broker config that cannot change at run time (KafkaConfig
    names minus the dynamic ones; hightide's own static broker configs too); any other name
    — a topic config's name such as cleanup.policy, a custom one — is accepted and kept.
    Kafka's static names hightide does not implement are refused as well."""
    validate_dynamic_broker_configs({"cleanup.policy": "compact", "my.custom.setting": "x",
                                     "listener.name.internal.ssl.keystore.location": "/k"})
    for static in ("broker.id", "log.dirs", "process.roles", "log.retention.hours", "offsets.topic.replication.factor",
                   "transaction.state.log.num.partitions", "num.partitions"):
        with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically"):
            validate_dynamic_broker_configs({static: "1"})
    with pytest.raises(ConfigError, match="only per-listener using the listener prefix"):
        validate_dynamic_broker_configs({"ssl.keystore.location": "/k"})


def test_image_keeps_broker_configs_per_resource_name():
    image = MetadataImage()
    image.apply(R.ConfigRecord(R.BROKER_RESOURCE, "", "log.retention.ms", "5"), 0)
    image.apply(R.ConfigRecord(R.BROKER_RESOURCE, "1", "message.max.bytes", "9"), 1)
    assert image.broker_dynamic == {"": {"log.retention.ms": "5"}, "1": {"message.max.bytes": "9"}}
    image.apply(R.ConfigRecord(R.BROKER_RESOURCE, "", "log.retention.ms", None), 2)
    assert image.broker_dynamic == {"1": {"message.max.bytes": "9"}}


def test_alter_broker_configs_records_and_errors():
    from hightide.protocol.errors import ErrorCode
    from hightide.server.handlers.admin_configs import alter_broker_configs
    from hightide.server.handlers.alter_configs import replace_ops
    image = MetadataImage()
    code, msg, recs = alter_broker_configs(image, "", [("log.retention.ms", 0, "5"), ("log.cleanup.policy", 2, "compact")])
    assert (code, msg) == (ErrorCode.none, None)
    assert recs == [R.ConfigRecord(R.BROKER_RESOURCE, "", "log.cleanup.policy", "delete,compact"),
                    R.ConfigRecord(R.BROKER_RESOURCE, "", "log.retention.ms", "5")]
    for i, r in enumerate(recs):
        image.apply(r, i)
    # AlterConfigs: the whole set replaced
    code, _, recs = alter_broker_configs(image, "", replace_ops(image.broker_dynamic[""], {"log.retention.ms": "6"}))
    assert code == ErrorCode.none and recs == [
        R.ConfigRecord(R.BROKER_RESOURCE, "", "log.cleanup.policy", None),
        R.ConfigRecord(R.BROKER_RESOURCE, "", "log.retention.ms", "6")]
    assert alter_broker_configs(image, "x", [])[0] == ErrorCode.invalid_request
    assert alter_broker_configs(image, "1", [("a", 0, "1"), ("a", 1, None)])[1] == "Error due to duplicate config keys"
    assert alter_broker_configs(image, "1", [("log.retention.ms", 0, None)])[0] == ErrorCode.invalid_request
    assert alter_broker_configs(image, "1", [("node.id", 0, "2")])[1] == "Cannot update these configs dynamically: Set(node.id)"
    code, msg, recs = alter_broker_configs(image, "1", [("cleanup.policy", 0, "compact")])
    assert (code, msg) == (ErrorCode.none, None)
    assert recs == [R.ConfigRecord(R.BROKER_RESOURCE, "1", "cleanup.policy", "compact")]
