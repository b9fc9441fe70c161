"""Property test: PartitionLog timestamp lookups and reads against a brute-force model."""

from __future__ import annotations

import os
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


# ------------------------------------------------- producer state across kills (snapshots)

PS_CFG = LogConfig(segment_bytes=600, index_interval_bytes=120)

ps_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=3)),
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=3)),
        st.tuples(st.just("bump_epoch"), st.integers(min_value=1, max_value=4)),
        st.tuples(st.just("roll")),
        st.tuples(st.just("flush")),
        st.tuples(st.just("kill"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("close")),
        st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
    ),
    min_size=1,
    max_size=50,
)


def _replayed_from_scratch(lg: PartitionLog) -> dict:
    from hightide.log import ProducerStateManager

    m = ProducerStateManager()
    for seg in lg.segments:
        for h in seg.iter_headers():
            m.update(h, h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp)
    return m.producers


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ps_ops)
def test_producer_state_survives_kills_like_a_never_killed_log(ops: list[tuple]) -> None:
    """Random idempotent appends, rolls, kills (optionally tearing the tail), clean
    restarts and truncations: after every restart the producer state equals the state
    of the log as it is on disk replayed from its first batch, i.e. of a log that was
    never killed (and, without a torn tail, the state just before the kill); snapshots
    stay bounded and never lie above the LEO or below the log start."""
    with tempfile.TemporaryDirectory() as d:
        path = d + "/t-0"
        lg = PartitionLog.open(path, PS_CFG, 0, clean_shutdown=True)
        epochs: dict[int, int] = {}
        for op in ops:
            if op[0] == "append":
                _, pid, n = op
                ps = lg.producer_state.producers.get(pid)
                seq = ps.last_seq + 1 if ps is not None and ps.epoch == epochs.get(pid, 0) else 0
                b = build_batch([(None, b"p" * 40, [], seq + i) for i in range(n)], producer_id=pid,
                                producer_epoch=epochs.get(pid, 0), base_sequence=seq)
                lg.append(b, validate_batches(b), 0)
            elif op[0] == "bump_epoch":
                epochs[op[1]] = epochs.get(op[1], 0) + 1
            elif op[0] == "roll":
                lg.roll(0)
            elif op[0] == "flush":
                lg.flush()
            elif op[0] == "truncate":
                lg.truncate_to(lg.log_start_offset + int((lg.log_end_offset - lg.log_start_offset) * op[1]))
                assert lg.producer_state.producers == _replayed_from_scratch(lg)
            else:
                before = {pid: e.copy() for pid, e in lg.producer_state.producers.items()}
                clean = op[0] == "close"
                if clean:
                    lg.close()
                else:
                    last = lg.segments[-1]
                    for s in lg.segments:
                        s.close()
                    if op[1]:  # a torn tail
                        os.truncate(last.log_path, max(0, last.size - op[1]))
                lg = PartitionLog.open(path, PS_CFG, 0, clean_shutdown=clean)
                assert lg.producer_state.producers == _replayed_from_scratch(lg)
                if clean or not op[1]:
                    assert lg.producer_state.producers == before
            snaps = lg.snapshot_offsets
            assert len(snaps) <= 2 and all(lg.log_start_offset <= o <= lg.log_end_offset for o in snaps)
            assert sorted(n for n in os.listdir(path) if n.endswith(".snapshot")) == [f"{o:020d}.snapshot" for o in snaps]
        lg.close()
