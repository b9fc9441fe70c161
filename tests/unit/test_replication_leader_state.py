"""The leader's replication state (hightide.replication.leader_state) with simulated time:
HW from the ISR, ISR shrink/expand proposals, one AlterPartition in flight, acks=all."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from hightide.protocol.errors import ErrorCode
from hightide.replication.acks import AckWaits
from hightide.replication.leader_state import (
    ChangeKind,
    LeaderReplicaState,
    NotAReplica,
    PartitionAssignment,
)

LAG = 1000
T0 = 1_700_000_000_000  # wall-clock milliseconds: a follower never caught up has 0, far in the past
EPOCHS = {0: 10, 1: 11, 2: 12}  # broker id -> broker epoch (all alive)


def leader(isr: tuple[int, ...] = (0, 1, 2), *, leo: int = 0, hw: int = 0, now: int = 0, min_isr: int = 1,
           replicas: tuple[int, ...] = (0, 1, 2), leader_epoch: int = 5) -> LeaderReplicaState:
    return LeaderReplicaState.become_leader(0, PartitionAssignment(replicas, isr, leader_epoch, 7),
                                            log_end_offset=leo, high_watermark=hw, now_ms=T0 + now, lag_time_max_ms=LAG,
                                            min_insync_replicas=min_isr, eligible_brokers=EPOCHS)


def fetch(s: LeaderReplicaState, replica: int, offset: int, leo: int, now: int, epoch: int | None = None):
    return s.on_follower_fetch(replica, offset, 0, EPOCHS[replica] if epoch is None else epoch, 5, leo, T0 + now)


def test_hw_is_the_lowest_leo_of_the_isr_and_never_moves_back():
    s = leader(leo=10)
    assert s.high_watermark == 0  # the followers' LEOs are unknown
    assert fetch(s, 1, 10, 10, 1) == (False, None)  # follower 2 still unknown
    assert fetch(s, 2, 6, 10, 2) == (True, None)
    assert s.high_watermark == 6
    assert fetch(s, 2, 10, 10, 3) == (True, None)
    assert s.high_watermark == 10
    assert not s.on_append(15, T0 + 4) and s.high_watermark == 10  # the followers have not fetched it
    assert fetch(s, 1, 15, 15, 5) == (False, None)
    assert fetch(s, 2, 12, 15, 6) == (True, None) and s.high_watermark == 12
    s.update(PartitionAssignment((0, 1, 2), (0, 1, 2), 5, 8), 15, T0 + 7)  # nothing lowers it
    assert s.high_watermark == 12


def test_an_isr_of_the_leader_alone_moves_the_hw_with_each_append():
    s = leader(isr=(0,), leo=3)
    assert s.high_watermark == 3
    assert s.on_append(9, T0 + 1) and s.high_watermark == 9


def test_a_caught_up_follower_outside_the_isr_holds_the_hw_so_it_can_join():
    s = leader(isr=(0,), leo=10, hw=10)
    moved, change = fetch(s, 1, 8, 10, 1)  # not caught up: 8 < 10, and it never was
    assert not moved and change is None
    assert s.on_append(12, T0 + 2) and s.high_watermark == 12  # so it does not hold the HW
    s2 = leader(isr=(0,), leo=10, hw=10)
    fetch(s2, 1, 10, 10, 1)  # at the leader's end: caught up, eligible, LEO >= HW -> expansion
    assert s2.pending is not None and s2.pending.kind is ChangeKind.EXPAND and s2.pending.isr == (0, 1)
    assert not s2.on_append(20, T0 + 2) and s2.high_watermark == 10  # the maximal ISR includes 1 now


def test_a_follower_being_added_holds_the_hw_even_if_it_then_falls_behind():
    s = leader(isr=(0,), replicas=(0, 1), leo=10, hw=10)
    change = fetch(s, 1, 10, 10, 1)[1]
    assert change is not None and s.maximal_isr == (0, 1)
    assert not s.on_append(20, T0 + 5 * LAG) and s.high_watermark == 10  # not caught up, but in the maximal ISR


def test_a_caught_up_follower_refused_by_the_controller_still_holds_the_hw():
    s = leader(isr=(0,), replicas=(0, 1), leo=10, hw=10)
    change = fetch(s, 1, 10, 10, 1)[1]
    assert change is not None
    s.on_alter_partition_result(change, ErrorCode.ineligible_replica, None, 10, T0 + 2)
    assert s.pending is None and s.maximal_isr == (0,)
    assert not s.on_append(20, T0 + 3) and s.high_watermark == 10  # caught up within the lag: waited for
    assert s.on_append(21, T0 + 2 * LAG) and s.high_watermark == 21  # not any more


def test_hw_does_not_advance_under_min_isr():
    s = leader(isr=(0, 1), leo=10, min_isr=3)
    fetch(s, 1, 10, 10, 1)
    assert s.high_watermark == 0 and s.under_min_isr
    assert s.not_enough_replicas("t-0") == ("The size of the current ISR Set(0, 1) is insufficient to satisfy "
                                           "the min.isr requirement of 3 for partition t-0")
    capped = leader(isr=(0,), replicas=(0, 1), leo=4, min_isr=3)  # effective min ISR = min(3, 2) = 2
    assert capped.effective_min_isr == 2 and capped.high_watermark == 0


def test_a_lagging_follower_is_proposed_out_of_the_isr_after_the_lag_time():
    s = leader(leo=10, now=0)
    fetch(s, 1, 10, 10, 0)
    fetch(s, 2, 10, 10, 0)
    s.on_append(20, T0 + 100)
    fetch(s, 1, 20, 20, 200)  # 1 keeps up, 2 stops fetching
    assert s.maybe_shrink(20, T0 + LAG) is None  # 2 was caught up at T0: not yet past the lag
    change = s.maybe_shrink(20, T0 + LAG + 1)
    assert change is not None and change.kind is ChangeKind.SHRINK
    assert change.isr == (0, 1) and change.changed == (2,) and change.committed_isr == (0, 1, 2)
    assert change.broker_epochs == (-1, 11)  # own epoch unknown here (-1), 1's from its fetch
    assert s.maybe_shrink(20, T0 + LAG + 2) is None  # one change in flight at most


def test_fetching_one_batch_behind_a_busy_leader_still_counts_as_caught_up():
    s = leader(leo=0, now=0)
    t = 0
    leo = 0
    for _ in range(20):  # each fetch reaches the LEO of the fetch before, never the current one
        fetch(s, 1, leo, leo + 5, t)
        fetch(s, 2, leo, leo + 5, t)
        leo += 5
        s.on_append(leo, T0 + t)
        t += 400
    assert s.maybe_shrink(leo, T0 + t) is None


def test_expansion_needs_the_hw_the_epoch_start_and_eligibility():
    s = leader(isr=(0, 1), leo=10, now=0)
    fetch(s, 1, 10, 10, 0)
    assert s.high_watermark == 10
    assert fetch(s, 2, 9, 10, 1)[1] is None  # below the HW
    assert fetch(s, 2, 10, 10, 2, epoch=13)[1] is None  # an epoch the image does not have yet: not eligible
    with pytest.raises(NotAReplica) as exc:  # an older one than the image's: refused outright
        fetch(s, 2, 10, 10, 3, epoch=3)
    assert exc.value.error_code == ErrorCode.not_leader_or_follower
    s.set_eligible_brokers({0: 10, 1: 11})  # 2 is fenced
    assert fetch(s, 2, 10, 10, 4)[1] is None
    s.set_eligible_brokers(EPOCHS)
    change = fetch(s, 2, 10, 10, 5)[1]
    assert change is not None and change.isr == (0, 1, 2) and change.changed == (2,)


def test_a_new_leader_epoch_starts_at_the_log_end_and_gates_expansion():
    s = leader(isr=(0, 1), leo=10)
    fetch(s, 1, 10, 10, 0)
    s.update(PartitionAssignment((0, 1, 2), (0, 1), 6, 8), 10, T0 + 1)
    assert s.leader_epoch == 6 and s.leader_epoch_start_offset == 10
    s.on_append(12, T0 + 2)
    assert s.high_watermark == 10
    fetch(s, 1, 12, 12, 3)
    assert fetch(s, 2, 11, 12, 4)[1] is None  # below the HW (12)
    assert fetch(s, 2, 12, 12, 5)[1] is not None


def test_fetch_from_a_non_replica():
    s = leader()
    with pytest.raises(NotAReplica) as exc:
        s.on_follower_fetch(9, 0, 0, -1, 5, 0, T0)
    assert exc.value.error_code == ErrorCode.unknown_leader_epoch
    with pytest.raises(NotAReplica) as exc:
        s.on_follower_fetch(9, 0, 0, -1, -1, 0, T0)
    assert exc.value.error_code == ErrorCode.not_leader_or_follower


def test_a_shrink_in_flight_does_not_count_until_committed():
    s = leader(leo=10, now=0)
    fetch(s, 1, 10, 10, 0)
    fetch(s, 2, 10, 10, 0)
    s.on_append(20, T0 + 1)
    fetch(s, 1, 20, 20, 2)
    change = s.maybe_shrink(20, T0 + LAG + 10)
    assert change is not None and s.maximal_isr == (0, 1, 2)
    assert s.high_watermark == 10  # still held by 2 (the shrink may fail)
    out = s.on_alter_partition_result(change, ErrorCode.none, PartitionAssignment((0, 1, 2), (0, 1), 5, 8), 20,
                                      T0 + LAG + 20)
    assert out.committed == (0, 1) and out.hw_advanced and s.high_watermark == 20
    assert s.pending is None and s.partition_epoch == 8


def test_alter_partition_answers():
    def pending_shrink():
        s = leader(leo=10, now=0)
        fetch(s, 1, 10, 10, 0)
        change = s.maybe_shrink(10, T0 + LAG + 1)
        assert change is not None and change.isr == (0, 1)
        return s, change
    s, change = pending_shrink()  # another leader epoch: stays pending until the image says more
    assert s.on_alter_partition_result(change, ErrorCode.none, PartitionAssignment((0, 1, 2), (0, 1), 6, 8),
                                       10, T0).committed is None
    assert s.pending is change
    s, change = pending_shrink()
    assert not s.on_alter_partition_result(change, ErrorCode.ineligible_replica, None, 10, T0).retry
    assert s.pending is None and s.isr == (0, 1, 2)  # the committed ISR again
    s, change = pending_shrink()
    assert not s.on_alter_partition_result(change, ErrorCode.invalid_update_version, None, 10, T0).retry
    assert s.pending is change  # waits for the image
    assert s.on_alter_partition_result(change, ErrorCode.request_timed_out, None, 10, T0).retry
    s.update(PartitionAssignment((0, 1, 2), (0, 1), 5, 9), 10, T0 + 1)  # the image overrides it
    assert s.pending is None and s.isr == (0, 1)
    assert s.on_alter_partition_result(change, ErrorCode.none, PartitionAssignment((0, 1, 2), (0, 1, 2), 5, 10),
                                       10, T0 + 2).committed is None  # no longer pending: ignored
    assert s.isr == (0, 1) and s.partition_epoch == 9
    s.update(PartitionAssignment((0, 1, 2), (0, 1, 2), 5, 3), 10, T0 + 3)  # an older partition epoch
    assert s.isr == (0, 1)


def test_an_unchanged_image_keeps_the_proposal_in_flight():
    s = leader(leo=10, now=0)
    fetch(s, 1, 10, 10, 0)
    change = s.maybe_shrink(10, T0 + LAG + 1)
    assert change is not None
    s.update(PartitionAssignment((0, 1, 2), (0, 1, 2), 5, 7), 10, T0 + LAG + 2)  # e.g. another topic changed
    assert s.pending is change and s.maybe_shrink(10, T0 + LAG + 3) is None


def test_acks_outcome():
    s = leader(isr=(0, 1), leo=10, min_isr=2)
    assert s.acks_outcome(5) is None
    fetch(s, 1, 10, 10, 0)
    assert s.acks_outcome(10) == ErrorCode.none and s.acks_outcome(11) is None
    s.update(PartitionAssignment((0, 1, 2), (0,), 5, 8), 10, T0 + 1)
    assert s.acks_outcome(10) == ErrorCode.not_enough_replicas_after_append


def test_ack_waits_pop_in_offset_order():
    w: AckWaits[str] = AckWaits()
    for off, tok in ((5, "a"), (3, "b"), (9, "c"), (5, "d")):
        w.add(off, tok)
    assert w.due(2) == [] and len(w) == 4
    assert w.due(5) == ["b", "a", "d"]
    assert w.drain() == ["c"] and len(w) == 0


# -- a property: random schedules never break the HW's guarantees -------------------------------
EVENTS = st.lists(st.tuples(st.sampled_from(["append", "fetch1", "fetch2", "tick", "answer", "time"]),
                            st.integers(0, 10)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(EVENTS, st.integers(1, 3))
def test_random_schedules_keep_the_hw_safe(events, min_isr):
    """HW never decreases, never exceeds the LEO, and whenever it moves it is at most the
    LEO of every member of the maximal ISR (an acknowledged offset is on every ISR member);
    at most one proposal is in flight; committed ISRs always hold the leader."""
    leo, now = 0, 0
    s = leader(leo=0, min_isr=min_isr)
    follower_leo = {1: 0, 2: 0}
    for kind, n in events:
        before = s.high_watermark
        if kind == "append":
            leo += n
            s.on_append(leo, T0 + now)
        elif kind in ("fetch1", "fetch2"):
            r = 1 if kind == "fetch1" else 2
            follower_leo[r] = min(leo, follower_leo[r] + n)
            fetch(s, r, follower_leo[r], leo, now)
        elif kind == "tick":
            s.maybe_shrink(leo, T0 + now)
        elif kind == "answer" and s.pending is not None:
            change = s.pending
            if n % 3 == 0:
                s.on_alter_partition_result(change, ErrorCode.operation_not_attempted, None, leo, T0 + now)
            else:
                s.on_alter_partition_result(change, ErrorCode.none, PartitionAssignment(
                    s.replicas, change.isr, s.leader_epoch, s.partition_epoch + 1), leo, T0 + now)
        elif kind == "time":
            now += n * 150
        assert before <= s.high_watermark <= leo
        if s.high_watermark > before:
            assert len(s.isr) >= s.effective_min_isr
            for r in s.maximal_isr:
                if r != 0:
                    assert follower_leo[r] >= s.high_watermark
        assert 0 in s.isr
