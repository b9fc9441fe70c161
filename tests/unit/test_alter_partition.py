"""AlterPartition (56) on the controller: Kafka's validations in Kafka's order, the answer
with the new state, and the reassignment it may complete."""

from __future__ import annotations

import uuid

import pytest

from hightide.cluster import records as R
from hightide.cluster.broker_records import IN_CONTROLLED_SHUTDOWN, BrokerRegistrationChangeRecord, RegisterBrokerRecord
from hightide.cluster.image import MetadataImage
from hightide.cluster.replication_control import IsrRequest, IsrResult, alter_partition
from hightide.protocol.errors import ErrorCode

TOPIC = uuid.UUID(int=9)
TID = str(TOPIC)


def epoch(b: int) -> int:
    return 100 + b


def make_image(fenced: tuple[int, ...] = (), leader: int = 1, replicas: tuple[int, ...] = (1, 2, 3),
               isr: tuple[int, ...] = (1, 2)) -> MetadataImage:
    image = MetadataImage()
    recs: list[R.MetadataRecord] = [RegisterBrokerRecord(b, str(uuid.UUID(int=b)), epoch(b), fenced=b in fenced)
                                    for b in (1, 2, 3, 4)]
    recs += [R.TopicRecord("t", TID), R.PartitionRecord(TID, 0, leader, 4, replicas, isr, 6)]
    for i, r in enumerate(recs):
        image.apply(r, i)
    return image


def never(topic: object) -> bool:
    return False


def ask(image: MetadataImage, isr: tuple[int, ...], *, broker: int = 1, leader_epoch: int = 4,
        partition_epoch: int = 6, state: int = 0, partition: int = 0, broker_epoch: int | None = None,
        isr_epochs: dict[int, int] | None = None, version: int = 3) -> tuple[IsrResult, list[R.PartitionChangeRecord]]:
    new_isr = tuple((b, (isr_epochs or {}).get(b, epoch(b) if version >= 3 else -1)) for b in isr)
    req = IsrRequest(partition, leader_epoch, new_isr, state, partition_epoch)
    answer, records = alter_partition(image, broker, epoch(broker) if broker_epoch is None else broker_epoch,
                                      [(TOPIC, [req])], never, version)
    assert answer.error_code == ErrorCode.none
    return answer.topics[0][1][0], records


def test_expanding_the_isr_answers_the_new_state() -> None:
    image = make_image()
    result, records = ask(image, (1, 2, 3))
    assert records == [R.PartitionChangeRecord(TID, 0, isr=(1, 2, 3))]
    assert result == IsrResult(0, ErrorCode.none, 1, 4, (1, 2, 3), 0, 7)  # partition epoch + 1, leader epoch kept


def test_shrinking_keeps_the_leader_epoch() -> None:
    result, records = ask(make_image(), (1,))
    assert records == [R.PartitionChangeRecord(TID, 0, isr=(1,))] and result.leader_epoch == 4


def test_the_same_isr_changes_nothing_and_answers_the_current_state() -> None:
    result, records = ask(make_image(), (1, 2))
    assert records == [] and result == IsrResult(0, ErrorCode.none, 1, 4, (1, 2), 0, 6)


@pytest.mark.parametrize("kwargs, code", [
    ({"partition": 5}, ErrorCode.unknown_topic_or_partition),
    ({"leader_epoch": 5}, ErrorCode.not_controller),            # the request knows more: this controller is behind
    ({"partition_epoch": 7}, ErrorCode.not_controller),
    ({"leader_epoch": 3}, ErrorCode.fenced_leader_epoch),
    ({"broker": 2}, ErrorCode.invalid_request),                 # not the leader
    ({"partition_epoch": 5}, ErrorCode.invalid_update_version),
    ({"isr": (1, 4)}, ErrorCode.invalid_request),               # 4 is not a replica
    ({"isr": (1, 1)}, ErrorCode.invalid_request),               # duplicate
    ({"isr": (2, 3)}, ErrorCode.invalid_request),               # without the leader
    ({"isr": (1, 2), "state": R.RECOVERING}, ErrorCode.invalid_request),  # RECOVERED -> RECOVERING
    ({"isr": (1, 3), "isr_epochs": {3: 7}}, ErrorCode.ineligible_replica),  # another incarnation of 3
])
def test_validation(kwargs: dict, code: ErrorCode) -> None:
    kwargs = {"isr": (1, 2, 3), **kwargs}
    result, records = ask(make_image(), **kwargs)
    assert (result.error_code, records) == (code, [])


