"""The share coordinator shard (sans-IO) and the ``__share_group_state`` record codec."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.share.coordinator import (
    ShareCoordinatorConfig,
    combine_batches,
    delivery_complete_count,
)
from hightide.share.records import (
    ShareRecordError,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from hightide.share.types import RecordState, ShareStateKey, StateBatch
from tests.unit.coordinator_context import ShareCoordinatorContext

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")
KEY = ShareStateKey("g", TID, 0)
AV, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def exists(topic_id, partition):
    return topic_id == TID and 0 <= partition < 3


class Ctx(ShareCoordinatorContext):
    """The shared shard context: call a handler, append (offsets) and replay its records,
    as the runtime does once they are committed."""

    def __init__(self, per_snapshot: int = 500) -> None:
        super().__init__(ShareCoordinatorConfig(snapshot_update_records_per_snapshot=per_snapshot))

    def init(self, start=-1, epoch=0, key=KEY):
        return self.apply(self.shard.initialize(key, epoch, start, 1000, exists))

    def write(self, start, batches, dcc=-1, epoch=0, leader=0, key=KEY):
        return self.apply(self.shard.write(key, epoch, leader, start, dcc, tuple(batches), 2000, exists))


# -- records --------------------------------------------------------------------------------------
def test_snapshot_value_bytes_match_the_seed_schema():
    v = ShareSnapshotValue(3, 1, 0, 10, 1111, 2222, (StateBatch(10, 12, 2, 1),), delivery_complete_count=3)
    data = encode_value(v)
    expected = (b"\x00\x00" + (3).to_bytes(4, "big") + (1).to_bytes(4, "big") + (0).to_bytes(4, "big")
                + (10).to_bytes(8, "big") + (1111).to_bytes(8, "big") + (2222).to_bytes(8, "big")
                + b"\x02" + (10).to_bytes(8, "big") + (12).to_bytes(8, "big") + b"\x02" + (1).to_bytes(2, "big") + b"\x00"
                + b"\x01\x00\x04" + (3).to_bytes(4, "big"))
    assert data == expected
    assert decode_value(ShareSnapshotKey("g", TID, 0), data) == v


def test_delivery_complete_count_is_an_optional_tag():
    """A record written without the tag (older brokers) reads with DCC -1, and -1 is not written."""
    v = ShareUpdateValue(0, 0, 5, (StateBatch(5, 6, 0, 1),))
    data = encode_value(v)
    assert data.endswith(b"\x00")  # empty tag section
    assert decode_value(ShareUpdateKey("g", TID, 0), data).delivery_complete_count == -1
    with_tag = encode_value(ShareUpdateValue(0, 0, 5, (StateBatch(5, 6, 0, 1),), 7))
    assert len(with_tag) == len(data) + 6
    assert decode_value(ShareUpdateKey("g", TID, 0), with_tag).delivery_complete_count == 7


def test_unknown_tags_and_trailing_bytes_are_skipped_and_garbage_refused():
    key = ShareUpdateKey("g", TID, 0)
    data = encode_value(ShareUpdateValue(0, 0, 5, ()))
    extra = data[:-1] + b"\x01\x07\x02ab"  # one unknown tag (7) of 2 bytes
    assert decode_value(key, extra) == ShareUpdateValue(0, 0, 5, ())
    # a tagged field inside a state batch (slow path) reads the same
    v = ShareUpdateValue(0, 0, 5, (StateBatch(5, 6, 0, 1), StateBatch(7, 7, 2, 1)))
    plain = encode_value(v)
    i = plain.index(b"\x00", 2 + 16 + 1 + 19)  # the first batch's empty tag section
    tagged = plain[:i] + b"\x01\x05\x01z" + plain[i + 1:]
    assert decode_value(key, tagged) == v
    assert decode_value(key, data + b"x") == ShareUpdateValue(0, 0, 5, ())  # a newer writer's bytes: ignored
    with pytest.raises(ShareRecordError):
        decode_value(key, data[:5])


def test_keys():
    for k in (ShareSnapshotKey("grp", TID, 7), ShareUpdateKey("grp", TID, 7)):
        assert decode_key(encode_key(k)) == k
    assert encode_key(ShareSnapshotKey("g", TID, 1))[:2] == b"\x00\x00"
    assert encode_key(ShareUpdateKey("g", TID, 1))[:2] == b"\x00\x01"
    assert decode_key(b"\x00\x05\x00\x01g") is None  # not a share record type


batches_st = st.lists(st.builds(StateBatch, st.integers(0, 40), st.integers(0, 10), st.sampled_from([0, 2, 4]),
                                st.integers(0, 5)).map(lambda b: StateBatch(b.first_offset, b.first_offset + b.last_offset,
                                                                            b.delivery_state, b.delivery_count)),
                      max_size=8)


@settings(max_examples=200, deadline=None)
@given(batches_st, batches_st, st.integers(-1, 30))
def test_combine_batches_is_per_offset_max(old, new, start):
    got = combine_batches(old, new, start)
    brute: dict[int, tuple[int, int]] = {}
    for b in (*old, *new):
        for o in range(b.first_offset, b.last_offset + 1):
            if start == -1 or o >= start:
                brute[o] = max(brute.get(o, (-1, -1)), (b.delivery_count, b.delivery_state))
    flat = {o: (b.delivery_count, b.delivery_state) for b in got for o in range(b.first_offset, b.last_offset + 1)}
    assert flat == brute
    for a, b in itertools.pairwise(got):  # sorted, disjoint, coalesced
        assert a.last_offset < b.first_offset
        assert not (a.last_offset + 1 == b.first_offset and (a.delivery_count, a.delivery_state)
                    == (b.delivery_count, b.delivery_state))
    assert combine_batches(new, old, start) == got  # order does not matter


def _disjoint(draw_list):
    out, pos = [], 0
    for gap, length, state, count in draw_list:
        first = pos + gap
        out.append(StateBatch(first, first + length, state, count))
        pos = first + length + 1
    return out


disjoint_st = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from([0, 2, 4]),
                                 st.integers(0, 3)), max_size=10).map(_disjoint)


@settings(max_examples=300, deadline=None)
@given(disjoint_st, disjoint_st, st.integers(-1, 30))
def test_combine_sorted_inputs_linear_path(old, new, start):
    """Sorted, disjoint inputs take the linear merge; it must agree with the general sweep."""
    from hightide.share.coordinator import _clipped, _sweep
    got = combine_batches(old, new, start)
    a, _ = _clipped(old, start)
    b, _ = _clipped(new, start)
    assert got == combine_batches((), [StateBatch(f, la, s, c) for f, la, c, s in _sweep(a + b)], -1)


def test_seed_worked_example_dcc():
    """Seed 002: offsets 0-10, SPSO 2, offsets 5 (acked) and 6 (archived) done: DCC 2, lag 11-2-2 = 7."""
    batches = (StateBatch(2, 4, AV, 1), StateBatch(5, 5, ACK, 1), StateBatch(6, 6, ARC, 1), StateBatch(7, 9, AV, 0))
    assert delivery_complete_count(batches, 2) == 2
    assert delivery_complete_count(batches, -1) == -1


# -- shard ---------------------------------------------------------------------------------------
def test_initialize_write_read_and_snapshots():
    c = Ctx(per_snapshot=2)
    assert c.init(start=0) == (ErrorCode.none, None)
    for i in range(5):
        assert c.write(start=i, batches=[StateBatch(i, i + 1, ACK if i % 2 else AV, 1)]) == (ErrorCode.none, None)
    types = [decode_key(kb).__class__.__name__ for _, kb, _ in c.log]
    assert types == ["ShareSnapshotKey", "ShareUpdateKey", "ShareUpdateKey", "ShareSnapshotKey", "ShareUpdateKey",
                     "ShareUpdateKey"]
    state = c.apply(c.shard.read(KEY, 0, 3000, exists))
    assert state.error_code == 0 and state.start_offset == 4
    # offset 4 was acknowledged by the 4th write (3-4 ACK) and stays so: per offset the greater state wins
    assert state.state_batches == (StateBatch(4, 4, ACK, 1), StateBatch(5, 5, AV, 1))
    assert state.delivery_complete_count == 1
    # replay of the whole log and from the last snapshot rebuild the same state
    for offset in (0, c.shard.redundant_offset()):
        again = c.reload(offset).state(KEY)
        assert (again.start_offset, again.batches, again.delivery_complete_count) == (4, state.state_batches, 1)
    assert c.shard.redundant_offset() == 3


def test_dcc_as_written_else_recomputed():
    c = Ctx()
    c.init(start=0)
    c.write(0, [StateBatch(0, 2, AV, 1), StateBatch(3, 4, ACK, 1)], dcc=2)
    assert c.shard.state(KEY).delivery_complete_count == 2
    c.write(0, [StateBatch(0, 0, ARC, 5)], dcc=-1)  # a v0 write: recomputed from the merged batches
    assert c.shard.state(KEY).delivery_complete_count == 3
    assert c.shard.read_summary(KEY, exists).delivery_complete_count == 3
    fresh = c.reload()
    assert fresh.read_summary(KEY, exists).delivery_complete_count == 3


def test_uninitialised_partition():
    c = Ctx()
    summary = c.shard.read_summary(KEY, exists)
    assert (summary.error_code, summary.start_offset, summary.delivery_complete_count) == (0, -1, -1)
    assert c.write(0, [])[0] == ErrorCode.invalid_request
    assert c.apply(c.shard.read(KEY, 0, 0, exists)).error_code == ErrorCode.invalid_request
    c.init(start=-1)
    summary = c.shard.read_summary(KEY, exists)
    assert (summary.start_offset, summary.delivery_complete_count) == (-1, -1)


def test_errors_and_fencing():
    c = Ctx()
    assert c.init(key=ShareStateKey("g", TID, -1))[0] == ErrorCode.invalid_request
    assert c.init(key=ShareStateKey("g", TID, 9))[0] == ErrorCode.unknown_topic_or_partition
    assert c.init(key=ShareStateKey("g", uuid.uuid4(), 0))[0] == ErrorCode.unknown_topic_or_partition
    c.init(start=0, epoch=3)
    assert c.init(start=0, epoch=2)[0] == ErrorCode.fenced_state_epoch
    assert c.write(0, [], epoch=2)[0] == ErrorCode.fenced_state_epoch
    assert c.write(0, [], epoch=-1)[0] == ErrorCode.none  # -1: not checked
    st_ = c.apply(c.shard.read(KEY, 5, 0, exists))  # a new leader epoch is recorded
    assert st_.error_code == 0 and c.shard.state(KEY).leader_epoch == 5
    assert c.write(0, [], epoch=3, leader=4)[0] == ErrorCode.fenced_leader_epoch
    assert c.apply(c.shard.read(KEY, 4, 0, exists)).error_code == ErrorCode.fenced_leader_epoch
    assert c.reload().state(KEY).leader_epoch == 5


def test_delete_and_redundant_offset():
    c = Ctx()
    other = ShareStateKey("h", TID, 1)
    c.init(start=0)
    c.init(start=0, key=other)
    c.write(0, [StateBatch(0, 0, ACK, 1)])
    assert c.shard.redundant_offset() == 0
    assert c.apply(c.shard.delete(KEY, exists)) == (ErrorCode.none, None)
    assert c.shard.state(KEY) is None and c.log[-1][2] is None  # tombstone
    assert c.shard.redundant_offset() == 1  # only "h"'s snapshot is needed
    assert c.apply(c.shard.delete(KEY, exists)) == (ErrorCode.none, None)  # deleting nothing is fine
    assert len(c.log) == 4
    assert c.shard.keys_for_group("h") == [other] and c.shard.keys_for_group("g") == []
    assert c.reload(1).state(KEY) is None and c.reload(1).state(other) is not None


def test_cold_snapshots_let_pruning_advance():
    c = Ctx()
    a, b = KEY, ShareStateKey("g", TID, 1)
    c.init(start=0, key=a)
    c.init(start=0, key=b)
    for i in range(5):
        c.write(i, [StateBatch(i, i, ACK, 1)], key=b)
    assert c.shard.redundant_offset() == 0  # "a" holds pruning back
    cold = c.shard.cold_snapshots(1000 + 300_000)
    assert {k.partition for k, _ in cold} == {0, 1}
    c.apply(type("R", (), {"records": cold, "response": None})())
    assert c.shard.redundant_offset() == 7
    assert c.shard.cold_snapshots(1000 + 600_000) == []  # quiet: nothing to do
    again = c.reload(7)
    assert again.state(b).start_offset == 4 and again.state(a).start_offset == 0
