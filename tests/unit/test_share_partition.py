"""Share-partition core: the seed's worked example, unit cases and a property test that
checks every transition against a per-offset snapshot and the lag against a brute-force
count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.share.partition import (
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    AckBatch,
    AckError,
    LogBatch,
    SharePartition,
)
from hightide.share.types import RecordState, ShareGroupSettings, ShareState, StateBatch

A, B, C = "member-a", "member-b", "member-c"
AV, AQ, AK, AR = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def singles(first: int, last: int) -> list[LogBatch]:
    return [LogBatch(o, o) for o in range(first, last + 1)]


def test_seed_worked_example_lag_is_7():
    """Offsets 0-10 of seed 002: SPSO 2, SPEO 9, offsets 5 and 6 done, LEO 11 -> lag 7."""
    state = ShareState(start_offset=0, state_batches=(
        StateBatch(0, 1, AR, 1), StateBatch(2, 2, AV, 0), StateBatch(3, 3, AV, 1), StateBatch(4, 4, AV, 0),
        StateBatch(5, 5, AK, 1), StateBatch(6, 6, AR, 1), StateBatch(7, 9, AV, 0)))
    sp = SharePartition.from_state(state)
    assert sp.acquire(A, [LogBatch(2, 2)], 10, now_ms=0) == [(2, 2, 1)]
    assert sp.acquire(B, [LogBatch(3, 3), LogBatch(4, 4)], 10, now_ms=0) == [(3, 3, 2), (4, 4, 1)]
    sp.acknowledge(B, [AckBatch(3, 3, (RELEASE,))], now_ms=1)
    expect = {2: (AQ, 1), 3: (AV, 2), 4: (AQ, 1), 5: (AK, 1), 6: (AR, 1), 7: (AV, 0), 8: (AV, 0), 9: (AV, 0)}
    assert {o: sp.state_at(o)[:2] for o in range(2, 10)} == expect
    assert (sp.start_offset, sp.end_offset) == (2, 9)
    assert sp.delivery_complete_count == 2
    assert sp.lag(11) == 10 - 2 + 1 - 2 == 7


def test_worked_example_from_events():
    sp = SharePartition(0, ShareGroupSettings(delivery_count_limit=5))
    got = sp.acquire(A, singles(0, 9), 10, now_ms=0, batch_size=1)
    assert [g.first_offset for g in got] == list(range(10))
    sp.acknowledge(A, [AckBatch(0, 1, (REJECT,)), AckBatch(3, 3, (RELEASE,)), AckBatch(5, 9, (ACCEPT, REJECT, RELEASE, RELEASE, RELEASE))], 1)
    assert sp.acquire(B, singles(3, 3), 1, now_ms=2) == [(3, 3, 2)]
    sp.acknowledge(B, [AckBatch(3, 3, (RELEASE,))], 3)
    assert (sp.start_offset, sp.end_offset, sp.delivery_complete_count, sp.lag(11)) == (2, 9, 2, 7)


def test_acknowledge_is_atomic_and_checks_the_owner():
    sp = SharePartition(0)
    sp.acquire(A, [LogBatch(0, 4)], 10, 0)
    sp.acquire(B, [LogBatch(5, 9)], 10, 0)
    before = sp.runs()
    with pytest.raises(AckError) as e:
        sp.acknowledge(A, [AckBatch(0, 4, (ACCEPT,)), AckBatch(5, 5, (ACCEPT,))], 1)
    assert e.value.error_code == INVALID_RECORD_STATE
    assert sp.runs() == before
    with pytest.raises(AckError) as e:
        sp.acknowledge(A, [AckBatch(0, 12, (ACCEPT,))], 1)
    assert e.value.error_code == INVALID_REQUEST
    with pytest.raises(AckError) as e:
        sp.acknowledge(A, [AckBatch(0, 2, (ACCEPT, ACCEPT))], 1)
    assert e.value.error_code == INVALID_REQUEST
    sp.acknowledge(A, [AckBatch(0, 4, (ACCEPT,))], 1)
    with pytest.raises(AckError) as e:  # already acknowledged: below the SPSO is ignored, but 5.. is B's
        sp.acknowledge(A, [AckBatch(3, 6, (ACCEPT,))], 1)
    assert e.value.error_code == INVALID_RECORD_STATE
    sp.acknowledge(A, [AckBatch(0, 4, (ACCEPT,))], 1)  # entirely below the SPSO: ignored
    assert sp.start_offset == 5


def test_delivery_count_limit_archives():
    sp = SharePartition(0, ShareGroupSettings(delivery_count_limit=3))
    for n in (1, 2, 3):
        assert sp.acquire(A, [LogBatch(0, 1)], 10, 0) == [(0, 1, n)]
        sp.acknowledge(A, [AckBatch(0, 1, (RELEASE,))], 0)
    assert sp.state_at(0) is None and sp.start_offset == 2  # archived, window moved on
    assert sp.acquire(A, [LogBatch(0, 1)], 10, 0) == []


def test_lock_expiry_redelivers_and_renew_extends():
    sp = SharePartition(0, ShareGroupSettings(record_lock_duration_ms=1000))
    sp.acquire(A, [LogBatch(0, 9)], 100, now_ms=0)
    sp.acknowledge(A, [AckBatch(5, 9, (4,))], now_ms=500)  # RENEW
    assert sp.next_lock_deadline() == 1000
    assert sp.expire_locks(999) is False
    assert sp.expire_locks(1000) is True
    assert sp.state_at(0)[:2] == (AV, 1) and sp.state_at(5)[0] == AQ
    assert sp.acquire(B, [LogBatch(0, 9)], 100, now_ms=1000) == [(0, 4, 2)]
    assert sp.expire_locks(1500)
    assert sp.state_at(5)[:2] == (AV, 1)


def test_control_batches_and_gaps_are_never_delivered():
    sp = SharePartition(0)
    got = sp.acquire(A, [LogBatch(0, 2), LogBatch(3, 3, skip=True), LogBatch(6, 8)], 100, 0)
    assert got == [(0, 2, 1), (6, 8, 1)]
    assert sp.state_at(3)[:2] == (AR, 0) and sp.state_at(4)[:2] == (AR, 0)
    sp.acknowledge(A, [AckBatch(0, 2, (ACCEPT,))], 1)
    assert sp.start_offset == 6 and sp.lag(9) == 3


def test_max_record_locks_caps_the_window():
    sp = SharePartition(0, ShareGroupSettings(partition_max_record_locks=100))
    got = sp.acquire(A, [LogBatch(0, 59), LogBatch(60, 119)], 1000, 0)
    assert got == [(0, 99, 1)]
    assert not sp.can_acquire()
    assert sp.acquire(B, [LogBatch(100, 119)], 1000, 0) == []
    sp.acknowledge(A, [AckBatch(0, 9, (ACCEPT,))], 0)
    assert sp.acquire(B, [LogBatch(60, 119)], 1000, 0) == [(100, 109, 1)]


def test_max_records_whole_batches_unless_strict():
    sp = SharePartition(0)
    assert sp.acquire(A, [LogBatch(0, 9), LogBatch(10, 19)], 5, 0) == [(0, 9, 1)]
    assert sp.acquire(A, [LogBatch(10, 19)], 5, 0, strict=True) == [(10, 14, 1)]
    assert sp.acquire(A, [LogBatch(10, 19), LogBatch(20, 29)], 100, 0, batch_size=5) == [(15, 19, 1), (20, 29, 1)]


def test_release_member_and_state_roundtrip():
    sp = SharePartition(10, ShareGroupSettings(delivery_count_limit=2))
    sp.acquire(A, [LogBatch(10, 19)], 100, 0)
    sp.acquire(B, [LogBatch(20, 29)], 100, 0)
    sp.acknowledge(A, [AckBatch(12, 13, (ACCEPT,))], 1)
    assert sp.release_member(A)
    back = SharePartition.from_state(ShareState(start_offset=sp.start_offset, state_batches=sp.to_state_batches()))
    assert back.start_offset == 10 and back.end_offset == 29
    assert back.delivery_complete_count == sp.delivery_complete_count == 2
    assert back.state_at(25)[:2] == (AV, 1)  # B's lock does not survive
    assert back.lag(30) == sp.lag(30) == 18


def test_log_start_moving_up_moves_spso():
    sp = SharePartition(0)
    sp.acquire(A, [LogBatch(0, 9)], 100, 0)
    assert sp.move_start(5)
    assert sp.start_offset == 5 and sp.lag(10) == 5


# -- property test ---------------------------------------------------------------------

MEMBERS = (A, B, C)
ops = st.lists(st.one_of(
    st.tuples(st.just("produce"), st.integers(1, 6), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 12), st.integers(0, 4), st.booleans(),
              st.integers(1, 8)),
    st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.sampled_from((GAP, ACCEPT, RELEASE, RELEASE, RELEASE, REJECT, 4)),
              st.integers(0, 40), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 1500)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("reload"),),
), max_size=60)


def snapshot(sp: SharePartition, hi: int) -> dict[int, tuple]:
    out = {}
    for o in range(hi):
        s = sp.state_at(o)
        if s is not None:
            out[o] = s
    return out


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(2, 3), st.integers(5, 40))
def test_property_transitions_and_lag(events, limit, locks):
    cfg = ShareGroupSettings(record_lock_duration_ms=1000, delivery_count_limit=limit,
                             partition_max_record_locks=locks)
    sp = SharePartition(0, cfg)
    log: list[LogBatch] = []  # the partition log: batches (some control), maybe with compacted gaps
    leo = 0
    now = 0
    skip_offsets: set[int] = set()
    for ev in events:
        before = snapshot(sp, leo)
        spso0, end0 = sp.start_offset, sp.end_offset + 1
        kind = ev[0]
        if kind == "produce":
            _, n, gap, control = ev
            first = leo + (gap if gap == 4 else 0)  # sometimes a hole (compacted away)
            log.append(LogBatch(first, first + n - 1, control and n == 1))
            if control and n == 1:
                skip_offsets.add(first)
            leo = first + n
        elif kind == "acquire":
            _, m, maxr, bsize, strict, nbatches = ev
            nfo = sp.next_fetch_offset
            read = [b for b in log if b.last_offset >= nfo][:nbatches]
            got = sp.acquire(m, read, maxr, now, batch_size=bsize, strict=strict)
            after = snapshot(sp, leo)
            acq = {o for g in got for o in range(g.first_offset, g.last_offset + 1)}
            assert not acq & skip_offsets
            if read:
                assert all(read[0].base_offset <= o <= read[-1].last_offset for o in acq)
            if strict:
                assert len(acq) <= maxr
            for g in got:
                for o in range(g.first_offset, g.last_offset + 1):
                    old = before.get(o)
                    assert old is None and o >= end0 or old[0] == AV
                    assert after.get(o, (None,))[0] in (AQ, None) or o < sp.start_offset
                    assert g.delivery_count == (1 if old is None else old[1] + 1)
            for o, s in before.items():
                if o not in acq and o in after:
                    assert after[o] == s
            for o in range(end0, sp.end_offset + 1):  # new offsets that were not acquired
                if o not in acq and o in after:
                    assert after[o][:2] == (AR, 0)
        elif kind == "ack":
            _, m, t, start, length, valid = ev
            mine = sorted(o for o, s in before.items() if s[0] == AQ and s[2] == m)
            if valid and mine:
                first = mine[start % len(mine)]
                last = first
                while last + 1 in mine and last - first < length:
                    last += 1
            else:
                first, last = start, start + length
            try:
                sp.acknowledge(m, [AckBatch(first, last, (t,))], now)
            except AckError as e:
                assert e.error_code in (INVALID_REQUEST, INVALID_RECORD_STATE)
                assert snapshot(sp, leo) == before and sp.start_offset == spso0
                assert not (valid and mine)
            else:
                after = snapshot(sp, leo)
                for o in range(max(first, spso0), last + 1):
                    old = before[o]
                    assert old[0] == AQ and old[2] == m
                    new = after.get(o)
                    if t == ACCEPT:
                        assert new is None or new[0] == AK
                    elif t in (REJECT, GAP):
                        assert new is None or new[0] == AR
                    elif t == RELEASE:
                        want = AR if old[1] >= limit else AV
                        assert new is None and want == AR or new[:2] == (want, old[1])
                    else:
                        assert new == old
        elif kind == "tick":
            now += ev[1]
            sp.expire_locks(now)
        elif kind == "leave":
            sp.release_member(ev[1])
            assert sp.acquired_count(ev[1]) == 0
        else:
            back = SharePartition.from_state(ShareState(start_offset=sp.start_offset,
                                                        state_batches=sp.to_state_batches()), cfg)
            assert back.end_offset == sp.end_offset
            for o in range(sp.start_offset, sp.end_offset + 1):
                s, n, _ = sp.state_at(o)
                if s in (AQ, AV):
                    s = AR if n >= limit else AV
                got = back.state_at(o)
                if got is None:  # below the rebuilt SPSO: it moved past terminal records (AK or AR)
                    assert o < back.start_offset and s in (AK, AR), (o, s)
                else:
                    assert got[0] == s and (s in (AK, AR) or got[1] == n)
            sp = back
        check_invariants(sp, leo, limit, locks, now)


def check_invariants(sp: SharePartition, leo: int, limit: int, locks: int, now: int) -> None:
    spso, end = sp.start_offset, sp.end_offset + 1
    assert spso <= end <= max(leo, end)
    assert end - spso <= locks
    states = {o: sp.state_at(o) for o in range(spso, end)}
    assert all(s is not None for s in states.values())
    if states:
        assert states[spso][0] not in (AK, AR)  # the SPSO never rests on a done record
    for s, count, owner in states.values():
        assert 0 <= count <= limit
        assert (owner is not None) == (s == AQ)
        if s == AQ:
            assert count >= 1
        if s == AV:
            assert count < limit
    undone = sum(1 for s in states.values() if s[0] not in (AK, AR))
    brute = undone + max(leo - end, 0)
    assert sp.delivery_complete_count == sum(1 for s in states.values() if s[0] in (AK, AR))
    assert sp.lag(leo) == brute
    nd = sp.next_lock_deadline()
    assert nd is None or nd > now
