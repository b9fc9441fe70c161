"""Broker and topic configuration: TOML, overrides, aliases, validation."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hightide.config import (
    BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    effective_topic_config,
    validate_topic_configs,
)

HOUR, MINUTE = 3_600_000, 60_000


def load_toml(tmp_path: Path, text: str, overrides: dict | None = None) -> BrokerConfig:
    path = tmp_path / "hightide.toml"
    path.write_text(text)
    return BrokerConfig.load(str(path), overrides)


def test_defaults_are_kafkas() -> None:
    cfg = BrokerConfig()
    assert cfg["num.partitions"] == 1
    assert cfg["log.retention.ms"] == 7 * 24 * HOUR
    assert cfg["log.segment.bytes"] == 1 << 30
    assert cfg["log.cleanup.policy"] == ("delete",)
    assert cfg["auto.create.topics.enable"] is True
    assert cfg.explicit == set()
    assert set(cfg.values) == set(BROKER_CONFIGS)


def test_no_file_no_overrides() -> None:
    assert BrokerConfig.load().values == BrokerConfig().values


def test_toml_flat_quoted_keys(tmp_path: Path) -> None:
    cfg = load_toml(tmp_path, '''
"num.partitions" = 3
"auto.create.topics.enable" = false
"log.cleanup.policy" = ["delete", "compact"]
"compression.type" = "producer"
''')
    assert cfg["num.partitions"] == 3
    assert cfg["auto.create.topics.enable"] is False
    assert cfg["log.cleanup.policy"] == ("delete", "compact")
    assert cfg["compression.type"] == "producer"
    assert cfg.explicit == {"num.partitions", "auto.create.topics.enable", "log.cleanup.policy", "compression.type"}


def test_toml_dotted_keys_and_nested_tables(tmp_path: Path) -> None:
    cfg = load_toml(tmp_path, '''
num.partitions = 4
[log]
retention.ms = 1000
segment.bytes = 1048576
[log.flush.interval]
ms = 50
[queued.max]
requests = 7
''')
    assert cfg["num.partitions"] == 4
    assert cfg["log.retention.ms"] == 1000
    assert cfg["log.segment.bytes"] == 1048576
    assert cfg["log.flush.interval.ms"] == 50
    assert cfg["queued.max.requests"] == 7


def test_overrides_win_over_toml_and_parse_strings(tmp_path: Path) -> None:
    cfg = load_toml(tmp_path, 'num.partitions = 4\n"delete.topic.enable" = true\n',
                    {"num.partitions": "9", "delete.topic.enable": "FALSE", "log.cleanup.policy": "compact, delete"})
    assert cfg["num.partitions"] == 9
    assert cfg["delete.topic.enable"] is False
    assert cfg["log.cleanup.policy"] == ("compact", "delete")


def test_unknown_name_in_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="num.partitionz"):
        load_toml(tmp_path, '"num.partitionz" = 3\n')


def test_invalid_toml_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_toml(tmp_path, "num.partitions = = 3\n")


@pytest.mark.parametrize(("name", "value"), [
    ("num.partitions", "three"),
    ("num.partitions", "0"),
    ("num.partitions", True),
    ("num.partitions", "1.5"),
    ("queued.max.requests", "-1"),
    ("log.segment.bytes", "13"),
    ("log.retention.ms", "-2"),
    ("log.retention.ms", ""),
    ("auto.create.topics.enable", "yes"),
    ("auto.create.topics.enable", 1),
    ("log.message.timestamp.type", "create"),
    ("compression.type", "brotli"),
    ("connections.max.idle.ms", "-5"),
])
def test_bad_values_name_the_config(name: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, {name: value})
    assert name in str(info.value)
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        BrokerConfig().set(name, value)


def test_unknown_override() -> None:
    with pytest.raises(ConfigError, match="no.such.thing"):
        BrokerConfig.load(None, {"no.such.thing": "1"})


def test_whitespace_and_case_tolerated() -> None:
    cfg = BrokerConfig.load(None, {"num.partitions": " 12 ", "delete.topic.enable": " True "})
    assert cfg["num.partitions"] == 12 and cfg["delete.topic.enable"] is True


# -- time aliases -------------------------------------------------------------------------


def test_hours_and_minutes_aliases() -> None:
    assert BrokerConfig.load(None, {"log.retention.hours": "2"})["log.retention.ms"] == 2 * HOUR
    assert BrokerConfig.load(None, {"log.retention.minutes": 3})["log.retention.ms"] == 3 * MINUTE
    assert BrokerConfig.load(None, {"log.roll.hours": 1})["log.roll.ms"] == HOUR


@pytest.mark.parametrize("order", list(itertools.permutations(
    [("log.retention.ms", "1234"), ("log.retention.minutes", "5"), ("log.retention.hours", "6")])))
def test_ms_beats_minutes_beats_hours_in_any_order(order: tuple) -> None:
    # Regression: with hours listed before minutes, hours used to win.
    for n in (3, 2):
        items = dict(order[:n]) if n == 3 else {k: v for k, v in order if k != "log.retention.ms"}
        expected = 1234 if n == 3 else 5 * MINUTE
        assert BrokerConfig.load(None, items)["log.retention.ms"] == expected


def test_ms_in_toml_beats_hours_on_command_line(tmp_path: Path) -> None:
    cfg = load_toml(tmp_path, "[log]\nretention.ms = 42\n", {"log.retention.hours": "1"})
    assert cfg["log.retention.ms"] == 42


def test_minutes_in_toml_beats_hours_on_command_line(tmp_path: Path) -> None:
    cfg = load_toml(tmp_path, "[log.retention]\nminutes = 2\n", {"log.retention.hours": "1"})
    assert cfg["log.retention.ms"] == 2 * MINUTE


def test_bad_alias_value_is_config_error_naming_it() -> None:
    # Regression: used to be a bare ValueError("invalid literal for int()...").
    with pytest.raises(ConfigError, match=r"log\.retention\.hours"):
        BrokerConfig.load(None, {"log.retention.hours": "a day"})
    with pytest.raises(ConfigError, match=r"log\.roll\.hours"):
        BrokerConfig.load(None, {"log.roll.hours": "1.5"})


@pytest.mark.parametrize("name", ["log.retention.hours", "log.retention.minutes"])
def test_negative_retention_alias_means_unlimited(name: str) -> None:
    # Regression: Kafka treats any negative retention as -1 (unlimited); hightide rejected it.
    assert BrokerConfig.load(None, {name: "-1"})["log.retention.ms"] == -1
    assert BrokerConfig.load(None, {name: -3})["log.retention.ms"] == -1


def test_roll_hours_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, {"log.roll.hours": "0"})


# -- topic configs ------------------------------------------------------------------------


def test_validate_topic_configs_parses() -> None:
    assert validate_topic_configs({"retention.ms": "-1", "cleanup.policy": "compact,delete",
                                   "min.cleanable.dirty.ratio": "0.25", "unclean.leader.election.enable": "true"}) == {
        "retention.ms": -1, "cleanup.policy": ("compact", "delete"), "min.cleanable.dirty.ratio": 0.25,
        "unclean.leader.election.enable": True}
    assert validate_topic_configs({}) == {}


@pytest.mark.parametrize(("name", "value"), [
    ("retention.ms", "x"),
    ("retention.ms", "-2"),
    ("segment.bytes", "10"),
    ("cleanup.policy", "delete,archive"),
    ("min.cleanable.dirty.ratio", "1.01"),
    ("min.cleanable.dirty.ratio", "nan"),
    ("message.timestamp.type", "Now"),
    ("compression.type", "lzma"),
    ("flush.messages", "0"),
    ("retention.ms", None),
    ("not.a.topic.config", "1"),
    ("num.partitions", "1"),  # a broker config, not a topic one
])
def test_bad_topic_configs_name_the_config(name: str, value: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({"retention.ms": "5", name: value})
    assert name in str(info.value)


def test_effective_topic_config_uses_broker_synonyms() -> None:
    broker = BrokerConfig.load(None, {"log.retention.hours": "1", "log.segment.bytes": "1048576",
                                      "log.cleanup.policy": "compact", "message.max.bytes": "2000"})
    eff = effective_topic_config(broker, {"segment.bytes": "4096"})
    assert set(eff) == set(TOPIC_CONFIGS)
    assert eff["retention.ms"] == HOUR
    assert eff["segment.bytes"] == 4096  # override wins
    assert eff["cleanup.policy"] == ("compact",)
    assert eff["max.message.bytes"] == 2000
    assert eff["segment.index.bytes"] == TOPIC_CONFIGS["segment.index.bytes"].default  # no synonym
    assert eff["flush.messages"] == LONG_MAX


def test_effective_topic_config_rejects_bad_override() -> None:
    with pytest.raises(ConfigError, match="retention.bytes"):
        effective_topic_config(BrokerConfig(), {"retention.bytes": "lots"})


def test_render_round_trips() -> None:
    for d in list(TOPIC_CONFIGS.values()) + list(BROKER_CONFIGS.values()):
        assert d.parse(d.render(d.default)) == d.default, d.name
    assert TOPIC_CONFIGS["unclean.leader.election.enable"].render(True) == "true"
    assert TOPIC_CONFIGS["cleanup.policy"].render(("delete", "compact")) == "delete,compact"
    assert TOPIC_CONFIGS["retention.ms"].render(None) is None


def test_every_synonym_is_a_broker_config() -> None:
    for d in TOPIC_CONFIGS.values():
        if d.synonym is not None:
            assert d.synonym in BROKER_CONFIGS, d.name
            assert BrokerConfig().topic_default(d.name) == BROKER_CONFIGS[d.synonym].default
