"""PartitionRecord / PartitionChangeRecord and their effect on the image (Kafka's
PartitionRegistration.merge): old logs stay loadable, epochs move as Kafka's do."""

from __future__ import annotations

import json
import uuid

from hightide.cluster import records as R
from hightide.cluster.image import MetadataImage, PartitionImage

TID = str(uuid.UUID(int=7))


def _image(*recs: R.MetadataRecord) -> MetadataImage:
    image = MetadataImage()
    for i, r in enumerate([R.TopicRecord("t", TID), *recs]):
        image.apply(r, i)
    return image


def test_an_old_partition_record_without_isr_loads_with_isr_equal_to_replicas() -> None:
    old = json.dumps({"type": "partition", "v": 0, "topic_id": TID, "partition": 0, "leader": 2,
                      "leader_epoch": 3, "replicas": [2, 1]}).encode()
    rec = R.decode(old)
    assert isinstance(rec, R.PartitionRecord)
    assert rec.isr == (2, 1) and rec.partition_epoch == 0 and rec.adding_replicas == ()
    p = _image(rec).topics["t"].partitions[0]
    assert (p.leader, p.leader_epoch, p.replicas, p.isr, p.partition_epoch) == (2, 3, (2, 1), (2, 1), 0)


def test_every_partition_record_round_trips() -> None:
    recs: list[R.MetadataRecord] = [
        R.PartitionRecord(TID, 1, 3, 4, (3, 1, 2), (3, 1), 7, (2,), (1,), R.RECOVERING),
        R.PartitionChangeRecord(TID, 1),
        R.PartitionChangeRecord(TID, 1, 2, (2,), (2, 1), (), (1,), R.RECOVERED),
    ]
    for r in recs:
        assert R.decode(R.encode(r)) == r


def test_a_change_bumps_the_partition_epoch_and_a_named_leader_the_leader_epoch() -> None:
    image = _image(R.PartitionRecord(TID, 0, 1, 5, (1, 2, 3)))
    image.apply(R.PartitionChangeRecord(TID, 0, isr=(1, 2)), 10)
    p = image.topics["t"].partitions[0]
    assert (p.leader, p.leader_epoch, p.isr, p.partition_epoch) == (1, 5, (1, 2), 1)
    image.apply(R.PartitionChangeRecord(TID, 0, leader=2, isr=(2,)), 11)
    p = image.topics["t"].partitions[0]
    assert (p.leader, p.leader_epoch, p.isr, p.partition_epoch) == (2, 6, (2,), 2)
    image.apply(R.PartitionChangeRecord(TID, 0, leader=2), 12)  # same leader named: still a new epoch (Kafka)
    assert image.topics["t"].partitions[0].leader_epoch == 7


def test_a_change_of_reassignment_fields_and_recovery_state() -> None:
    image = _image(R.PartitionRecord(TID, 0, 1, 0, (1, 2)))
    image.apply(R.PartitionChangeRecord(TID, 0, replicas=(3, 1, 2), removing_replicas=(2,), adding_replicas=(3,),
                                        leader_recovery_state=R.RECOVERING), 5)
    p = image.topics["t"].partitions[0]
    assert p.replicas == (3, 1, 2) and p.reassigning and p.leader_recovery_state == R.RECOVERING
    assert p.preferred_leader == 3 and p.isr == (1, 2)


def test_a_change_of_a_deleted_topic_is_ignored() -> None:
    image = _image(R.PartitionRecord(TID, 0, 1, 0, (1,)), R.RemoveTopicRecord(TID))
    image.apply(R.PartitionChangeRecord(TID, 0, leader=-1), 9)
    assert image.topics == {} and image.offset == 9


def test_partition_image_isr_defaults_to_replicas() -> None:
    assert PartitionImage(0, 1, 0, (1, 2)).isr == (1, 2)
