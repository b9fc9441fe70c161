"""Idempotent producer state (sans-IO) and its persistence through the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.log import ACCEPTED, Duplicate, LogConfig, PartitionLog, ProducerStateError, ProducerStateManager, Rejected
from hightide.log.producer_state import INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER
from hightide.protocol.records import BatchHeader, build_batch, parse_header, validate_batches


def hdr(pid: int, epoch: int, seq: int, n: int = 1, *, control: bool = False, txn: bool = False) -> BatchHeader:
    return parse_header(
        build_batch(
            [(None, b"v", [], 1) for _ in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_control=control,
            is_transactional=txn,
        )
    )


class Appender:
    """Drives a ProducerStateManager like the log does."""

    def __init__(self) -> None:
        self.m = ProducerStateManager()
        self.next = 0

    def send(self, h: BatchHeader) -> object:
        r = self.m.check(h)
        if r is ACCEPTED:
            first = self.next
            self.next += h.last_offset_delta + 1
            self.m.update(h, first, self.next - 1, 100)
        return r


def test_non_idempotent_is_never_checked() -> None:
    a = Appender()
    assert a.send(hdr(-1, -1, -1)) is ACCEPTED
    assert a.send(hdr(-1, -1, -1)) is ACCEPTED
    assert a.m.producers == {}


def test_in_sequence_and_duplicates() -> None:
    a = Appender()
    assert a.send(hdr(1, 0, 0, 3)) is ACCEPTED  # 0..2 -> offsets 0..2
    assert a.send(hdr(1, 0, 3, 2)) is ACCEPTED  # 3..4 -> offsets 3..4
    assert a.send(hdr(1, 0, 0, 3)) == Duplicate(0, 2, 100)
    assert a.send(hdr(1, 0, 3, 2)) == Duplicate(3, 4, 100)
    r = a.send(hdr(1, 0, 7))
    assert isinstance(r, Rejected) and r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    r = a.send(hdr(1, 0, 4))  # overlaps but is not an exact duplicate
    assert isinstance(r, Rejected) and r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert a.send(hdr(1, 0, 5)) is ACCEPTED


def test_only_last_five_batches_are_cached() -> None:
    a = Appender()
    for seq in range(7):
        assert a.send(hdr(1, 0, seq)) is ACCEPTED
    assert isinstance(a.send(hdr(1, 0, 1)), Rejected)  # evicted: out of order
    assert isinstance(a.send(hdr(1, 0, 2)), Duplicate)


def test_unknown_producer_accepts_any_sequence() -> None:
    a = Appender()
    assert a.send(hdr(9, 3, 57)) is ACCEPTED
    assert a.send(hdr(9, 3, 58)) is ACCEPTED


def test_epoch_rules() -> None:
    a = Appender()
    a.send(hdr(1, 5, 0, 2))
    r = a.send(hdr(1, 4, 2))
    assert isinstance(r, Rejected) and r.error_code == INVALID_PRODUCER_EPOCH
    r = a.send(hdr(1, 6, 3))  # new epoch must start at 0
    assert isinstance(r, Rejected) and r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert a.send(hdr(1, 6, 0)) is ACCEPTED
    assert a.m.producers[1].epoch == 6 and len(a.m.producers[1].batches) == 1
    # the old epoch's batches are forgotten
    assert isinstance(a.send(hdr(1, 5, 0, 2)), Rejected)


def test_sequence_wraps_around() -> None:
    a = Appender()
    assert a.send(hdr(1, 0, 2**31 - 2, 2)) is ACCEPTED  # last seq = 2**31-1
    assert a.send(hdr(1, 0, 0)) is ACCEPTED
    b = Appender()
    assert b.send(hdr(1, 0, 2**31 - 1, 3)) is ACCEPTED  # wraps inside the batch: last = 1
    assert b.send(hdr(1, 0, 2)) is ACCEPTED


def test_control_batches_and_transactions() -> None:
    a = Appender()
    a.send(hdr(1, 0, 0, 2, txn=True))
    assert a.m.first_unstable_offset() == 0
    assert a.send(hdr(1, 0, -1, control=True, txn=True)) is ACCEPTED
    assert a.m.first_unstable_offset() is None
    assert a.send(hdr(1, 0, 2)) is ACCEPTED  # markers do not consume sequence numbers


def test_sequential_checks_in_one_append() -> None:
    m = ProducerStateManager()
    txn = m.begin()
    h0, h1, h1dup = hdr(1, 0, 0, 2), hdr(1, 0, 2), hdr(1, 0, 5)
    assert txn.check(h0) is ACCEPTED
    txn.update(h0, 0, 1, 1)
    assert txn.check(h1) is ACCEPTED  # sees h0
    txn.update(h1, 2, 2, 1)
    assert isinstance(txn.check(h1dup), Rejected)
    assert m.producers == {}  # nothing visible before commit
    txn.commit()
    assert m.producers[1].last_seq == 2


def test_snapshot_json_round_trip() -> None:
    a = Appender()
    a.send(hdr(1, 0, 0, 2, txn=True))
    a.send(hdr(2, 3, 10))
    m2 = ProducerStateManager.from_json(a.m.to_json())
    assert m2.producers == a.m.producers


def test_multi_batch_append_checked_sequentially(tmp_path: Path) -> None:
    lg = PartitionLog.open(str(tmp_path / "p-0"), LogConfig(), 0, clean_shutdown=True)
    kw = {"producer_id": 5, "producer_epoch": 0}
    b0 = build_batch([(None, b"a", [], 1)] * 2, base_sequence=0, **kw)  # type: ignore[arg-type]
    b1 = build_batch([(None, b"b", [], 2)], base_sequence=2, **kw)  # type: ignore[arg-type]
    buf = b0 + b1
    r = lg.append(buf, validate_batches(buf, client_origin=False), 0)
    assert (r.base_offset, r.last_offset) == (0, 2)
    b2 = build_batch([(None, b"c", [], 3)], base_sequence=3, **kw)  # type: ignore[arg-type]
    b4 = build_batch([(None, b"c", [], 3)], base_sequence=5, **kw)  # type: ignore[arg-type]
    for bad in (b2 + b2, b2 + b4):  # second batch duplicates / skips the first -> nothing appended
        with pytest.raises(ProducerStateError) as e:
            lg.append(bad, validate_batches(bad, client_origin=False), 0)
        assert e.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert lg.log_end_offset == 3
    assert lg.producer_state.producers[5].last_seq == 2


def test_restart_keeps_producer_state(tmp_path: Path) -> None:
    path = str(tmp_path / "p-0")
    lg = PartitionLog.open(path, LogConfig(segment_bytes=300), 0, clean_shutdown=True)
    for seq in range(10):
        b = build_batch([(None, b"x" * 50, [], seq)], producer_id=3, producer_epoch=1, base_sequence=seq)
        lg.append(b, validate_batches(b), 0)
    assert len(lg.segments) > 2
    lg.flush()
    # crash (no close): state is rebuilt from the batch headers
    lg2 = PartitionLog.open(path, LogConfig(segment_bytes=300), 0, clean_shutdown=False)
    assert lg2.producer_state.producers == lg.producer_state.producers
    b = build_batch([(None, b"x" * 50, [], 9)], producer_id=3, producer_epoch=1, base_sequence=9)
    assert lg2.append(b, validate_batches(b), 0).duplicate
    b = build_batch([(None, b"x" * 50, [], 9)], producer_id=3, producer_epoch=0, base_sequence=10)
    with pytest.raises(ProducerStateError) as e:
        lg2.append(b, validate_batches(b), 0)
    assert e.value.error_code == INVALID_PRODUCER_EPOCH
