"""Cluster-mode configs: Kafka's names and defaults, validated together as KafkaConfig
does, kept out of the single-node broker's table (so `hightide serve` is unchanged), and
documented in docs/cluster.md from the definitions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hightide.cluster.lifecycle import LifecycleConfig
from hightide.cluster.settings import (
    CLUSTER_CONFIGS,
    ClusterSettings,
    Listener,
    Voter,
    cluster_config_doc_table,
    validate_cluster_configs,
)
from hightide.config import BROKER_CONFIGS, BrokerConfig, ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"
BEGIN, END = "<!-- cluster-config-table:begin -->\n", "<!-- cluster-config-table:end -->"


def test_kafka_defaults():
    v = validate_cluster_configs(1, {})
    assert v["broker.heartbeat.interval.ms"] == 2000
    assert v["broker.session.timeout.ms"] == 9000
    assert v["metadata.max.idle.interval.ms"] == 500
    assert v["listeners"] == ("PLAINTEXT://:9092",) and v["advertised.listeners"] is None
    assert v["process.roles"] == ("broker", "controller")  # hightide's single-node combined mode
    assert v["metadata.read.consistency"] == "acknowledged"
    assert LifecycleConfig.from_configs(v) == LifecycleConfig(9000, 500)


def test_the_broker_config_accepts_them_and_checks_them_together():
    assert not set(CLUSTER_CONFIGS) & set(BROKER_CONFIGS)
    assert BrokerConfig().cluster_settings().single_node  # no cluster config: today's single node
    cfg = BrokerConfig.load(overrides={"process.roles": "broker", "node.id": 2, "controller.listener.names": "CONTROLLER",
                                       "controller.quorum.voters": "1@127.0.0.1:9093",
                                       "listeners": "PLAINTEXT://127.0.0.1:0"})
    s = cfg.cluster_settings()
    assert s == ClusterSettings(frozenset({"broker"}), 2, voters=(Voter(1, "127.0.0.1", 9093),),
                                listeners=(Listener("PLAINTEXT", "127.0.0.1", 0),),
                                controller_listener_names=("CONTROLLER",))
    assert not s.single_node and s.broker_listeners == s.listeners and s.controller_addresses() == [("127.0.0.1", 9093)]
    assert cfg.originals["process.roles"] == "broker"  # reported as a static config
    with pytest.raises(ConfigError, match="at least one value"):
        BrokerConfig.load(overrides={"process.roles": "broker"}).cluster_settings()
    with pytest.raises(ConfigError, match="did you mean 'process.roles'"):
        BrokerConfig.load(overrides={"process.role": "broker"})


def test_a_valid_three_node_layout():
    broker = {"process.roles": "broker", "controller.listener.names": "CONTROLLER",
              "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
              "listeners": "PLAINTEXT://127.0.0.1:9092", "advertised.listeners": "PLAINTEXT://localhost:9092",
              "broker.heartbeat.interval.ms": "250", "broker.session.timeout.ms": "2500"}
    assert validate_cluster_configs(2, broker)["broker.session.timeout.ms"] == 2500
    controller = {"process.roles": "controller", "controller.listener.names": "CONTROLLER",
                  "listeners": "CONTROLLER://[::1]:9093", "controller.quorum.voters": "1@[::1]:9093"}
    assert validate_cluster_configs(1, controller)["controller.quorum.voters"] == ("1@[::1]:9093",)


@pytest.mark.parametrize("node_id,configs,message", [
    (1, {"process.roles": "broker,broker"}, "distinct roles"),
    (1, {"process.roles": "observer"}, "among \\[broker, controller\\]"),
    (1, {"process.roles": ""}, "non-empty"),
    (1, {"listeners": "PLAINTEXT://:99999"}, "{name}://{host}:{port}"),
    (1, {"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "different name"),
    (1, {"controller.quorum.voters": "a@h:1"}, "{id}@{host}:{port}"),
    (1, {"controller.quorum.bootstrap.servers": "nohost"}, "{host}:{port}"),
    (1, {"process.roles": "broker"}, "at least one value"),
    (1, {"process.roles": "broker", "controller.listener.names": "CONTROLLER"}, "controller.quorum"),
    (1, {"controller.listener.names": "CONTROLLER"}, "CONTROLLER not in listeners"),
    (1, {"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
         "advertised.listeners": "CONTROLLER://h:9093"}, "must not contain"),
    (3, {"controller.quorum.voters": "1@h:9093"}, "node.id 3 must be included"),
    (1, {"controller.quorum.voters": "1@h:9093,2@h:9094"}, "combined mode \\(broker,controller\\) is a single voter"),
    (1, {"broker.session.timeout.ms": "0"}, ">= 1"),
    (1, {"metadata.read.consistency": "eventual"}, "acknowledged or local"),
    (1, {"broker.sesion.timeout.ms": "1"}, "did you mean 'broker.session.timeout.ms'"),
])
def test_invalid(node_id, configs, message):
    with pytest.raises(ConfigError, match=message):
        validate_cluster_configs(node_id, configs)


def test_docs_cluster_md_carries_the_table():
    text = DOC.read_text()
    head, rest = text.split(BEGIN)
    documented, tail = rest.split(END)
    if os.environ.get("HIGHTIDE_WRITE_DOCS") == "1":
        DOC.write_text(head + BEGIN + cluster_config_doc_table() + END + tail)
        return
    assert documented == cluster_config_doc_table(), \
        "docs/cluster.md is out of date: HIGHTIDE_WRITE_DOCS=1 pytest tests/unit/test_cluster_lifecycle_config.py"
