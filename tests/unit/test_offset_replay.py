"""Replaying an OffsetCommit's records in one call (``replay_all`` / ``replay_values``)
leaves the same state as replaying them one by one, with and without open transactions."""

from hypothesis import given
from hypothesis import strategies as st

from hightide.group.records import GroupKey, OffsetKey, OffsetValue
from hightide.group.shard import GroupCoordinatorShard
from hightide.txn.batch import TxnBatch

_records = st.lists(st.tuples(st.builds(OffsetKey, st.sampled_from(["g", "h"]), st.sampled_from(["t", "u"]),
                                        st.integers(0, 3)),
                              st.builds(OffsetValue, st.integers(0, 100), st.just(-1), st.sampled_from(["", "m"]),
                                        st.integers(0, 10))), max_size=12)


def _state(shard: GroupCoordinatorShard) -> tuple:
    o = shard.offsets
    return o.offsets, o.pending, o._committed_at, o._position


@given(st.lists(_records, max_size=5), st.booleans())
def test_replay_all_equals_one_by_one(commits, open_txn):
    one, many = GroupCoordinatorShard(), GroupCoordinatorShard()
    for shard in (one, many):
        if open_txn:  # a transaction holds an offset: replay positions are tracked
            shard.replay_txn(TxnBatch(9, 0), OffsetKey("g", "t", 0), OffsetValue(5, -1, "", 1))
    for records in commits:
        for k, v in records:
            one.replay(k, v)
        many.replay_all(records)
        assert _state(one) == _state(many)
    for shard in (one, many):
        shard.replay_txn(TxnBatch(9, 0, True, 0), None, None)  # the COMMIT marker
    assert _state(one) == _state(many)


def test_replay_all_of_mixed_records_replays_each():
    shard = GroupCoordinatorShard()
    shard.replay_all([(OffsetKey("g", "t", 0), OffsetValue(3)), (GroupKey("g"), None),
                      (OffsetKey("g", "t", 1), None)])
    assert shard.offsets.offsets == {"g": {("t", 0): OffsetValue(3)}}
