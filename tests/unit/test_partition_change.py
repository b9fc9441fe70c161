"""The controller's election rules (hightide.cluster.partition_change and the broker
lifecycle part of replication_control), as a table: Kafka's PartitionChangeBuilder and
ReplicationControlManager behaviour without ELR."""

from __future__ import annotations

import uuid

import pytest

from hightide.cluster import records as R
from hightide.cluster.broker_records import FENCE, BrokerRegistrationChangeRecord, RegisterBrokerRecord
from hightide.cluster.image import MetadataImage, PartitionImage
from hightide.cluster.lifecycle import BrokerLifecycle, ElectionConfig, LifecycleConfig
from hightide.cluster.partition_change import NO_LEADER, Election, build_change, complete_reassignment
from hightide.cluster.replication_control import (
    PREFERRED,
    UNCLEAN,
    PartitionChanges,
    add_broker_records,
    alter_reassignments,
    elect_leaders,
    list_reassignments,
    remove_broker_records,
    unclean_election_enabled,
)
from hightide.protocol.errors import ErrorCode

TID = str(uuid.UUID(int=42))


def part(leader: int, replicas: tuple[int, ...], isr: tuple[int, ...] | None = None, **kw: object) -> PartitionImage:
    return PartitionImage(0, leader, 5, replicas, isr or replicas, 3, **kw)  # type: ignore[arg-type]


def alive(*ids: int) -> set[int]:
    return set(ids)


@pytest.mark.parametrize("p, targets, election, ok, expected", [
    # fence the leader 1: the next ISR member in replica order leads (leader epoch + 1)
    (part(1, (1, 2, 3)), {"isr": (2, 3)}, Election.ONLINE, alive(2, 3), (2, (2, 3))),
    (part(1, (1, 3, 2)), {"isr": (3, 2)}, Election.ONLINE, alive(2, 3), (3, (3, 2))),
    # fence a follower: the ISR shrinks, the leader stays (no leader change named)
    (part(1, (1, 2, 3)), {"isr": (1, 3)}, Election.ONLINE, alive(1, 3), (R.NO_LEADER_CHANGE, (1, 3))),
    # the last ISR member is fenced: it stays in the ISR, no leader (no data loss)
    (part(1, (1, 2, 3), (1,)), {"isr": ()}, Election.ONLINE, alive(2, 3), (NO_LEADER, None)),
    # ... unless unclean election is enabled: an alive replica outside the ISR leads alone
    (part(1, (1, 2, 3), (1,)), {"isr": ()}, Election.UNCLEAN, alive(2, 3), (2, (2,))),
    # unclean, but nobody alive: still no leader
    (part(1, (1, 2), (1,)), {"isr": ()}, Election.UNCLEAN, alive(), (NO_LEADER, None)),
    # an ISR member that is fenced is passed over
    (part(1, (1, 2, 3)), {"isr": (2, 3)}, Election.ONLINE, alive(3), (3, (2, 3))),
    # unfenced again: a leaderless partition whose ISR holds it gets it back
    (part(NO_LEADER, (1, 2, 3), (1,)), {}, Election.ONLINE, alive(1, 2, 3), (1, None)),
    # preferred: the first replica in the ISR leads
    (part(2, (1, 2, 3)), {}, Election.PREFERRED, alive(1, 2, 3), (1, None)),
    # preferred, but it is out of the ISR: the current leader stays, no change at all
    (part(2, (1, 2, 3), (2, 3)), {}, Election.PREFERRED, alive(1, 2, 3), None),
    # preferred, but it is fenced: no change
    (part(2, (1, 2, 3)), {}, Election.PREFERRED, alive(2, 3), None),
    # nothing to do
    (part(1, (1, 2, 3)), {}, Election.ONLINE, alive(1, 2, 3), None),
])
def test_election_rules(p: PartitionImage, targets: dict, election: Election, ok: set[int],
                        expected: tuple[int, tuple[int, ...] | None] | None) -> None:
    record = build_change(TID, p, ok.__contains__, election=election, **targets)
    if expected is None:
        assert record is None
        return
    assert record is not None
    assert (record.leader, record.isr) == expected
    after = p.merge(record)
    assert after.partition_epoch == p.partition_epoch + 1
    assert after.leader_epoch == p.leader_epoch + (record.leader != R.NO_LEADER_CHANGE)


def test_an_unclean_election_marks_the_leader_recovering() -> None:
    record = build_change(TID, part(1, (1, 2), (1,)), {2}.__contains__, isr=(), election=Election.UNCLEAN)
    assert record is not None and record.leader_recovery_state == R.RECOVERING


