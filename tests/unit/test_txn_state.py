"""The transaction state machine table (Kafka's TransactionState) and the
__transaction_state record codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hightide.txn.records import decode_key, decode_value, encode_key, encode_value, partition_for
from hightide.txn.state import TRANSITIONS, IllegalTransition, TxnMetadata, TxnState, transition, with_replayed

S = TxnState
# Kafka's validPreviousStates, written out independently of the module's table.
KAFKA = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT), (S.EMPTY, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_ABORT), (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


def _meta(state: TxnState) -> TxnMetadata:
    return TxnMetadata("t", 7, 3, 60000, state, frozenset({("a", 0)}), 10, 20)


@pytest.mark.parametrize("old", list(S))
@pytest.mark.parametrize("new", list(S))
def test_every_move_is_legal_exactly_as_in_kafka(old, new):
    if (old, new) in KAFKA:
        assert transition(_meta(old), new, 99).state is new
    else:
        with pytest.raises(IllegalTransition):
            transition(_meta(old), new, 99)


def test_table_covers_every_state_and_ids_match_kafka():
    assert set(TRANSITIONS) == set(S)
    assert [s.value for s in (S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT,
                              S.COMPLETE_ABORT, S.DEAD, S.PREPARE_EPOCH_FENCE)] == list(range(8))
    assert S.from_label("PrepareEpochFence") is S.PREPARE_EPOCH_FENCE


def test_last_epoch_is_kept_for_an_init_bump_only():
    m = _meta(S.COMPLETE_COMMIT)
    bumped = with_replayed(m, transition(m, S.EMPTY, 1, producer_epoch=4))
    assert bumped.last_producer_epoch == 3
    fenced = with_replayed(_meta(S.ONGOING), transition(_meta(S.ONGOING), S.PREPARE_EPOCH_FENCE, 1, producer_epoch=4))
    assert fenced.last_producer_epoch == -1


def test_key_and_value_bytes_are_kafkas():
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    m = TxnMetadata("tx", 5, 1, 60000, S.ONGOING, frozenset({("b", 1), ("a", 0), ("a", 2)}), 100, 200)
    value = encode_value(m)
    assert value is not None
    # version 0, pid, epoch, timeout, status 1, 2 topics: a [0, 2], b [1], update 200, start 100
    assert value == (b"\x00\x00" + (5).to_bytes(8, "big") + b"\x00\x01" + (60000).to_bytes(4, "big") + b"\x01"
                     + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x00\x00\x02"
                     + b"\x00\x01b" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
                     + (200).to_bytes(8, "big") + (100).to_bytes(8, "big"))
    empty = encode_value(TxnMetadata("tx", 5, 1, 60000, S.EMPTY))
    assert empty is not None and empty[17:21] == b"\xff\xff\xff\xff"  # null partitions in Empty


def test_flexible_value_v1_decodes_with_its_tagged_fields():
    body = ((9).to_bytes(8, "big") + b"\x00\x02" + (1000).to_bytes(4, "big") + b"\x04"
            + b"\x02" + b"\x02x" + b"\x02" + b"\x00\x00\x00\x03" + b"\x00"  # [{x, [3]}]
            + (5).to_bytes(8, "big") + (4).to_bytes(8, "big")
            + b"\x02" + b"\x00\x08" + (8).to_bytes(8, "big", signed=True) + b"\x02\x02" + b"\x00\x02")
    m = decode_value("t", b"\x00\x01" + body)
    assert m is not None
    assert (m.producer_id, m.producer_epoch, m.state, m.partitions) == (9, 2, S.COMPLETE_COMMIT, {("x", 3)})
    assert (m.prev_producer_id, m.client_transaction_version) == (8, 2)


@given(tid=st.text(min_size=1, max_size=20), pid=st.integers(0, 2**62), epoch=st.integers(0, 32767),
       state=st.sampled_from(list(S)), parts=st.frozensets(st.tuples(st.text(min_size=1, max_size=5),
                                                                    st.integers(0, 100)), max_size=6))
def test_values_round_trip(tid, pid, epoch, state, parts):
    m = TxnMetadata(tid, pid, epoch, 1000, state, frozenset() if state is S.EMPTY else parts, 3, 4)
    assert decode_key(encode_key(tid)) == tid
    assert decode_value(tid, encode_value(m)) == m


def test_placement_is_kafkas_abs_hash():
    # Java's String.hashCode: "hightide" -> -1684304296, "polygenelubricants" -> Integer.MIN_VALUE
    assert partition_for("hightide", 50) == 1684304296 % 50  # Utils.abs, not & 0x7fffffff
    assert partition_for("polygenelubricants", 50) == 0
