"""Share-partition lag math (seed 002) and in-flight counts, against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.lag.share import UNKNOWN, in_flight_counts, share_lag, wire_lag
from hightide.share.coordinator import combine_batches, delivery_complete_count
from hightide.share.types import StateBatch


def test_seed_worked_example():
    """Offsets 0-10 (LEO 11), SPSO 2, 5 acknowledged and 6 archived: lag 7."""
    batches = [StateBatch(2, 2, 0, 1), StateBatch(3, 3, 0, 2), StateBatch(4, 4, 0, 1), StateBatch(5, 5, 2, 1),
               StateBatch(6, 6, 4, 1), StateBatch(7, 9, 0, 0)]
    assert share_lag(11, 2, 2).lag == 7
    c = in_flight_counts(2, batches, 11)
    assert (c.available, c.acknowledged, c.archived, c.not_persisted) == (6, 1, 1, 1)


def test_unknown_inputs():
    assert share_lag(11, -1, -1).lag is None  # uninitialised
    assert share_lag(11, 2, -1).lag is None  # DeliveryCompleteCount unknown
    assert share_lag(None, 2, 0).lag is None  # end offset unknown
    assert wire_lag(11, -1, 0) == UNKNOWN and wire_lag(11, 2, 2) == 7
    assert share_lag(0, 0, 0).lag == 0
    assert share_lag(3, 5, 0).lag == -2  # raw, not clamped (state ahead of a truncated log)
    assert in_flight_counts(-1, [], None).not_persisted is None


states = st.sampled_from([0, 2, 4])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 20), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5), states), max_size=8),
       st.integers(0, 40))
def test_lag_is_the_count_of_undone_offsets(start, raw, leo_extra):
    """For any persisted state: lag (LEO − SPSO − DCC) equals a brute-force count of the
    offsets in [SPSO, LEO) that are neither acknowledged nor archived, and equals
    available + not_persisted of the in-flight counts."""
    batches = combine_batches((), [StateBatch(f, f + n, s, 1) for f, n, s in raw], start)
    leo = max([start] + [b.last_offset + 1 for b in batches]) + leo_extra
    dcc = delivery_complete_count(batches, start)
    state = {o: b.delivery_state for b in batches for o in range(b.first_offset, b.last_offset + 1)}
    brute = sum(1 for o in range(start, leo) if state.get(o, 0) not in (2, 4))
    assert share_lag(leo, start, dcc).lag == brute
    c = in_flight_counts(start, batches, leo)
    assert c.available + c.not_persisted == brute
    assert c.acknowledged + c.archived == dcc


def test_scale_hint_rule() -> None:
    from hightide.lag.share import desired_consumers, group_share_lag
    assert group_share_lag([7, 2, None]) == 9 and group_share_lag([None]) is None and group_share_lag([-1, 3]) == 3
    assert [desired_consumers(lag, 500) for lag in (0, 1, 500, 501, 2000)] == [0, 1, 1, 2, 4]
    assert desired_consumers(None, 500) is None
    with pytest.raises(ValueError):
        desired_consumers(10, 0)
