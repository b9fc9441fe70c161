"""Property test: PartitionLog timestamp lookups and reads against a brute-force model."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.log import LogConfig, PartitionLog
from hightide.protocol.records import build_batch, decode_records, scan_batches, validate_batches

CFG = LogConfig(segment_bytes=1500, index_interval_bytes=150)

append_op = st.tuples(
    st.just("append"),
    st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=6),
    st.integers(min_value=0, max_value=120),
    st.sampled_from([0, 0, 1, 2, 3, 4]),
)
ops = st.lists(
    st.one_of(
        append_op,
        append_op,
        append_op,
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("delete_before"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("roll")),
    ),
    min_size=1,
    max_size=40,
)


def check(lg: PartitionLog, model: list[tuple[int, int]]) -> None:
    start = lg.log_start_offset
    assert lg.log_end_offset == (model[-1][0] + 1 if model else lg.log_end_offset)
    for target in range(-1, 63, 4):
        exp = next(((o, t) for o, t in model if o >= start and t >= target), None)
        assert lg.offset_for_timestamp(target) == exp, (target, start)
    present = [(o, t) for o, t in model if o >= lg.segments[0].base_offset]
    if present:
        mx = max(t for _, t in present)
        assert lg.max_timestamp_offset() == next((o, t) for o, t in present if t == mx)
    else:
        assert lg.max_timestamp_offset() is None
    # reading everything from the start returns every offset >= start exactly once
    got: list[int] = []
    off = start
    while off < lg.log_end_offset:
        res = lg.read(off, 700)
        assert res.data, off
        assert scan_batches(res.data).error is None
        for r in decode_records(res.data[: scan_batches(res.data).headers[0].size]):
            if r.offset >= off:
                got.append(r.offset)
        off = got[-1] + 1
    assert got == [o for o, _ in model if o >= start]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops)
def test_log_matches_model(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = d + "/t-0"
        lg = PartitionLog.open(path, CFG, 0, clean_shutdown=True)
        model: list[tuple[int, int]] = []
        for op in ops:
            if op[0] == "append":
                _, tss, size, codec = op
                b = build_batch([(None, b"v" * size, [], t) for t in tss], compression=codec)
                r = lg.append(b, validate_batches(b), 0)
                model.extend((r.base_offset + i, t) for i, t in enumerate(tss))
            elif op[0] == "reopen":
                if op[1]:
                    lg.close()
                else:
                    lg.flush()  # simulate a crash after the data reached the disk
                    for s in lg.segments:
                        s.close()
                lg = PartitionLog.open(path, CFG, 0, clean_shutdown=op[1])
            elif op[0] == "delete_before":
                lg.delete_records_before(
                    lg.log_start_offset + int((lg.high_watermark - lg.log_start_offset) * op[1])
                )
            else:
                lg.roll(0)
            check(lg, model)
        lg.close()
