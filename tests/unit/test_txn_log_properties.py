"""Property test: LSO, open transactions and the aborted transactions index of a
partition log against a model, through rolls, retention-like deletion and restarts
(clean and killed)."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.log import LogConfig, PartitionLog
from hightide.log.txn_index import AbortedTxn
from hightide.protocol.records import build_batch, validate_batches

CFG = LogConfig(segment_bytes=600, index_interval_bytes=100)
PIDS = st.integers(min_value=1, max_value=4)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("data"), PIDS, st.integers(min_value=1, max_value=3)),
        st.tuples(st.just("data"), PIDS, st.integers(min_value=1, max_value=3)),
        st.tuples(st.just("end"), PIDS, st.booleans()),
        st.tuples(st.just("plain")),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("delete_first_segment")),
    ),
    min_size=1,
    max_size=40,
)


class Model:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # pid -> first offset
        self.aborted: list[AbortedTxn] = []
        self.seq: dict[int, int] = {}


def _check(lg: PartitionLog, m: Model) -> None:
    first = min(m.open.values(), default=None)
    expected_lso = lg.high_watermark if first is None else max(first, lg.log_start_offset)
    assert lg.last_stable_offset == expected_lso
    assert lg.producer_state.ongoing_transactions() == sorted((f, p) for p, f in m.open.items())
    base = lg.segments[0].base_offset
    assert lg.txn_index.entries == [e for e in m.aborted if e.last_offset >= base]
    # what a read_committed reader is told covers every aborted transaction it may see
    for off in range(lg.log_start_offset, lg.last_stable_offset):
        listed = set(lg.aborted_transactions(off, lg.last_stable_offset))
        for e in lg.txn_index.entries:
            if e.last_offset >= off and e.first_offset < lg.last_stable_offset:
                assert (e.producer_id, e.first_offset) in listed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_transactions_survive_rolls_deletions_and_kills(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as d:
        lg = PartitionLog.open(d + "/p-0", CFG, 0, clean_shutdown=True)
        m = Model()
        try:
            for op in ops:
                if op[0] == "data":
                    _, pid, n = op
                    seq = m.seq.get(pid, 0)
                    b = build_batch([(b"k", b"v", [], 5)] * n, producer_id=pid, producer_epoch=0, base_sequence=seq,
                                    is_transactional=True)
                    off = lg.append(b, validate_batches(b), 5).base_offset
                    m.seq[pid] = seq + n
                    m.open.setdefault(pid, off)
                elif op[0] == "end":
                    _, pid, commit = op
                    off = lg.append_marker(pid, 0, commit, 0, 5)
                    first = m.open.pop(pid, off)
                    if not commit:
                        nxt = min(m.open.values(), default=off + 1)
                        m.aborted.append(AbortedTxn(pid, first, off, nxt))
                elif op[0] == "plain":
                    b = build_batch([(b"k", b"p", [], 5)])
                    lg.append(b, validate_batches(b), 5)
                elif op[0] == "reopen":
                    if op[1]:
                        lg.close()
                    else:
                        lg.abandon()
                    lg = PartitionLog.open(d + "/p-0", CFG, 0, clean_shutdown=op[1])
                elif op[0] == "delete_first_segment" and len(lg.segments) > 1:
                    lg.delete_records_before(lg.segments[1].base_offset)
                _check(lg, m)
        finally:
            lg.close()
