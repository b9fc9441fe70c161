"""The "stuck at 1" pitfall as pure cases: where the next record a consumer would be
delivered lies (:func:`next_visible_offset`) and the lag it gives (:func:`offset_lag`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hightide.lag.markers import next_visible_offset
from hightide.lag.offsets import Anomaly, offset_lag, pending_offsets
from hightide.protocol.records import build_batch

PID, OTHER = 7, 9


def data(base: int, n: int, pid: int = -1, txn: bool = False) -> bytes:
    return build_batch([(None, b"v", [], 1000 + i) for i in range(n)], base_offset=base, producer_id=pid,
                       producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                       is_transactional=txn)


def marker(base: int, pid: int = PID, commit: bool = True) -> bytes:
    key = b"\x00\x00" + (b"\x00\x01" if commit else b"\x00\x00")
    return build_batch([(key, b"\x00\x00\x00\x00\x00\x00", [], 2000)], base_offset=base, producer_id=pid,
                       producer_epoch=0, is_transactional=True, is_control=True)


# a committed transaction (0-2) and its marker (3): end 4
COMMITTED = data(0, 3, PID, True) + marker(3)
# plain data (0-1), an aborted transaction (2-4) and its marker (5): end 6
ABORTED = data(0, 2) + data(2, 3, PID, True) + marker(5, commit=False)


def test_committed_transaction_at_the_end_is_caught_up_at_the_marker():
    assert next_visible_offset(COMMITTED, 3, 4) == (4, 4)  # librdkafka-style commit: only the marker left
    assert next_visible_offset(COMMITTED, 1, 4)[0] == 1
    lag = offset_lag(3, 4, 0, 4, next_visible=4)
    assert (lag.lag, lag.invisible_tail, lag.anomalies, lag.caught_up) == (0, 1, (), True)
    assert offset_lag(3, 4, 0, 4).lag == 1  # without the look-up: the raw value tools show
    assert offset_lag(4, 4, 0, 4, next_visible=4).lag == 0  # Java-style commit past the marker
    assert offset_lag(1, 4, 0, 4, next_visible=1).lag == 3  # records left: raw lag, markers counted


def test_aborted_records_are_invisible_to_read_committed_only():
    aborted = [(PID, 2)]
    assert next_visible_offset(ABORTED, 2, 6, read_committed=True, aborted=aborted) == (6, 6)
    assert next_visible_offset(ABORTED, 2, 6)[0] == 2  # read_uncommitted delivers them
    rc = offset_lag(2, 6, 0, 6, read_committed=True, next_visible=6)
    assert (rc.lag, rc.invisible_tail) == (0, 4)
    assert offset_lag(2, 6, 0, 6, next_visible=2).lag == 4
    # another producer's transactional batch is not aborted by PID's entry
    mixed = data(0, 2, OTHER, True) + marker(2, OTHER) + data(3, 2, PID, True) + marker(5, commit=False)
    assert next_visible_offset(mixed, 0, 6, read_committed=True, aborted=[(PID, 3)])[0] == 0
    assert next_visible_offset(mixed, 2, 6, read_committed=True, aborted=[(PID, 3)]) == (6, 6)


def test_open_transaction_lag_against_the_lso_and_pending_apart():
    # 0-4 committed data, an open transaction from 5 (HW 8): LSO 5
    rc = offset_lag(3, 8, 0, 5, read_committed=True)
    assert (rc.end_offset, rc.lag, rc.pending) == (5, 2, 3)
    ru = offset_lag(3, 8, 0, 5)
    assert (ru.end_offset, ru.lag, ru.pending) == (8, 5, 3)
    assert offset_lag(5, 8, 0, 5, read_committed=True).lag == 0
    assert pending_offsets(8, 8) == 0 and pending_offsets(None, 5) is None and pending_offsets(4, 5) is None


def test_batches_running_out_before_the_end_say_so():
    assert next_visible_offset(marker(3), 3, 10) == (None, 4)
    assert next_visible_offset(COMMITTED[:-5], 3, 4) == (None, 3)  # a partial last batch is ignored
    assert next_visible_offset(b"", 3, 4) == (None, 3)


def test_anomalies_keep_their_raw_values():
    lag = offset_lag(9, 4, 0, 4, next_visible=4)
    assert lag.lag == -5 and lag.anomalies == (Anomaly.COMMITTED_PAST_END,)


@given(st.lists(st.sampled_from(["d", "t", "c", "a"]), min_size=1, max_size=12), st.data())
def test_next_visible_is_the_first_data_offset(kinds, draw):
    """Against a direct definition: the first offset >= start holding a data record
    (read_uncommitted), or the end."""
    buf, offsets_data, off = b"", [], 0
    for k in kinds:
        if k in "dt":
            buf += data(off, 1, PID if k == "t" else -1, k == "t")
            offsets_data.append(off)
        else:
            buf += marker(off, commit=k == "c")
        off += 1
    start = draw.draw(st.integers(0, off))
    want = next((o for o in offsets_data if o >= start), off)
    assert next_visible_offset(buf, start, off)[0] == want


def test_an_abort_completed_before_the_start_does_not_hide_a_later_transaction():
    """PID's aborted transaction (2-3, marker 4) lies before the committed offset 5; its
    committed transaction at 5-6 (marker 7) is visible to read_committed."""
    buf = data(0, 2) + data(2, 2, PID, True) + marker(4, commit=False) + data(5, 2, PID, True) + marker(7)
    assert next_visible_offset(buf, 5, 8, read_committed=True, aborted=[(PID, 2)])[0] == 5
