"""Replication factor > 1 at topic creation (controller core): striped replicas, ISR =
the usable replicas, Kafka's refusal when there are too few brokers, internal topics'
replication factors capped at the brokers there are, the single node's RF=1 rule."""

from __future__ import annotations

import logging
import uuid

import pytest
from kio.schema.errors import ErrorCode

from hightide.cluster import records as R
from hightide.cluster.broker_records import FENCE, BrokerRegistrationChangeRecord, RegisterBrokerRecord
from hightide.cluster.controller import Controller, NewTopic, TopicResult
from hightide.cluster.image import MetadataImage
from hightide.config import BrokerConfig


def image_with(*broker_ids: int, fenced: tuple[int, ...] = ()) -> MetadataImage:
    image = MetadataImage()
    for off, b in enumerate(broker_ids):
        image.apply(RegisterBrokerRecord(b, str(uuid.UUID(int=b)), off, fenced=False), off)
    for b in fenced:
        image.apply(BrokerRegistrationChangeRecord(b, image.brokers[b].epoch, fenced=FENCE), image.offset + 1)
    return image


def create(controller: Controller, image: MetadataImage, topic: NewTopic) -> tuple[TopicResult, list[R.PartitionRecord]]:
    results, records = controller.create_topics(image, [topic])
    for r in records:
        image.apply(r, image.offset + 1)
    return results[0], [r for r in records if isinstance(r, R.PartitionRecord)]


def cluster_controller(**configs: object) -> Controller:
    return Controller(BrokerConfig.load(overrides=configs), None)


def test_rf3_over_three_brokers_stripes_replicas_leader_first_isr_all() -> None:
    image = image_with(1, 2, 3)
    result, parts = create(cluster_controller(), image, NewTopic("orders", 3, 3))
    assert result.error_code == ErrorCode.none and result.replication_factor == 3
    assert sorted(p.leader for p in parts) == [1, 2, 3]
    for p in parts:
        assert sorted(p.replicas) == [1, 2, 3] and p.leader == p.replicas[0] and p.isr == p.replicas
    assert image.topics["orders"].partitions[0].isr == parts[0].replicas


def test_default_replication_factor_is_kafkas_config() -> None:
    result, parts = create(cluster_controller(**{"default.replication.factor": 2}), image_with(1, 2, 3),
                           NewTopic("t"))
    assert result.replication_factor == 2 and all(len(p.replicas) == 2 for p in parts)


def test_rf_above_the_unfenced_brokers_is_kafkas_error() -> None:
    result, parts = create(cluster_controller(), image_with(1, 2, 3, fenced=(3,)), NewTopic("t", 1, 3))
    assert (result.error_code, result.message) == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
        "because only 2 broker(s) are registered.")
    assert parts == []


def test_a_manual_assignment_naming_a_fenced_broker_first_leads_from_the_usable_ones() -> None:
    image = image_with(1, 2, 3, fenced=(1,))
    result, parts = create(cluster_controller(), image, NewTopic("t", assignments={0: [1, 2, 3]}))
    assert result.error_code == ErrorCode.none
    assert (parts[0].leader, parts[0].replicas, parts[0].isr) == (2, (1, 2, 3), (2, 3))


@pytest.mark.parametrize("name, config", [("__consumer_offsets", "offsets.topic.replication.factor"),
                                          ("__share_group_state", "share.coordinator.state.topic.replication.factor"),
                                          ("__transaction_state", "transaction.state.log.replication.factor")])
def test_internal_topics_use_their_config_capped_at_the_brokers(name: str, config: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    result, parts = create(cluster_controller(), image_with(1, 2, 3, 4), NewTopic(name, 2))
    assert result.replication_factor == 3 and all(len(p.replicas) == 3 for p in parts)
    result, parts = create(cluster_controller(**{config: 2}), image_with(1, 2, 3), NewTopic(name, 2))
    assert result.replication_factor == 2
    with caplog.at_level(logging.WARNING, "hightide.controller"):
        result, parts = create(cluster_controller(), image_with(1, 2), NewTopic(name, 2))
    assert result.error_code == ErrorCode.none and result.replication_factor == 2
    assert f"{config}=3, but only 2 broker(s)" in caplog.text
    # asked explicitly, it is not capped: Kafka's refusal
    result, _ = create(cluster_controller(), image_with(1, 2), NewTopic(name, 2, 3))
    assert result.error_code == ErrorCode.invalid_replication_factor


def test_an_internal_topic_without_any_broker_is_refused() -> None:
    result, _ = create(cluster_controller(), MetadataImage(), NewTopic("__consumer_offsets", 1))
    assert result.error_code == ErrorCode.invalid_replication_factor and "only 0 broker(s)" in str(result.message)


def test_single_node_rf1_only_and_internal_topics_at_rf1_quietly(caplog: pytest.LogCaptureFixture) -> None:
    single = Controller(BrokerConfig.load(), [1])
    image = MetadataImage()
    result, _ = create(single, image, NewTopic("t", 1, 2))
    assert (result.error_code, result.message) == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 2 time(s): The target replication factor of 2 cannot be reached "
        "because only 1 broker(s) are registered.")
    with caplog.at_level(logging.WARNING, "hightide.controller"):
        result, parts = create(single, image, NewTopic("__consumer_offsets", 3))
    assert result.replication_factor == 1 and [p.replicas for p in parts] == [(1,)] * 3 and not caplog.text
    assert all(isinstance(p, R.PartitionRecord) and p.isr == (1,) for p in parts)