def test_reassignment_completes_once_the_isr_holds_every_target_replica() -> None:
    # moving from [1, 2] to [2, 3]: replicas [2, 3, 1], adding 3, removing 1
    assert complete_reassignment((2, 3, 1), (1, 2), (1,), (3,)) is None  # 3 not caught up
    assert complete_reassignment((2, 3, 1), (1, 2, 3), (1,), (3,)) == ((2, 3), (2, 3))
    assert complete_reassignment((2, 1), (1,), (1,), ()) is None  # the ISR would be empty
    assert complete_reassignment((1, 2), (1, 2), (), ()) is None  # not reassigning


def test_a_completing_reassignment_that_removes_the_leader_elects_another() -> None:
    p = part(1, (2, 3, 1), (1, 2), removing_replicas=(1,), adding_replicas=(3,))
    record = build_change(TID, p, {1, 2, 3}.__contains__, isr=(1, 2, 3))
    assert record is not None
    assert (record.leader, record.isr, record.replicas, record.removing_replicas, record.adding_replicas) == \
        (2, (2, 3), (2, 3), (), ())


def test_dropping_a_replica_bumps_the_leader_epoch_even_without_a_new_leader() -> None:
    p = part(2, (2, 3, 1), (1, 2, 3), removing_replicas=(1,), adding_replicas=(3,))
    record = build_change(TID, p, {1, 2, 3}.__contains__)
    assert record is not None and record.leader == 2 and record.replicas == (2, 3)
    assert p.merge(record).leader_epoch == p.leader_epoch + 1


# -- the broker lifecycle over an image --------------------------------------------------------
def image_with(brokers: dict[int, bool], *partitions: tuple[int, tuple[int, ...], tuple[int, ...]],
               configs: dict[str, str] | None = None) -> MetadataImage:
    """Brokers (id -> fenced) and partitions (leader, replicas, isr) of topic "t"."""
    image = MetadataImage()
    recs: list[R.MetadataRecord] = [RegisterBrokerRecord(b, str(uuid.UUID(int=b)), 100 + b, fenced=f)
                                    for b, f in brokers.items()]
    recs.append(R.TopicRecord("t", TID))
    recs += [R.PartitionRecord(TID, i, leader, 0, reps, isr) for i, (leader, reps, isr) in enumerate(partitions)]
    recs += [R.ConfigRecord(R.TOPIC_RESOURCE, "t", k, v) for k, v in (configs or {}).items()]
    for i, r in enumerate(recs):
        image.apply(r, i)
    return image


def apply(image: MetadataImage, records: list[R.PartitionChangeRecord]) -> None:
    for r in records:
        image.apply(r, image.offset + 1)


def state(image: MetadataImage, p: int = 0) -> tuple[int, tuple[int, ...]]:
    q = image.topics["t"].partitions[p]
    return q.leader, q.isr


def no_unclean(topic: object) -> bool:
    return False


def test_fencing_shrinks_every_isr_and_moves_leadership_unfencing_gives_leaderless_back() -> None:
    image = image_with({1: False, 2: False, 3: False},
                       (1, (1, 2, 3), (1, 2, 3)), (2, (2, 3, 1), (2, 3, 1)), (1, (1,), (1,)))
    changes = PartitionChanges(image, {1, 2, 3})
    apply(image, remove_broker_records(changes, 1, no_unclean))
    assert [state(image, p) for p in range(3)] == [(2, (2, 3)), (2, (2, 3)), (NO_LEADER, (1,))]
    image.apply(BrokerRegistrationChangeRecord(1, 101, fenced=FENCE), image.offset + 1)
    apply(image, add_broker_records(PartitionChanges(image, {2, 3}), 1, no_unclean))
    # leadership comes back only where 1 is the ISR (the others wait for their leaders' AlterPartition)
    assert [state(image, p) for p in range(3)] == [(2, (2, 3)), (2, (2, 3)), (1, (1,))]


def test_two_brokers_fenced_in_one_batch_are_decided_on_one_view() -> None:
    image = image_with({1: False, 2: False, 3: False}, (1, (1, 2, 3), (1, 2, 3)))
    changes = PartitionChanges(image, {1, 2, 3})
    records = remove_broker_records(changes, 1, no_unclean) + remove_broker_records(changes, 2, no_unclean)
    apply(image, records)
    assert state(image) == (3, (3,)) and image.topics["t"].partitions[0].leader_epoch == 2


