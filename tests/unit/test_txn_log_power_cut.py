"""Transactions on the in-memory engine with power cuts: appends of transactional data,
markers, plain records, flushes, rolls, compaction and ``crash()`` in any order. After
every recovery the open transactions (so the LSO) and the aborted transactions index
equal what a replay of the surviving log from its first batch gives."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.log import LogConfig, PartitionLog, clean
from hightide.log.storage import make_dirs_durable
from hightide.log.storage_memory import MemoryStorage
from hightide.log.transactions import parse_marker
from hightide.log.txn_index import AbortedTxn
from hightide.protocol.records import build_batch, iter_headers, validate_batches

CFG = LogConfig(segment_bytes=500, index_interval_bytes=100, compact=True)
PATH = "/data/t-0"
PIDS = st.integers(min_value=1, max_value=3)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("data"), PIDS),
        st.tuples(st.just("data"), PIDS),
        st.tuples(st.just("end"), PIDS, st.booleans()),
        st.tuples(st.just("plain")),
        st.tuples(st.just("flush")),
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean")),
        st.tuples(st.just("crash")),
    ),
    min_size=1,
    max_size=40,
)


def _from_the_log(lg: PartitionLog) -> tuple[list[tuple[int, int]], list[AbortedTxn]]:
    """(open transactions, aborted entries) by walking every batch of the log."""
    open_: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    off = lg.segments[0].base_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).data
        if not data:
            break
        for h in iter_headers(data):
            if h.is_control:
                marker = parse_marker(data[h.position : h.position + h.size])
                assert marker is not None
                first = open_.pop(h.producer_id, h.base_offset)
                if not marker.commit:
                    nxt = min(open_.values(), default=h.base_offset + 1)
                    aborted.append(AbortedTxn(h.producer_id, first, h.base_offset, nxt))
            elif h.is_transactional:
                open_.setdefault(h.producer_id, h.base_offset)
            off = h.next_offset
    return sorted((f, p) for p, f in open_.items()), aborted


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops)
def test_transactions_survive_power_cuts(ops: list[tuple]) -> None:
    disk = MemoryStorage()
    make_dirs_durable(disk, "/data")
    lg = PartitionLog.open(PATH, CFG, 0, clean_shutdown=False, storage=disk)
    try:
        for op in ops:
            if op[0] == "data":
                e = lg.producer_state.last_entry(op[1])
                seq = e.last_seq + 1 if e is not None else 0
                b = build_batch([(b"k%d" % op[1], b"v", [], 5)], producer_id=op[1], producer_epoch=0,
                                base_sequence=seq, is_transactional=True)
                lg.append(b, validate_batches(b), 5)
            elif op[0] == "end":
                lg.append_marker(op[1], 0, op[2], 0, 5)
            elif op[0] == "plain":
                b = build_batch([(b"p", b"v", [], 5)])
                lg.append(b, validate_batches(b), 5)
            elif op[0] == "flush":
                lg.flush(0)
            elif op[0] == "roll":
                lg.roll(0)
            elif op[0] == "clean":
                clean(lg, 10**6, force=True)
            else:
                lg.abandon()
                disk.crash()
                lg = PartitionLog.open(PATH, CFG, 0, clean_shutdown=False, storage=disk)
            ongoing, aborted = _from_the_log(lg)
            assert lg.producer_state.ongoing_transactions() == ongoing
            assert lg.txn_index.entries == aborted
            assert lg.last_stable_offset == (ongoing[0][0] if ongoing else lg.high_watermark)
    finally:
        lg.close()
