"""Server-side assignors: validity, balance, stickiness, determinism (property tests)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.group.assignor import (
    Assignment,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
    resolve_subscription,
)

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


def spec(subs: dict[str, set[uuid.UUID]], counts: dict[uuid.UUID, int],
         current: dict[str, Assignment] | None = None) -> GroupSpec:
    current = current or {}
    return GroupSpec({m: MemberSpec(m, None, frozenset(s), current.get(m, {})) for m, s in subs.items()}, counts)


def flat(a: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def check_valid(s: GroupSpec, result: dict[str, Assignment]) -> None:
    """Every subscribed partition goes to exactly one member that subscribes to it."""
    assert set(result) == set(s.members)
    seen: list[tuple[uuid.UUID, int]] = []
    for m, a in result.items():
        for t, p in flat(a):
            assert t in s.members[m].subscribed_topic_ids
            seen.append((t, p))
    subscribed = set().union(*(m.subscribed_topic_ids for m in s.members.values())) if s.members else set()
    expected = {(t, p) for t in subscribed for p in range(s.partition_counts.get(t, 0))}
    assert sorted(seen) == sorted(expected)


members_st = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True)
counts_st = st.lists(st.integers(0, 12), min_size=4, max_size=4).map(lambda c: dict(zip(TOPICS, c)))


@settings(max_examples=150)
@given(members_st, counts_st, st.data())
def test_every_partition_to_exactly_one_subscriber(members: list[str], counts: dict, data: st.DataObject) -> None:
    subs = {m: set(data.draw(st.lists(st.sampled_from(TOPICS), max_size=4))) for m in members}
    for assignor in (UniformAssignor(), RangeAssignor()):
        s = spec(subs, counts)
        first = assignor.assign(s)
        check_valid(s, first)
        assert assignor.assign(s) == first  # deterministic
        # sticky input (possibly stale / overlapping / for unsubscribed topics) stays valid
        garbage = {m: {t: frozenset(range(0, 14, 3)) for t in TOPICS} for m in members}
        check_valid(s, assignor.assign(spec(subs, counts, garbage)))


@settings(max_examples=150)
@given(members_st, counts_st, st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4))
def test_uniform_balances_identical_subscriptions(members: list[str], counts: dict, topics: list) -> None:
    s = spec({m: set(topics) for m in members}, counts)
    sizes = [len(flat(a)) for a in UniformAssignor().assign(s).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150)
@given(members_st, counts_st, st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4))
def test_uniform_join_moves_only_what_the_new_member_needs(members: list[str], counts: dict, topics: list) -> None:
    before_spec = spec({m: set(topics) for m in members}, counts)
    before = UniformAssignor().assign(before_spec)
    subs = {m: set(topics) for m in members} | {"new": set(topics)}
    after = UniformAssignor().assign(spec(subs, counts, before))
    moved = sum(len(flat(before[m]) - flat(after[m])) for m in members)
    assert moved == len(flat(after["new"]))  # only partitions going to the new member moved
    total = sum(len(flat(a)) for a in after.values())
    assert moved == total // len(subs)  # ... and it gets the smaller share
    for m in members:  # old members only lose partitions
        assert flat(after[m]) <= flat(before[m])


@settings(max_examples=100)
@given(members_st, counts_st, st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4), st.data())
def test_uniform_leave_keeps_the_remaining_assignments(members: list[str], counts: dict, topics: list,
                                                      data: st.DataObject) -> None:
    before = UniformAssignor().assign(spec({m: set(topics) for m in members}, counts))
    leaver = data.draw(st.sampled_from(members))
    rest = [m for m in members if m != leaver]
    after = UniformAssignor().assign(spec({m: set(topics) for m in rest}, counts, before))
    for m in rest:
        assert flat(before[m]) <= flat(after[m])


def test_range_is_contiguous_and_co_partitioned() -> None:
    t1, t2 = TOPICS[:2]
    result = RangeAssignor().assign(spec({"a": {t1, t2}, "b": {t1, t2}}, {t1: 3, t2: 3}))
    assert result["a"] == {t1: frozenset({0, 1}), t2: frozenset({0, 1})}
    assert result["b"] == {t1: frozenset({2}), t2: frozenset({2})}


def test_range_orders_static_members_by_instance_id() -> None:
    t1 = TOPICS[0]
    s = GroupSpec({"zz": MemberSpec("zz", "i0", frozenset({t1})), "aa": MemberSpec("aa", "i1", frozenset({t1}))},
                  {t1: 4})
    assert RangeAssignor().assign(s)["zz"] == {t1: frozenset({0, 1})}


def test_resolve_subscription_regex_full_match() -> None:
    names = ["orders", "orders-eu", "x-orders", "__consumer_offsets"]
    assert resolve_subscription(["a"], "orders.*", names) == {"a", "orders", "orders-eu"}
    assert resolve_subscription([], ".*", names) == {"orders", "orders-eu", "x-orders"}
    assert resolve_subscription(["a"], "(", names) == {"a"}
