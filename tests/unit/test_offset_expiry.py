"""offsets.retention.minutes: offsets of groups without members expire; groups with
members never lose theirs."""

from hightide.group.offsets import CommitRequest
from hightide.group.records import GroupKey, GroupValue, MemberMetadata, OffsetKey
from hightide.group.shard import GroupConfig
from tests.unit.coordinator_context import GroupShardContext

DAY = 24 * 3600 * 1000


def _ctx(retention_ms: int, now: int) -> GroupShardContext:
    return GroupShardContext(GroupConfig(offsets_retention_ms=retention_ms), now=now)


def _commit(ctx: GroupShardContext, group: str, offset: int, now: int):
    ctx.now = now
    return ctx.run(lambda shard: shard.commit_offsets(group, -1, "", [CommitRequest("t", 0, offset)], now,
                                                      lambda t, p: True))


def _expire(ctx: GroupShardContext, now: int) -> list:
    """The records of the expiry timer at ``now`` (committed)."""
    result = ctx.shard.expire_offsets(now)
    ctx.apply(result)
    return result.records


def test_simple_group_offsets_expire_after_retention():
    ctx = _ctx(7 * DAY, 1000)
    _commit(ctx, "g", 5, now=1000)
    assert _expire(ctx, 1000 + 7 * DAY - 1) == []
    assert _expire(ctx, 1000 + 7 * DAY) == [(OffsetKey("g", "t", 0), None)]
    assert ctx.shard.fetch_offsets("g", [("t", 0)])[0].offset == -1
    assert ctx.reload().fetch_offsets("g", [("t", 0)])[0].offset == -1  # the tombstone is in the log


def test_recommit_restarts_the_clock():
    ctx = _ctx(DAY, 0)
    _commit(ctx, "g", 5, now=0)
    _commit(ctx, "g", 6, now=DAY - 10)
    assert _expire(ctx, DAY + 5) == []


def test_group_with_members_never_expires():
    ctx = _ctx(DAY, 0)
    _commit(ctx, "g", 5, now=0)
    member = MemberMetadata("m-1", None, "c", "/127.0.0.1", 30000, 10000, b"", b"")
    ctx.shard.replay(GroupKey("g"), GroupValue("consumer", 1, "range", "m-1", 0, (member,)))
    assert _expire(ctx, 10 * DAY) == []
