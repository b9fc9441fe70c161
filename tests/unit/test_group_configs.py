"""Group configs (GROUP resource): Kafka's validation against the broker bounds, the
controller's records and the metadata image, ISO-8601 durations of share.auto.offset.reset."""

from __future__ import annotations

import pytest

from hightide.cluster.controller import Controller
from hightide.cluster.image import MetadataImage
from hightide.cluster.records import GROUP_RESOURCE, ConfigRecord, decode, encode
from hightide.config import (
    BrokerConfig,
    ConfigError,
    parse_iso_duration_ms,
    parse_share_auto_offset_reset,
    validate_group_configs,
)
from hightide.protocol.errors import ErrorCode


@pytest.mark.parametrize("text,ms", [("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("PT1M30S", 90_000),
                                     ("P1DT2H3M4.005S", 93_784_005), ("pt10s", 10_000), ("-PT1S", -1000)])
def test_iso_durations(text: str, ms: int) -> None:
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1H2", "P1H", "PTS"])
def test_bad_iso_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso_duration_ms(text)


def test_auto_offset_reset_values() -> None:
    assert parse_share_auto_offset_reset("Earliest") == ("earliest", None)
    assert parse_share_auto_offset_reset("latest") == ("latest", None)
    assert parse_share_auto_offset_reset("by_duration:PT5M") == ("by_duration", 300_000)
    for bad in ("none", "by_duration:", "by_duration:-PT1S", "by_duration:5m"):
        with pytest.raises(ValueError, match="must be either 'earliest', 'latest'"):
            parse_share_auto_offset_reset(bad)


def test_validation_against_broker_bounds() -> None:
    broker = BrokerConfig()
    defaults = validate_group_configs(broker, {})
    assert defaults["share.session.timeout.ms"] == 45000 and defaults["share.record.lock.duration.ms"] == 30000
    assert validate_group_configs(broker, {"share.session.timeout.ms": "60000"})["share.session.timeout.ms"] == 60000
    cases = {
        "consumer.session.timeout.ms": ("44999", "60001"),
        "consumer.heartbeat.interval.ms": ("4999", "15001"),
        "share.session.timeout.ms": ("44999", "60001"),
        "share.heartbeat.interval.ms": ("4999", "15001"),
        "share.record.lock.duration.ms": ("14999", "60001"),
        "share.delivery.count.limit": ("1", "11"),
        "share.partition.max.record.locks": ("99", "10001"),
    }
    for name, (low, high) in cases.items():
        for value in (low, high):
            with pytest.raises(ConfigError, match=name):
                validate_group_configs(broker, {name: value})
    with pytest.raises(ConfigError, match="Unknown group config name"):
        validate_group_configs(broker, {"share.nope": "1"})
    with pytest.raises(ConfigError):
        validate_group_configs(broker, {"share.isolation.level": "READ_COMMITTED"})
    # the bounds are the broker's: widening them admits the value
    wide = BrokerConfig.load(overrides={"group.share.min.session.timeout.ms": 1000})
    assert validate_group_configs(wide, {"share.session.timeout.ms": "6000"})["share.session.timeout.ms"] == 6000
    with pytest.raises(ConfigError, match="greater than share.heartbeat.interval.ms"):
        validate_group_configs(wide, {"share.session.timeout.ms": "5000"})


def test_controller_records_and_image() -> None:
    controller, image = Controller(BrokerConfig(), [1]), MetadataImage()

    def alter(ops):
        code, message, records = controller.alter_group_configs(image, "g", ops)
        for i, r in enumerate(records):
            image.apply(decode(encode(r)), image.offset + 1 + i)  # through the log format
        return code, message, records

    assert alter([("share.auto.offset.reset", 0, "earliest"), ("share.delivery.count.limit", 0, "3")])[0] == 0
    assert image.group_configs == {"g": {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"}}
    code, _, records = alter([("share.delivery.count.limit", 0, "3")])
    assert code == 0 and records == []  # nothing changed, nothing written
    assert alter([("share.delivery.count.limit", 0, "30")])[0] == ErrorCode.invalid_config
    assert alter([("share.isolation.level", 2, "x")])[0] == ErrorCode.invalid_config  # APPEND on a scalar
    assert alter([("a", 0, "1"), ("a", 1, None)])[0] == ErrorCode.invalid_request  # duplicate keys
    assert alter([("share.auto.offset.reset", 1, None)])[2] == [
        ConfigRecord(GROUP_RESOURCE, "g", "share.auto.offset.reset", None)]
    assert alter([("share.delivery.count.limit", 1, None)])[0] == 0
    assert image.group_configs == {}  # a group without overrides leaves no trace


def test_broker_defaults_are_not_held_to_the_bounds() -> None:
    """A broker run with short timeouts (tests) still takes group configs; only the
    overrides are checked against the min/max, the session/heartbeat order always."""
    broker = BrokerConfig.load(overrides={"group.consumer.session.timeout.ms": 6000,
                                          "group.share.session.timeout.ms": 6000})
    assert validate_group_configs(broker, {"share.auto.offset.reset": "earliest"})["consumer.session.timeout.ms"] == 6000
    with pytest.raises(ConfigError, match="consumer.session.timeout.ms must be greater"):
        validate_group_configs(broker, {"consumer.heartbeat.interval.ms": "6000"})


def test_consumer_group_timeouts_from_group_configs() -> None:
    import uuid

    from hightide.group.consumer_api import HeartbeatRequest, StaticTopics
    from hightide.group.shard import GroupCoordinatorShard

    topics = StaticTopics({"foo": (uuid.UUID(int=1), 1)})
    shard = GroupCoordinatorShard(consumer_timeouts=lambda g: (50_000, 7_000) if g == "slow" else (45_000, 5_000))
    for group, interval, session in (("slow", 7_000, 50_000), ("other", 5_000, 45_000)):
        r = shard.consumer_group_heartbeat(HeartbeatRequest(group, "m", 0, rebalance_timeout_ms=1000,
                                                            subscribed_topic_names=("foo",), topic_partitions=()),
                                           1000, topics)
        assert r.response.heartbeat_interval_ms == interval
        (_, timers), = r.live
        assert timers.session_deadline_ms == 1000 + session