def test_unclean_election_on_fence_follows_the_topic_config() -> None:
    image = image_with({1: False, 2: False}, (1, (1, 2), (1,)), configs={"unclean.leader.election.enable": "true"})
    topic = image.topics["t"]
    assert unclean_election_enabled(image, topic, False)
    records = remove_broker_records(PartitionChanges(image, {1, 2}), 1,
                                    lambda t: unclean_election_enabled(image, t, False))
    apply(image, records)
    assert state(image) == (2, (2,)) and image.topics["t"].partitions[0].leader_recovery_state == R.RECOVERING


def test_elect_leaders_preferred_and_unclean() -> None:
    image = image_with({1: False, 2: False, 3: False}, (2, (1, 2, 3), (1, 2, 3)), (1, (1, 2, 3), (1, 2, 3)),
                       (2, (1, 2, 3), (2, 3)), (NO_LEADER, (1, 2), (1,)))
    results, records = elect_leaders(image, PREFERRED, [("t", [0, 1, 2, 9]), ("nope", [0])], {1, 2, 3})
    assert results == [("t", [(0, ErrorCode.none, None),
                              (1, ErrorCode.election_not_needed, "Leader election not needed for topic partition."),
                              (2, ErrorCode.preferred_leader_not_available, "The preferred leader was not available."),
                              (9, ErrorCode.unknown_topic_or_partition, "No such partition as t-9")]),
                       ("nope", [(0, ErrorCode.unknown_topic_or_partition, "No such topic as nope")])]
    assert records == [R.PartitionChangeRecord(TID, 0, leader=1)]
    results, records = elect_leaders(image, UNCLEAN, [("t", [0, 3])], {2, 3})
    assert [r[1] for r in results[0][1]] == [ErrorCode.election_not_needed, ErrorCode.none]
    assert records == [R.PartitionChangeRecord(TID, 3, leader=2, isr=(2,), leader_recovery_state=R.RECOVERING)]
    results, _ = elect_leaders(image, UNCLEAN, [("t", [3])], {3})
    assert results[0][1][0][1] == ErrorCode.eligible_leaders_not_available
    # every partition: those not needing an election are left out
    results, records = elect_leaders(image, PREFERRED, None, {1, 2, 3})
    assert results == [("t", [(0, ErrorCode.none, None),
                              (2, ErrorCode.preferred_leader_not_available, "The preferred leader was not available."),
                              (3, ErrorCode.none, None)])]
    with pytest.raises(ValueError):
        elect_leaders(image, 7, None, {1})


def test_reassignment_steps() -> None:
    image = image_with({1: False, 2: False, 3: False, 4: False}, (1, (1, 2), (1, 2)))
    # start: 3 joins (adding), 1 is being removed; the leader stays until the move completes
    results, records = alter_reassignments(image, [("t", [(0, [2, 3])])], {1, 2, 3, 4}, {1, 2, 3, 4}, no_unclean)
    assert results == [("t", [(0, ErrorCode.none, None)])]
    apply(image, records)
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.leader, p.isr) == ((2, 3, 1), (3,), (1,), 1, (1, 2))
    assert list_reassignments(image, None) == [("t", [_r(0, (2, 3, 1), (3,), (1,))])]
    # the leader reports 3 in sync (AlterPartition's change): the reassignment completes, 2 leads
    record = build_change(TID, p, {1, 2, 3, 4}.__contains__, isr=(1, 2, 3))
    assert record is not None
    apply(image, [record])
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.leader, p.isr) == ((2, 3), (), (), 2, (2, 3))
    assert list_reassignments(image, None) == []


def test_a_reordering_reassignment_completes_at_once_and_cancel_reverts() -> None:
    image = image_with({1: False, 2: False, 3: False}, (1, (1, 2), (1, 2)), (1, (1, 2), (1, 2)))
    _, records = alter_reassignments(image, [("t", [(0, [2, 1])])], {1, 2, 3}, {1, 2, 3}, no_unclean)
    assert records == [R.PartitionChangeRecord(TID, 0, replicas=(2, 1))]
    _, records = alter_reassignments(image, [("t", [(1, [1, 3])])], {1, 2, 3}, {1, 2, 3}, no_unclean)
    apply(image, records)
    results, records = alter_reassignments(image, [("t", [(1, None), (0, None)])], {1, 2, 3}, {1, 2, 3}, no_unclean)
    assert [r[1] for r in results[0][1]] == [ErrorCode.none, ErrorCode.no_reassignment_in_progress]
    apply(image, records)
    p = image.topics["t"].partitions[1]
    assert (p.replicas, p.isr, p.reassigning) == ((1, 2), (1, 2), False)


