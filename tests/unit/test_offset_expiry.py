"""offsets.retention.minutes: offsets of groups without members expire; groups with
members never lose theirs."""

from hightide.group.offsets import CommitRequest
from hightide.group.records import GroupKey, GroupValue, MemberMetadata, OffsetKey
from hightide.group.shard import GroupConfig, GroupCoordinatorShard

DAY = 24 * 3600 * 1000


def _apply(shard, result):
    for k, v in result.records:
        shard.replay(k, v)
    return result


def _commit(shard, group, offset, now):
    return _apply(shard, shard.commit_offsets(group, -1, "", [CommitRequest("t", 0, offset)], now, lambda t, p: True))


def test_simple_group_offsets_expire_after_retention():
    shard = GroupCoordinatorShard(GroupConfig(offsets_retention_ms=7 * DAY))
    _commit(shard, "g", 5, now=1000)
    assert _apply(shard, shard.expire_offsets(1000 + 7 * DAY - 1)).records == []
    expired = _apply(shard, shard.expire_offsets(1000 + 7 * DAY))
    assert expired.records == [(OffsetKey("g", "t", 0), None)]
    assert shard.fetch_offsets("g", [("t", 0)])[0].offset == -1


def test_recommit_restarts_the_clock():
    shard = GroupCoordinatorShard(GroupConfig(offsets_retention_ms=DAY))
    _commit(shard, "g", 5, now=0)
    _commit(shard, "g", 6, now=DAY - 10)
    assert _apply(shard, shard.expire_offsets(DAY + 5)).records == []


def test_group_with_members_never_expires():
    shard = GroupCoordinatorShard(GroupConfig(offsets_retention_ms=DAY))
    _commit(shard, "g", 5, now=0)
    member = MemberMetadata("m-1", None, "c", "/127.0.0.1", 30000, 10000, b"", b"")
    shard.replay(GroupKey("g"), GroupValue("consumer", 1, "range", "m-1", 0, (member,)))
    assert shard.expire_offsets(10 * DAY).records == []
