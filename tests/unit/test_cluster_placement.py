"""Partition placement over registered brokers (cluster mode) and the single node's
unchanged placement, through the controller core."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from hightide.cluster import records as R
from hightide.cluster.broker_records import FENCE, IN_CONTROLLED_SHUTDOWN, BrokerRegistrationChangeRecord, \
    RegisterBrokerRecord
from hightide.cluster.controller import Controller, NewTopic
from hightide.cluster.image import MetadataImage
from hightide.cluster.placement import PlacementError, place, start_index, usable_brokers
from hightide.config import BrokerConfig


def image_with(*broker_ids: int, fenced: tuple[int, ...] = (), shutting: tuple[int, ...] = ()) -> MetadataImage:
    image = MetadataImage()
    off = 0
    for b in broker_ids:
        image.apply(RegisterBrokerRecord(b, str(uuid.UUID(int=b)), off, fenced=False), off)
        off += 1
    for b in fenced:
        image.apply(BrokerRegistrationChangeRecord(b, image.brokers[b].epoch, fenced=FENCE), off)
        off += 1
    for b in shutting:
        image.apply(BrokerRegistrationChangeRecord(b, image.brokers[b].epoch,
                                                   in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN), off)
        off += 1
    return image


def create(controller: Controller, image: MetadataImage, topic: NewTopic) -> tuple:
    results, records = controller.create_topics(image, [topic])
    for i, r in enumerate(records):
        image.apply(r, image.offset + 1 + i)
    return results[0], [r for r in records if isinstance(r, R.PartitionRecord)]


def test_usable_brokers_are_registered_unfenced_and_not_shutting_down():
    assert usable_brokers(image_with(3, 1, 2, 4, fenced=(2,), shutting=(4,))) == [1, 3]


def test_leaders_are_striped_over_the_brokers_from_a_stable_start():
    placed = place("orders", range(6), 1, [1, 2, 3])
    start = start_index("orders", 3)
    assert [r[0] for r in placed] == [[1, 2, 3][(start + p) % 3] for p in range(6)]
    assert placed == place("orders", range(6), 1, [1, 2, 3])  # deterministic
    assert sorted(r[0] for r in placed) == [1, 1, 2, 2, 3, 3]
    assert place("orders", range(2), 2, [1, 2, 3])[0] == ([1, 2, 3][start], [1, 2, 3][(start + 1) % 3])


def test_no_usable_broker_gives_kafkas_error():
    with pytest.raises(PlacementError, match=r"^Unable to replicate the partition 1 time\(s\): The target "
                                             r"replication factor of 1 cannot be reached because only 0 broker\(s\) "
                                             r"are registered\.$"):
        place("t", range(1), 1, [])


def test_cluster_create_topics_places_over_usable_brokers_only():
    c = Controller(BrokerConfig(), None)
    image = image_with(1, 2, 3, fenced=(2,))
    res, parts = create(c, image, NewTopic("t", 4, 1))
    assert res.error_code == ErrorCode.none
    assert {p.leader for p in parts} == {1, 3} and all(p.replicas == (p.leader,) for p in parts)


def test_cluster_create_topics_without_brokers_fails_with_invalid_replication_factor():
    c = Controller(BrokerConfig(), None)
    res, parts = create(c, image_with(1, fenced=(1,)), NewTopic("t", 1, 1))
    assert res.error_code == ErrorCode.invalid_replication_factor and parts == []
    assert res.message == ("Unable to replicate the partition 1 time(s): The target replication factor of 1 cannot "
                           "be reached because only 0 broker(s) are registered.")


def test_cluster_create_partitions_continues_the_stripe():
    c = Controller(BrokerConfig(), None)
    image = image_with(1, 2, 3)
    create(c, image, NewTopic("t", 2, 1))
    code, msg, records = c.create_partitions(image, "t", 5, None)
    assert code == ErrorCode.none
    stripe = [r[0] for r in place("t", range(5), 1, [1, 2, 3])]
    assert [(r.partition, r.leader) for r in records] == [(p, stripe[p]) for p in range(2, 5)]


def test_cluster_manual_assignment_names_registered_brokers_and_leads_with_a_usable_one():
    c = Controller(BrokerConfig(), None)
    image = image_with(1, 2, fenced=(2,))
    res, _ = create(c, image, NewTopic("bad", assignments={0: [7]}))
    assert (res.error_code, res.message) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes broker 7, but no such broker is registered.")
    res, _ = create(c, image, NewTopic("fenced", assignments={0: [2]}))
    assert res.error_code == ErrorCode.invalid_replica_assignment and "fenced" in (res.message or "")
    res, parts = create(c, image, NewTopic("ok", assignments={0: [2, 1]}))
    assert res.error_code == ErrorCode.none and (parts[0].leader, parts[0].replicas) == (1, (2, 1))


def test_single_node_placement_is_unchanged():
    c = Controller(BrokerConfig(), [5])
    image = MetadataImage()  # no registrations on the single node
    res, parts = create(c, image, NewTopic("t", 3, 1))
    assert res.error_code == ErrorCode.none and [(p.leader, p.replicas) for p in parts] == [(5, (5,))] * 3
    res, _ = create(c, image, NewTopic("t2", 1, 2))
    assert res.error_code == ErrorCode.invalid_replication_factor and "only 1 broker(s)" in (res.message or "")


def test_feature_levels_and_content_offset_in_the_image():
    image = MetadataImage()
    image.apply(R.FeatureLevelRecord("metadata.version", 7), 0)
    image.apply(R.decode(R.encode(R.FeatureLevelRecord("x", 1))), 1)
    from hightide.cluster.broker_records import NoOpRecord
    image.apply(NoOpRecord(), 2)
    assert image.features == {"metadata.version": 7, "x": 1}
    assert (image.offset, image.content_offset) == (2, 1)
    image.apply(R.FeatureLevelRecord("x", 0), 3)
    assert image.features == {"metadata.version": 7} and image.content_offset == 3