def test_ineligible_members_fenced_or_shutting_down() -> None:
    image = make_image(fenced=(3,))
    assert ask(image, (1, 2, 3))[0].error_code == ErrorCode.ineligible_replica
    image = make_image()
    image.apply(BrokerRegistrationChangeRecord(2, epoch(2), in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN), 50)
    assert ask(image, (1, 2))[0].error_code == ErrorCode.ineligible_replica


def test_v2_carries_no_broker_epochs_so_they_are_not_checked() -> None:
    from types import SimpleNamespace as NS

    from kio.schema.alter_partition.v2 import request as v2

    from hightide.server.handlers.alter_partition import isr_requests
    part = v2.PartitionData(partition_index=0, leader_epoch=4, new_isr=(1, 3), partition_epoch=6)  # kio's v2
    [(tid, [req])] = isr_requests(2, v2.AlterPartitionRequest(broker_id=1, topics=(
        v2.TopicData(topic_id=TOPIC, partitions=(part,)),)))
    assert req == IsrRequest(0, 4, ((1, -1), (3, -1)), 0, 6)
    answer, records = alter_partition(make_image(), 1, epoch(1), [(tid, [req])], never, 2)
    assert answer.topics[0][1][0].isr == (1, 3) and len(records) == 1
    states = (NS(broker_id=1, broker_epoch=101), NS(broker_id=3, broker_epoch=7))
    part3 = NS(partition_index=0, leader_epoch=4, new_isr_with_epochs=states, leader_recovery_state=1,
               partition_epoch=6)
    [(_, [req3])] = isr_requests(3, NS(topics=[NS(topic_id=TOPIC, partitions=[part3])]))
    assert req3 == IsrRequest(0, 4, ((1, 101), (3, 7)), 1, 6)


def test_a_stale_broker_epoch_fails_the_whole_request() -> None:
    image = make_image()
    req = IsrRequest(0, 4, ((1, epoch(1)), (2, epoch(2)), (3, epoch(3))), 0, 6)
    answer, records = alter_partition(image, 1, 99, [(TOPIC, [req])], never)
    assert (answer.error_code, answer.topics, records) == (ErrorCode.stale_broker_epoch, [], [])
    answer, _ = alter_partition(image, 9, 1, [(TOPIC, [req])], never)
    assert answer.error_code == ErrorCode.stale_broker_epoch


def test_an_unknown_topic_id() -> None:
    req = IsrRequest(0, 4, ((1, -1),), 0, 6)
    answer, records = alter_partition(make_image(), 1, epoch(1), [(uuid.UUID(int=77), [req])], never)
    assert answer.topics == [(uuid.UUID(int=77), [IsrResult(0, ErrorCode.unknown_topic_id)])] and records == []


def test_recovering_leader_confirms_recovery_then_expands() -> None:
    image = make_image(isr=(1,))
    image.apply(R.PartitionChangeRecord(TID, 0, leader_recovery_state=R.RECOVERING), 50)
    result, _ = ask(image, (1, 2), partition_epoch=7, state=R.RECOVERING)
    assert result.error_code == ErrorCode.invalid_request  # more than the leader while recovering
    result, records = ask(image, (1,), partition_epoch=7, state=R.RECOVERED)
    assert records == [R.PartitionChangeRecord(TID, 0, leader_recovery_state=R.RECOVERED)]
    assert result.leader_recovery_state == R.RECOVERED and result.partition_epoch == 8


def test_completing_a_reassignment_that_moves_leadership_answers_new_leader_elected() -> None:
    image = make_image(replicas=(2, 3, 1), isr=(1, 2))
    image.apply(R.PartitionChangeRecord(TID, 0, adding_replicas=(3,), removing_replicas=(1,)), 50)
    result, records = ask(image, (1, 2, 3), partition_epoch=7)
    assert result.error_code == ErrorCode.new_leader_elected
    assert records == [R.PartitionChangeRecord(TID, 0, leader=2, isr=(2, 3), replicas=(2, 3),
                                               removing_replicas=(), adding_replicas=())]
