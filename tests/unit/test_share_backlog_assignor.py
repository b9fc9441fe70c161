"""The ``backlog`` share group assignor (sans-IO) and a share group retargeting on lag:
property tests of the contract in :mod:`hightide.group.share_backlog_assignor` and the
hysteresis of :class:`~hightide.group.share_group.ShareGroup` (bounded churn, stable under
constant lag, a member keeps what it has in flight), and the ``group.share.assignors`` /
``share.assignor`` configs."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.config import BrokerConfig, ConfigError, validate_group_configs
from hightide.group import share_assignor
from hightide.group import share_backlog_assignor as B
from hightide.group.consumer_api import StaticTopics
from hightide.group.shard import GroupConfig
from hightide.group.share_assignor import ShareMemberSpec
from hightide.group.share_group import ShareAssignorInput, ShareGroupConfig, ShareHeartbeatRequest
from tests.unit.coordinator_context import GroupShardContext

T = uuid.UUID(int=7)
G = "sg"
INTERVAL_MS = 15_000


def _specs(members: int, current: dict[str, set[int]] | None = None) -> dict[str, ShareMemberSpec]:
    current = current or {}
    return {f"m{i:02d}": ShareMemberSpec(frozenset({T}), {T: frozenset(current[f"m{i:02d}"])}
                                         if current.get(f"m{i:02d}") else {}) for i in range(members)}


def _backlogs(lags: list[int | None], in_flight: dict[int, dict[str, int]] | None = None) -> dict:
    in_flight = in_flight or {}
    return {(T, p): B.PartitionBacklog(lag, in_flight.get(p, {})) for p, lag in enumerate(lags)}


def _owned(result: dict) -> dict[str, set[int]]:
    return {m: set(a.get(T, ())) for m, a in result.items()}


def _holders(result: dict) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for m, a in result.items():
        for p in a.get(T, ()):
            out.setdefault(p, set()).add(m)
    return out


def _with_current(members: dict[str, ShareMemberSpec], result: dict) -> dict[str, ShareMemberSpec]:
    return {m: ShareMemberSpec(s.subscribed_topic_ids, result.get(m, {})) for m, s in members.items()}


lags_st = st.lists(st.one_of(st.integers(0, 5000), st.just(0), st.none()), min_size=1, max_size=16)


@st.composite
def cases(draw):
    lags = draw(lags_st)
    members = draw(st.integers(1, 20))
    names = [f"m{i:02d}" for i in range(members)]
    current = {m: set(draw(st.sets(st.integers(0, len(lags) + 1), max_size=4))) for m in names}
    in_flight: dict[int, dict[str, int]] = {}
    for p in range(len(lags)):
        holders = [m for m in names if p in current[m]]
        if holders and draw(st.booleans()):
            in_flight[p] = {draw(st.sampled_from(holders)): draw(st.integers(1, 100))}
    return lags, members, current, in_flight


@settings(max_examples=300, deadline=None)
@given(cases())
def test_contract(case) -> None:
    lags, n, current, in_flight = case
    members = _specs(n, current)
    backlogs = _backlogs(lags, in_flight)
    assignable = {T: frozenset(range(len(lags)))}
    result = B.assign(members, assignable, backlogs)
    holders = _holders(result)
    # only assignable partitions; every one of them assigned (backlog or not)
    assert set(holders) == set(range(len(lags)))
    w = B.weights(T, list(range(len(lags))), backlogs)
    total = sum(w.values())
    backlogged = {p for p, v in w.items() if v > 0}
    if total:
        if n <= len(backlogged):  # every member works on a backlog
            assert all(ps & backlogged for ps in _owned(result).values())
    else:  # no backlog anywhere: exactly the simple assignor
        assert result == share_assignor.assign(members, assignable)
    # a member keeps the partitions it has records in flight on
    for p, owners in in_flight.items():
        for m in owners:
            assert p in result[m].get(T, ()), (m, p)
    # deterministic, and stable: what it returns is acceptable, and feeding it back changes nothing
    assert B.assign(members, assignable, backlogs) == result
    again = _with_current(members, result)
    assert B.acceptable(again, assignable, backlogs)
    assert B.assign(again, assignable, backlogs) == result


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=16), st.integers(1, 16))
def test_every_member_gets_a_backlogged_partition(lags, n) -> None:
    result = B.assign(_specs(n), {T: frozenset(range(len(lags)))}, _backlogs(list(lags)))
    owned = _owned(result)
    if n <= len(lags):
        assert all(owned.values())
    assert max(len(h) for h in _holders(result).values()) <= n


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=16), st.integers(1, 16))
def test_members_in_proportion_to_backlog(lags, n) -> None:
    """More backlog never means fewer members; loads within 1 + IMBALANCE of the fair
    share or of the heaviest single slot."""
    result = B.assign(_specs(n), {T: frozenset(range(len(lags)))}, _backlogs(list(lags)))
    holders = _holders(result)
    for p in range(len(lags)):
        for q in range(len(lags)):
            if lags[p] > lags[q]:
                assert len(holders[p]) >= len(holders[q]), (p, q)
    loads = B.member_loads(_owned(result), dict(enumerate(lags)))
    heaviest_slot = max(lags[p] / len(holders[p]) for p in holders)
    assert max(loads.values()) <= (1 + B.IMBALANCE) * (sum(lags) / n + heaviest_slot)


def test_uniform_backlog_is_shared_evenly() -> None:
    for n, parts in ((4, 12), (8, 12), (12, 12), (13, 4), (3, 3)):
        result = B.assign(_specs(n), {T: frozenset(range(parts))}, _backlogs([1000] * parts))
        assert len({len(h) for h in _holders(result).values()}) == 1, (n, parts)  # every partition alike
        counts = [len(o) for o in _owned(result).values()]
        assert max(counts) - min(counts) <= 1, (n, parts)
    holders = _holders(B.assign(_specs(8), {T: frozenset(range(12))}, _backlogs([1000] * 12)))
    assert all(len(h) == 2 for h in holders.values())  # 3 partitions per member, each shared by 2


def test_skewed_backlog_gets_more_members() -> None:
    lags = [35_000, 35_000] + [3_000] * 10
    result = B.assign(_specs(6), {T: frozenset(range(12))}, _backlogs(lags))
    holders = _holders(result)
    assert len(holders[0]) == len(holders[1]) > len(holders[2]) == 1
    assert all(len(holders[p]) == 1 for p in range(2, 12))
    loads = B.member_loads(_owned(result), dict(enumerate(lags)))
    assert max(loads.values()) <= 1.25 * sum(lags) / 6


def test_sticky_when_lag_barely_moves() -> None:
    lags = [35_000, 35_000] + [3_000] * 10
    members = _specs(6)
    assignable = {T: frozenset(range(12))}
    first = B.assign(members, assignable, _backlogs(lags))
    moved = [34_000, 35_500] + [2_900] * 10
    assert B.acceptable(_with_current(members, first), assignable, _backlogs(moved))  # the group keeps it
    again = B.assign(_with_current(members, first), assignable, _backlogs(moved))  # a recomputation keeps most
    pairs = {(m, p) for m, ps in _owned(first).items() for p in ps}
    kept = {(m, p) for m, ps in _owned(again).items() for p in ps} & pairs
    assert len(kept) >= 0.8 * len(pairs)


def test_drained_partitions_free_their_members() -> None:
    lags = [35_000, 35_000] + [3_000] * 10
    members = _specs(6)
    assignable = {T: frozenset(range(12))}
    first = _with_current(members, B.assign(members, assignable, _backlogs(lags)))
    drained = [30_000, 1_000] + [0] * 10
    assert not B.acceptable(first, assignable, _backlogs(drained))
    holders = _holders(B.assign(first, assignable, _backlogs(drained)))
    assert len(holders[0]) == 6 and len(holders[1]) == 1


def test_unknown_lag_weighs_the_mean() -> None:
    w = B.weights(T, [0, 1, 2], _backlogs([100, None, 300]))
    assert w == {0: 100, 1: 200, 2: 300}
    assert B.weights(T, [0, 1], _backlogs([None, None])) == {0: 1, 1: 1}


# -- the share group: retargets on lag, with hysteresis ------------------------------------------
class Ctx(GroupShardContext):
    def __init__(self, partitions: int = 12) -> None:
        super().__init__(GroupConfig(share=ShareGroupConfig(session_timeout_ms=600_000, heartbeat_interval_ms=500,
                                                            backlog_interval_ms=INTERVAL_MS)))
        self.topics = StaticTopics({"foo": (T, partitions)})
        self.epochs: dict[str, int] = {}
        self.assigned: dict[str, set[int]] = {}

    def hb(self, member: str, lags: list[int], in_flight: dict[int, dict[str, int]] | None = None,
           name: str = B.NAME):
        epoch = self.epochs.get(member, 0)
        req = ShareHeartbeatRequest(G, member, epoch, None, ("foo",) if epoch == 0 else None, "c", "/h")
        choice = ShareAssignorInput(name, _backlogs(lags, in_flight))
        resp = self.apply(self.shard.share_group_heartbeat(req, self.now, self.topics, None, None, choice))
        if resp.to_initialize:
            self.apply(self.shard.share_initialized(G, resp.to_initialize, self.topics, True))
            req = ShareHeartbeatRequest(G, member, resp.member_epoch, None, None, "c", "/h")
            resp = self.apply(self.shard.share_group_heartbeat(req, self.now, self.topics, None, None, choice))
        assert resp.error_code == 0, resp
        self.epochs[member] = resp.member_epoch
        if resp.assignment is not None:
            self.assigned[member] = {p for _, ps in resp.assignment for p in ps}
        return resp

    def round(self, lags: list[int], in_flight: dict[int, dict[str, int]] | None = None) -> None:
        for m in sorted(self.epochs):
            self.hb(m, lags, in_flight)

    def group(self):
        return self.shard.share.get(G)


SKEWED = [35_000, 35_000] + [3_000] * 10


def _joined(n: int, lags: list[int]) -> Ctx:
    ctx = Ctx()
    for i in range(n):
        ctx.hb(f"m{i}", lags)
    ctx.round(lags)
    return ctx


def test_group_uses_the_backlog_assignor_and_says_so() -> None:
    ctx = _joined(6, SKEWED)
    holders: dict[int, set[str]] = {}
    for m, ps in ctx.assigned.items():
        for p in ps:
            holders.setdefault(p, set()).add(m)
    assert len(holders[0]) == len(holders[1]) > len(holders[2])
    assert ctx.shard.describe_share_group(G, ctx.topics)["assignor_name"] == "backlog"


def test_constant_lag_never_retargets() -> None:
    ctx = _joined(6, SKEWED)
    epoch = ctx.group().group_epoch
    for _ in range(20):
        ctx.now += INTERVAL_MS
        ctx.round(SKEWED)
    assert ctx.group().group_epoch == epoch and ctx.group().lag_retargets == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50_000), min_size=12, max_size=12), min_size=1, max_size=12),
       st.integers(1, 8), st.integers(1, 8_000))
def test_bounded_churn(snapshots, n, step_ms) -> None:
    """However the lag moves, lag-driven retargets are at least the interval apart."""
    ctx = _joined(n, SKEWED)
    times = []
    for lags in snapshots:
        for _ in range(3):
            ctx.now += step_ms
            before = ctx.group().lag_retargets
            ctx.round(lags)
            if ctx.group().lag_retargets != before:
                times.append(ctx.now)
    assert all(b - a >= INTERVAL_MS for a, b in zip(times, times[1:]))
    span = ctx.now - 1000
    assert len(times) <= span // INTERVAL_MS + 1


def test_lag_movement_retargets_after_the_interval_and_keeps_in_flight() -> None:
    ctx = _joined(6, SKEWED)
    drained = [30_000, 2_000] + [0] * 10  # the light partitions drained, and most of partition 1
    owner_of_7 = next(m for m, ps in ctx.assigned.items() if 7 in ps)
    in_flight = {7: {owner_of_7: 20}}
    ctx.round(drained, in_flight)  # within the interval of the join's recomputation: nothing moves
    assert ctx.group().lag_retargets == 0
    ctx.now += INTERVAL_MS
    ctx.round(drained, in_flight)
    ctx.round(drained, in_flight)
    assert ctx.group().lag_retargets == 1
    holders: dict[int, set[str]] = {}
    for m, ps in ctx.assigned.items():
        for p in ps:
            holders.setdefault(p, set()).add(m)
    assert len(holders[0]) == 6 and len(holders[1]) == 1
    assert 7 in ctx.assigned[owner_of_7]  # mid-way through its records: kept
    ctx.now += INTERVAL_MS
    ctx.round(drained, in_flight)
    assert ctx.group().lag_retargets == 1  # acceptable now: no churn


def test_simple_stays_the_default_and_ignores_lag() -> None:
    ctx = Ctx()
    for i in range(6):
        ctx.hb(f"m{i}", SKEWED, name="simple")
    ctx.now += INTERVAL_MS
    for m in sorted(ctx.epochs):
        ctx.hb(m, [0] * 12, name="simple")
    assert all(len(ps) == 2 for ps in ctx.assigned.values())
    assert ctx.shard.describe_share_group(G, ctx.topics)["assignor_name"] == "simple"
    assert ctx.group().lag_retargets == 0


def test_switching_assignor_recomputes() -> None:
    ctx = Ctx()
    for i in range(6):
        ctx.hb(f"m{i}", SKEWED, name="simple")
    epoch = ctx.group().group_epoch
    ctx.hb("m0", SKEWED)  # the group config now says backlog
    assert ctx.group().group_epoch == epoch + 1
    assert ctx.shard.describe_share_group(G, ctx.topics)["assignor_name"] == "backlog"


# -- configs -------------------------------------------------------------------------------------
def test_configs() -> None:
    default = BrokerConfig()
    assert validate_group_configs(default, {})["share.assignor"] == "simple"
    with pytest.raises(ConfigError, match="must be one of the assignors in group.share.assignors: simple"):
        validate_group_configs(default, {"share.assignor": "backlog"})
    both = BrokerConfig.load(overrides={
        "group.share.assignors": "backlog,org.apache.kafka.coordinator.group.assignor.SimpleAssignor"})
    assert validate_group_configs(both, {})["share.assignor"] == "backlog"
    assert validate_group_configs(both, {"share.assignor": "simple"})["share.assignor"] == "simple"
    with pytest.raises(ConfigError, match="must be simple or backlog"):
        validate_group_configs(both, {"share.assignor": "range"})
    with pytest.raises(ConfigError, match="group.share.assignors"):
        BrokerConfig.load(overrides={"group.share.assignors": "uniform"})