def test_reassignment_validation_as_kafka() -> None:
    image = image_with({1: False, 2: False}, (1, (1,), (1,)))
    results, records = alter_reassignments(
        image, [("t", [(0, []), (0, [1, 5]), (0, [2, 2]), (7, [1])]), ("x", [(0, [1])])], {1, 2}, {1, 2}, no_unclean)
    assert records == []
    assert results == [
        ("t", [(0, ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."),
               (0, ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes broker 5, but no such broker is registered."),
               (0, ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes the broker 2 more than once."),
               (7, ErrorCode.unknown_topic_or_partition, "Unable to find partition t:7.")]),
        ("x", [(0, ErrorCode.unknown_topic_or_partition, "Unable to find a topic named x.")])]


def test_cancelling_a_move_whose_isr_is_only_new_replicas_needs_unclean_election() -> None:
    image = image_with({1: False, 2: False}, (2, (2, 1), (2,)))
    image.apply(R.PartitionChangeRecord(TID, 0, adding_replicas=(2,), removing_replicas=(1,)), image.offset + 1)
    results, records = alter_reassignments(image, [("t", [(0, None)])], {1, 2}, {1, 2}, no_unclean)
    assert results[0][1][0][1] == ErrorCode.invalid_replica_assignment and records == []
    results, records = alter_reassignments(image, [("t", [(0, None)])], {1, 2}, {1, 2}, lambda t: True)
    apply(image, records)
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.isr, p.leader, p.reassigning) == ((1,), (1,), 1, False)


def _r(p: int, replicas: tuple[int, ...], adding: tuple[int, ...], removing: tuple[int, ...]) -> object:
    from hightide.cluster.replication_control import Reassignment
    return Reassignment(p, replicas, adding, removing)


# -- the controller's periodic elections (auto.leader.rebalance.enable, unclean interval) -----
def _lifecycle(**elections: object) -> BrokerLifecycle:
    lc = BrokerLifecycle("c", LifecycleConfig(max_idle_interval_ms=0))
    lc.elections = lambda: ElectionConfig(**elections)  # type: ignore[arg-type]
    return lc


def test_preferred_leaders_come_back_after_the_imbalance_check_interval() -> None:
    image = image_with({1: False, 2: False, 3: False}, (2, (1, 2, 3), (1, 2, 3)), (3, (1, 3), (3,)))
    lc = _lifecycle(leader_imbalance_check_interval_ms=1000)
    assert lc.next_deadline_ms(image, 50) == 50  # imbalanced, not scheduled yet: the timer runs at once
    assert lc.election_records(image, 100) == []  # scheduled for 1100
    assert lc.next_deadline_ms(image, 50) == 1100
    assert lc.election_records(image, 1099) == []
    # partition 1's preferred replica is out of the ISR: left as it is
    assert lc.election_records(image, 1100) == [R.PartitionChangeRecord(TID, 0, leader=1)]
    assert lc.election_records(image, 1200) == []  # still imbalanced (partition 1): scheduled again
    assert lc.next_deadline_ms(image, 50) == 2200
    off = _lifecycle(auto_leader_rebalance_enable=False, leader_imbalance_check_interval_ms=1)
    assert off.election_records(image, 0) == off.election_records(image, 10) == []
    assert off.next_deadline_ms(image, 0) is None


def test_a_topic_switched_to_unclean_election_gets_a_leader_after_the_interval() -> None:
    image = image_with({1: True, 2: False}, (NO_LEADER, (1, 2), (1,)))
    lc = _lifecycle(auto_leader_rebalance_enable=False, unclean_leader_election_interval_ms=500)
    assert lc.election_records(image, 0) == [] and lc.next_deadline_ms(image, 0) is None  # not allowed
    image.apply(R.ConfigRecord(R.TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "true"), image.offset + 1)
    assert lc.election_records(image, 1000) == []
    assert lc.election_records(image, 1500) == [
        R.PartitionChangeRecord(TID, 0, leader=2, isr=(2,), leader_recovery_state=R.RECOVERING)]
    # the controller-wide default counts for topics without the config
    image = image_with({1: True, 2: False}, (NO_LEADER, (1, 2), (1,)))
    lc = _lifecycle(auto_leader_rebalance_enable=False, unclean_leader_election_enable=True,
                    unclean_leader_election_interval_ms=1)
    assert lc.election_records(image, 0) == [] and len(lc.election_records(image, 1)) == 1
