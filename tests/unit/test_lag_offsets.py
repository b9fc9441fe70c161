"""Offset lag math and anomalies (hightide.lag.offsets), including property tests."""

from hypothesis import given
from hypothesis import strategies as st

from hightide.lag import Anomaly, decode_assignment, offset_lag

offsets = st.one_of(st.none(), st.integers(-1, 10**12))


def test_plain_lag():
    r = offset_lag(40, 100, 0)
    assert (r.lag, r.anomalies, r.lost, r.caught_up) == (60, (), 0, False)


def test_read_committed_uses_lso():
    r = offset_lag(40, 100, 0, 70, read_committed=True)
    assert (r.end_offset, r.lag) == (70, 30)
    assert offset_lag(40, 100, 0, None, read_committed=True).anomalies == (Anomaly.END_UNKNOWN,)


def test_anomalies_reported_not_hidden():
    assert offset_lag(None, 100, 0).anomalies == (Anomaly.NO_COMMIT,)
    assert offset_lag(-1, 100, 0).lag is None
    past = offset_lag(120, 100, 0)
    assert past.lag == -20 and past.anomalies == (Anomaly.COMMITTED_PAST_END,)
    lost = offset_lag(10, 100, 50)
    assert lost.lag == 90 and lost.lost == 40 and lost.anomalies == (Anomaly.COMMITTED_BEFORE_LOG_START,)
    assert offset_lag(10, None, None).anomalies == (Anomaly.END_UNKNOWN,)


@given(offsets, offsets, offsets, offsets, st.booleans())
def test_lag_is_raw_difference_and_anomalies_match(c, hw, start, lso, rc):
    r = offset_lag(c, hw, start, lso, read_committed=rc)
    known = lambda x: x is not None and x >= 0  # noqa: E731
    end = lso if rc else hw
    assert (Anomaly.NO_COMMIT in r.anomalies) == (not known(c))
    assert (Anomaly.END_UNKNOWN in r.anomalies) == (not known(end))
    if known(c) and known(end):
        assert r.lag == end - c
        assert (Anomaly.COMMITTED_PAST_END in r.anomalies) == (c > end)
    else:
        assert r.lag is None
    assert (Anomaly.COMMITTED_BEFORE_LOG_START in r.anomalies) == (known(c) and known(start) and c < start)
    if r.lost is not None:
        assert r.lost == max(0, start - c)


def test_decode_assignment():
    import struct
    data = struct.pack(">hi", 0, 1) + struct.pack(">h", 3) + b"abc" + struct.pack(">iii", 2, 0, 5) + struct.pack(">i", -1)
    assert decode_assignment(data) == [("abc", 0), ("abc", 5)]
    assert decode_assignment(b"") == []
    assert decode_assignment(b"\x00\x00\x00\x00\x00\x05\x00") == []
