"""The KIP-848 consumer group state machine, driven through a test context like Kafka's
``GroupMetadataManagerTestContext``: call a handler, replay its records (through the
byte codec, as a reload would), replay its live records, advance a fake clock."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.group import consumer_records as CR
from tests.unit.coordinator_context import CoordinatorContext
from hightide.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroups,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    Result,
    StaticTopics,
)

E = ErrorCode
REBALANCE_TIMEOUT = 30000


class Context(CoordinatorContext[ConsumerGroups]):
    """The shared coordinator test context over the consumer groups of one shard: records
    go through the consumer group record codec, as written and read back."""

    def __init__(self, topics: dict[str, int] | None = None, config: ConsumerGroupConfig | None = None) -> None:
        self.config = config or ConsumerGroupConfig()
        self.ids = itertools.count()
        self.counts: dict[str, int] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        super().__init__(now=0)
        for name, n in (topics or {}).items():
            self.set_topic(name, n)
        #: member id -> the topics its principal may describe (None: no authorizer)
        self.may_describe: dict[str, set[str]] | None = None

    @property
    def groups(self) -> ConsumerGroups:
        return self.shard

    # -- CoordinatorContext hooks -----------------------------------------------------------
    def new_shard(self) -> ConsumerGroups:
        return ConsumerGroups(self.config, new_member_id=lambda: f"gen-{next(self.ids)}")

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        return CR.encode_key(key), CR.encode_value(value)

    def decode(self, key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
        decoded_key = CR.decode_key(key)
        assert decoded_key is not None
        return decoded_key, CR.decode_value(decoded_key, value)

    def replay(self, shard: ConsumerGroups, offset: int, key: Any, value: Any) -> None:
        shard.replay(key, value)

    # -- metadata ---------------------------------------------------------------------------
    def set_topic(self, name: str, partitions: int) -> None:
        self.topic_ids.setdefault(name, uuid.UUID(int=len(self.topic_ids) + 1))
        self.counts[name] = partitions

    def topics(self) -> StaticTopics:
        return StaticTopics({n: (self.topic_ids[n], c) for n, c in self.counts.items()})

    def tp(self, name: str, *parts: int) -> tuple[uuid.UUID, tuple[int, ...]]:
        return (self.topic_ids[name], tuple(parts))

    # -- driving ----------------------------------------------------------------------------
    def group(self, group_id: str = "g") -> ConsumerGroup:
        g = self.groups.get(group_id)
        assert g is not None
        return g

    def heartbeat(self, member_id: str, member_epoch: int, group_id: str = "g", **kw: Any) -> HeartbeatResponse:
        req = HeartbeatRequest(group_id, member_id, member_epoch, **kw)
        group = self.groups.get_or_new(group_id)
        if self.may_describe is None:
            result = group.heartbeat(req, self.now, self.topics())
        else:  # the member's authorization: the topics its principal may describe
            allowed = self.may_describe.get(member_id, set())
            result = group.heartbeat(req, self.now, self.topics(),
                                     describable=lambda names: {n for n in names if n in allowed})
        if result.response.error_code != E.none:
            assert result.records == [] and result.live == []
        self.apply(result)
        return result.response

    def join(self, member_id: str, topics: tuple[str, ...] = ("foo",), **kw: Any) -> HeartbeatResponse:
        kw.setdefault("rebalance_timeout_ms", REBALANCE_TIMEOUT)
        kw.setdefault("topic_partitions", ())
        return self.heartbeat(member_id, 0, subscribed_topic_names=topics, api_version=1, **kw)

    def advance(self, ms: int) -> Result:
        self.now += ms
        out = Result()
        for g in list(self.groups.groups.values()):
            r = g.poll(self.now, self.topics())
            self.apply(r)
            out.records += r.records
        return out

    def reload(self, from_offset: int = 0) -> ConsumerGroups:
        """A fresh ConsumerGroups loaded from the log (the context keeps its own)."""
        fresh = self.new_shard()
        for offset, kb, vb in self.log[from_offset:]:
            self.replay(fresh, offset, *self.decode(kb, vb))
        return fresh

    def assert_reload_equal(self) -> None:
        fresh = self.reload()
        assert set(fresh.groups) == set(self.groups.groups)
        for gid, g in self.groups.groups.items():
            assert fresh.groups[gid].persisted_state() == g.persisted_state()


class Client:
    """A KIP-848 consumer as the coordinator sees it: it reports what it owns; ``ack``
    means it has processed the latest assignment (revoked and taken partitions)."""

    def __init__(self, ctx: Context, member_id: str, topics: tuple[str, ...] = ("foo",), **join: Any) -> None:
        self.ctx, self.member_id, self.topics, self.join_kw = ctx, member_id, topics, join
        self.epoch = -1
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.latest: dict[uuid.UUID, frozenset[int]] = {}

    def _take(self, r: HeartbeatResponse) -> HeartbeatResponse:
        if r.error_code in (E.fenced_member_epoch, E.unknown_member_id):
            self.epoch, self.owned, self.latest = -1, {}, {}
        elif r.error_code == E.none:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.latest = {t: frozenset(ps) for t, ps in r.assignment}
        return r

    def join(self) -> HeartbeatResponse:
        self.owned = self.latest = {}
        return self._take(self.ctx.join(self.member_id, self.topics, **self.join_kw))

    def beat(self, ack: bool = True) -> HeartbeatResponse:
        if ack:
            self.owned = dict(self.latest)
        owned = tuple((t, tuple(sorted(ps))) for t, ps in self.owned.items())
        return self._take(self.ctx.heartbeat(self.member_id, self.epoch, topic_partitions=owned, api_version=1,
                                             instance_id=self.join_kw.get("instance_id")))

    def leave(self) -> HeartbeatResponse:
        r = self.ctx.heartbeat(self.member_id, -1, api_version=1, instance_id=self.join_kw.get("instance_id"))
        self.epoch, self.owned, self.latest = -1, {}, {}
        return r

    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())


def settle(ctx: Context, clients: list[Client], rounds: int = 8) -> None:
    for _ in range(rounds):
        for c in clients:
            if c.epoch >= 0:
                c.beat()
        ctx.now += 100


def assert_disjoint(sets: list[dict[uuid.UUID, frozenset[int]]]) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for s in sets:
        flat = {(t, p) for t, ps in s.items() for p in ps}
        assert not flat & seen, f"partitions owned twice: {flat & seen}"
        seen |= flat


# -- joining and reconciling ---------------------------------------------------------------------
def test_single_member_join_gets_everything() -> None:
    ctx = Context({"foo": 3})
    r = ctx.join("m1")
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (E.none, "m1", 1, 5000)
    assert r.assignment == (ctx.tp("foo", 0, 1, 2),)
    g = ctx.group()
    assert (g.group_epoch, g.assignment_epoch, g.state) == (1, 1, "Stable")
    r = ctx.heartbeat("m1", 1, topic_partitions=(ctx.tp("foo", 0, 1, 2),))
    assert r.assignment is None and r.member_epoch == 1  # nothing changed: no assignment sent


def test_three_members_reconcile_revoking_before_assigning() -> None:
    ctx = Context({"foo": 6})
    a, b, c = (Client(ctx, m) for m in ("a", "b", "c"))
    a.join()
    a.beat()
    assert a.count() == 6
    r = b.join()
    assert r.member_epoch == 2 and r.assignment == ()  # its partitions are still a's
    assert ctx.group().members["b"].state is MemberState.UNRELEASED_PARTITIONS
    r = a.beat(ack=False)  # a learns it must give 3 up; stays at epoch 1 until it does
    assert r.member_epoch == 1 and len(r.assignment[0][1]) == 3
    assert ctx.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert b.beat().assignment is None  # still unreleased: a has not acknowledged
    r = a.beat()  # a acknowledges the revocation
    assert r.member_epoch == 2 and ctx.group().members["a"].state is MemberState.STABLE
    r = b.beat()
    assert r.member_epoch == 2 and len(r.assignment[0][1]) == 3
    c.join()
    settle(ctx, [a, b, c])
    g = ctx.group()
    assert g.state == "Stable" and g.group_epoch == 3
    assert [x.count() for x in (a, b, c)] == [2, 2, 2]
    assert_disjoint([a.owned, b.owned, c.owned])
    assert all(m.member_epoch == 3 and m.assigned == g.targets[m.member_id] for m in g.members.values())
    ctx.assert_reload_equal()


def test_leave_bumps_the_epoch_and_the_rest_take_over() -> None:
    ctx = Context({"foo": 4})
    a, b = Client(ctx, "a"), Client(ctx, "b")
    a.join()
    b.join()
    settle(ctx, [a, b])
    r = b.leave()
    assert (r.error_code, r.member_id, r.member_epoch) == (E.none, "b", -1)
    g = ctx.group()
    assert "b" not in g.members and g.state == "Assigning" and g.group_epoch == 3
    settle(ctx, [a])
    assert a.count() == 4 and ctx.group().state == "Stable"
    a.leave()
    assert ctx.group().state == "Empty"
    assert ctx.heartbeat("b", 2, topic_partitions=()).error_code == E.unknown_member_id
    ctx.assert_reload_equal()


def test_session_expiry_fences_the_silent_member() -> None:
    ctx = Context({"foo": 4})
    a, b = Client(ctx, "a"), Client(ctx, "b")
    a.join()
    b.join()
    settle(ctx, [a, b])
    ctx.now += 40000
    a.beat()
    assert ctx.advance(5001).records  # b's 45 s session is over; a's is not
    assert set(ctx.group().members) == {"a"}
    assert b.beat().error_code == E.unknown_member_id
    settle(ctx, [a])
    assert a.count() == 4
    assert ctx.group().next_deadline() == ctx.group().timers["a"].session_deadline_ms
    ctx.assert_reload_equal()


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    ctx = Context({"foo": 4})
    a, b = Client(ctx, "a"), Client(ctx, "b")
    a.join()
    a.beat()
    b.join()
    a.beat(ack=False)
    assert ctx.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(3):  # a keeps heartbeating but never revokes
        ctx.advance(10000)
        a.beat(ack=False)
        b.beat()
    ctx.advance(1)
    assert "a" not in ctx.group().members
    assert a.beat(ack=False).error_code == E.unknown_member_id
    settle(ctx, [b])
    assert b.count() == 4


# -- errors ------------------------------------------------------------------------------------
def test_member_epoch_fencing() -> None:
    ctx = Context({"foo": 2})
    a, b = Client(ctx, "a"), Client(ctx, "b")
    a.join()
    a.beat()
    b.join()
    settle(ctx, [a, b])
    epoch = ctx.group().members["a"].member_epoch
    assert epoch == 2 and ctx.group().members["a"].previous_member_epoch == 1
    assert ctx.heartbeat("a", epoch + 1, topic_partitions=()).error_code == E.fenced_member_epoch
    # previous epoch with owned partitions still assigned: the bump's response was lost
    assert ctx.heartbeat("a", epoch - 1, topic_partitions=tuple(a.owned.items())).error_code == E.none
    # previous epoch but owning a partition it no longer has
    assert ctx.heartbeat("a", epoch - 1, topic_partitions=(ctx.tp("foo", 0, 1),)).error_code == E.fenced_member_epoch
    assert ctx.heartbeat("a", epoch - 1, topic_partitions=None).error_code == E.fenced_member_epoch
    assert ctx.heartbeat("nobody", 1, topic_partitions=()).error_code == E.unknown_member_id
    assert ctx.heartbeat("nobody", -1).error_code == E.unknown_member_id


@pytest.mark.parametrize("kw, code", [
    ({"group_id": ""}, E.invalid_request),
    ({"rebalance_timeout_ms": -1}, E.invalid_request),
    ({"topic_partitions": None}, E.invalid_request),
    ({"topics": ()}, E.invalid_request),
    ({"instance_id": ""}, E.invalid_request),
    ({"rack_id": ""}, E.invalid_request),
    ({"server_assignor": "sticky"}, E.unsupported_assignor),
    ({"subscribed_topic_regex": "("}, E.invalid_regular_expression),
])
def test_invalid_joins(kw: dict, code: ErrorCode) -> None:
    ctx = Context({"foo": 1})
    assert ctx.join("m", **kw).error_code == code
    assert ctx.groups.get("g") is None


def test_other_invalid_requests() -> None:
    ctx = Context({"foo": 1})
    assert ctx.join("m", topic_partitions=(ctx.tp("foo", 0),)).error_code == E.invalid_request
    assert ctx.heartbeat("m", -3).error_code == E.invalid_request
    assert ctx.heartbeat("", 1).error_code == E.invalid_request
    assert ctx.heartbeat("", 0, api_version=1, subscribed_topic_names=("foo",), rebalance_timeout_ms=1,
                         topic_partitions=()).error_code == E.invalid_request
    assert ctx.heartbeat("m", -2).error_code == E.invalid_request  # static leave without instance id


def test_v0_join_gets_a_server_generated_member_id() -> None:
    ctx = Context({"foo": 1})
    r = ctx.heartbeat("", 0, subscribed_topic_names=("foo",), rebalance_timeout_ms=1000, topic_partitions=())
    assert r.error_code == E.none and r.member_id == "gen-0" and r.member_epoch == 1


def test_group_max_size() -> None:
    ctx = Context({"foo": 2}, ConsumerGroupConfig(max_size=1))
    assert ctx.join("a").error_code == E.none
    assert ctx.join("b").error_code == E.group_max_size_reached
    assert ctx.heartbeat("a", 1, topic_partitions=()).error_code == E.none


# -- static membership ----------------------------------------------------------------------------
def test_static_member_leaves_temporarily_and_rejoins_without_rebalance() -> None:
    ctx = Context({"foo": 4})
    a, b = Client(ctx, "a1", instance_id="ia"), Client(ctx, "b", instance_id="ib")
    a.join()
    b.join()
    settle(ctx, [a, b])
    owned_before, epoch_before = dict(a.owned), ctx.group().group_epoch
    r = ctx.heartbeat("a1", -2, instance_id="ia")
    assert (r.error_code, r.member_epoch) == (E.none, -2)
    assert ctx.group().members["a1"].member_epoch == -2  # keeps its partitions meanwhile
    assert ctx.join("other", instance_id="ib").error_code == E.unreleased_instance_id
    a2 = Client(ctx, "a2", instance_id="ia")
    r = a2.join()
    assert r.error_code == E.none and r.member_epoch == epoch_before
    assert {t: frozenset(ps) for t, ps in r.assignment} == owned_before
    g = ctx.group()
    assert g.group_epoch == epoch_before and "a1" not in g.members and g.static_members["ia"] == "a2"
    assert ctx.heartbeat("a1", 2, instance_id="ia", topic_partitions=()).error_code == E.fenced_instance_id
    assert ctx.heartbeat("x", 2, instance_id="nope", topic_partitions=()).error_code == E.unknown_member_id
    ctx.assert_reload_equal()


def test_static_member_that_left_expires_with_its_session() -> None:
    ctx = Context({"foo": 2})
    a, b = Client(ctx, "a", instance_id="ia"), Client(ctx, "b")
    a.join()
    b.join()
    settle(ctx, [a, b])
    ctx.heartbeat("a", -2, instance_id="ia")
    for _ in range(5):
        ctx.advance(10000)
        b.beat()
    assert "a" not in ctx.group().members
    settle(ctx, [b])
    assert b.count() == 2


# -- subscriptions and metadata ---------------------------------------------------------------------
def test_subscription_change_moves_the_member_to_the_new_topic() -> None:
    ctx = Context({"foo": 2, "bar": 2})
    a = Client(ctx, "a")
    a.join()
    a.beat()
    r = ctx.heartbeat("a", 1, subscribed_topic_names=("bar",), topic_partitions=tuple(a.owned.items()))
    assert ctx.group().group_epoch == 2
    assert r.assignment == ()  # foo must be revoked first
    a.latest = {}
    a.beat()
    a.beat()
    assert a.owned == {ctx.topic_ids["bar"]: frozenset({0, 1})}
    ctx.assert_reload_equal()


def test_partition_count_growth_triggers_a_rebalance() -> None:
    ctx = Context({"foo": 2})
    a, b = Client(ctx, "a"), Client(ctx, "b")
    a.join()
    b.join()
    settle(ctx, [a, b])
    epoch = ctx.group().group_epoch
    ctx.set_topic("foo", 6)
    settle(ctx, [a, b])
    assert ctx.group().group_epoch == epoch + 1
    assert (a.count(), b.count()) == (3, 3)
    assert ctx.group().subscription_metadata["foo"].num_partitions == 6
    ctx.assert_reload_equal()


def test_regex_subscription_picks_up_new_topics() -> None:
    ctx = Context({"orders-eu": 2, "other": 1})
    a = Client(ctx, "a", topics=(), subscribed_topic_regex="orders-.*")
    a.join()
    a.beat()
    assert a.owned == {ctx.topic_ids["orders-eu"]: frozenset({0, 1})}
    ctx.set_topic("orders-us", 1)
    a.beat()
    a.beat()
    assert a.count() == 3


def test_regex_subscription_assigns_only_topics_the_member_may_describe() -> None:
    """Kafka resolves a regex with the member's authorization
    (``filterTopicDescribeAuthorizedTopics``): a topic the member may not describe is
    never assigned to it, nor does it enter the group's subscription because of it."""
    ctx = Context({"orders-eu": 2, "orders-us": 2, "other": 1})
    eu, us = ctx.topic_ids["orders-eu"], ctx.topic_ids["orders-us"]
    ctx.may_describe = {"a": {"orders-eu", "other"}, "b": {"orders-eu", "orders-us"}}
    a = Client(ctx, "a", topics=(), subscribed_topic_regex="orders-.*")
    a.join()
    a.beat()
    assert a.owned == {eu: frozenset({0, 1})}
    assert set(ctx.group().subscription_metadata) == {"orders-eu"}
    b = Client(ctx, "b", topics=(), subscribed_topic_regex="orders-.*")
    b.join()
    settle(ctx, [a, b])
    assert us not in a.owned and b.owned[us] == frozenset({0, 1})  # b may describe it: b alone gets it
    assert a.count() + b.count() == 4
    assert_disjoint([a.owned, b.owned])
    ctx.set_topic("orders-asia", 1)  # a new matching topic neither may describe
    settle(ctx, [a, b])
    assert ctx.topic_ids["orders-asia"] not in a.owned and ctx.topic_ids["orders-asia"] not in b.owned
    b.leave()
    settle(ctx, [a])
    assert a.owned == {eu: frozenset({0, 1})}  # orders-us is left unassigned rather than given to a
    ctx.may_describe["a"].add("orders-us")  # an ACL granted: taken up at a's next heartbeat
    settle(ctx, [a])
    assert a.owned == {eu: frozenset({0, 1}), us: frozenset({0, 1})}
    ctx.may_describe["a"].discard("orders-eu")  # and revoked
    settle(ctx, [a])
    assert a.owned == {us: frozenset({0, 1})}
    ctx.assert_reload_equal()


def test_regex_resolution_after_reload_keeps_the_authorized_subscription() -> None:
    """The authorized resolution is live state (not in the records): a reloaded group
    resolves a member's regex within the subscription its records hold until the member
    heartbeats again, so a topic it may not describe is not handed to it meanwhile."""
    ctx = Context({"orders-eu": 1, "orders-us": 1})
    ctx.may_describe = {"a": {"orders-eu"}, "b": {"orders-eu"}}
    a = Client(ctx, "a", topics=(), subscribed_topic_regex="orders-.*")
    a.join()
    a.beat()
    ctx.shard = ctx.reload()
    b = Client(ctx, "b", topics=(), subscribed_topic_regex="orders-.*")
    b.join()  # bumps the group epoch: targets are recomputed for a (unresolved since the reload) too
    settle(ctx, [a, b])
    assert ctx.topic_ids["orders-us"] not in a.owned and ctx.topic_ids["orders-us"] not in b.owned
    assert a.count() + b.count() == 1


def test_range_assignor_is_used_when_members_ask_for_it() -> None:
    ctx = Context({"foo": 3})
    a, b = Client(ctx, "a", server_assignor="range"), Client(ctx, "b", server_assignor="range")
    a.join()
    b.join()
    settle(ctx, [a, b])
    assert a.owned == {ctx.topic_ids["foo"]: frozenset({0, 1})}
    assert ctx.group().describe(ctx.topics())["assignor_name"] == "range"


# -- offsets and describe ------------------------------------------------------------------------
def test_offset_commit_and_fetch_validation() -> None:
    ctx = Context({"foo": 1})
    g = ConsumerGroup("g")
    assert g.validate_offset_commit("", -1) == E.none  # admin commit to an empty group
    ctx.join("a")
    g = ctx.group()
    assert g.validate_offset_commit("", -1) == E.unknown_member_id
    assert g.validate_offset_commit("b", 1) == E.unknown_member_id
    assert g.validate_offset_commit("a", 0) == E.stale_member_epoch
    assert g.validate_offset_commit("a", 1) == E.none
    assert g.validate_offset_commit("a", 1, api_version=8) == E.unsupported_version
    assert g.validate_offset_fetch(None, -1) == E.none
    assert g.validate_offset_fetch("a", 1) == E.none
    assert g.validate_offset_fetch("a", 2) == E.stale_member_epoch
    assert g.validate_offset_fetch("b", 1) == E.unknown_member_id


def test_describe() -> None:
    ctx = Context({"foo": 2})
    ctx.join("a", client_id="cli", client_host="/127.0.0.1", rack_id="r1")
    d = ctx.group().describe(ctx.topics())
    assert {k: d[k] for k in ("group_id", "group_state", "group_epoch", "assignment_epoch", "assignor_name")} == {
        "group_id": "g", "group_state": "Stable", "group_epoch": 1, "assignment_epoch": 1, "assignor_name": "uniform"}
    (m,) = d["members"]
    assert m["member_id"] == "a" and m["client_id"] == "cli" and m["rack_id"] == "r1" and m["member_epoch"] == 1
    assert m["subscribed_topic_names"] == ["foo"]
    assert m["assignment"] == m["target_assignment"] == [(ctx.topic_ids["foo"], "foo", [0, 1])]


def test_loaded_timers_arm_every_member() -> None:
    ctx = Context({"foo": 2})
    ctx.join("a")
    fresh = ctx.reload().groups["g"]
    assert fresh.timers == {}
    fresh.apply(fresh.loaded_timers(1000))
    assert fresh.next_deadline() == 1000 + 45000


# -- the safety property -----------------------------------------------------------------------------
N_CLIENTS = 4
ops = st.one_of(
    st.tuples(st.just("join"), st.integers(0, N_CLIENTS - 1)),
    st.tuples(st.just("beat"), st.integers(0, N_CLIENTS - 1), st.booleans()),
    st.tuples(st.just("leave"), st.integers(0, N_CLIENTS - 1)),
    st.tuples(st.just("advance"), st.sampled_from([100, 5000, 20000, 46000])),
    st.tuples(st.just("grow"), st.sampled_from(["foo", "bar"])),
    st.tuples(st.just("subscribe"), st.integers(0, N_CLIENTS - 1), st.sampled_from([("foo",), ("bar",), ("foo", "bar")])),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=40))
def test_no_partition_is_ever_owned_twice(script: list[tuple]) -> None:
    ctx = Context({"foo": 4, "bar": 3})
    clients = [Client(ctx, f"c{i}", topics=("foo", "bar") if i % 2 else ("foo",)) for i in range(N_CLIENTS)]
    for op in script:
        run(ctx, clients, op)
        check_safety(ctx, clients)
    settle(ctx, clients, rounds=10)
    check_safety(ctx, clients)
    g = ctx.groups.get("g")
    if g is not None and g.members:
        assert g.state == "Stable"
        subscribed = {n for m in g.members.values() for n in m.subscribed_topic_names}
        total = sum(ctx.counts[n] for n in subscribed)
        assert sum(c.count() for c in clients if c.epoch >= 0) == total
    ctx.assert_reload_equal()


def run(ctx: Context, clients: list[Client], op: tuple) -> None:
    kind = op[0]
    if kind == "join" and clients[op[1]].epoch < 0:
        clients[op[1]].join()
    elif kind == "beat" and clients[op[1]].epoch >= 0:
        clients[op[1]].beat(ack=op[2])
    elif kind == "leave" and clients[op[1]].epoch >= 0:
        clients[op[1]].leave()
    elif kind == "advance":
        ctx.advance(op[1])
    elif kind == "grow":
        ctx.set_topic(op[1], ctx.counts[op[1]] + 1)
    elif kind == "subscribe" and clients[op[1]].epoch >= 0:
        c = clients[op[1]]
        c.topics = op[2]
        owned = tuple((t, tuple(sorted(ps))) for t, ps in c.owned.items())
        c._take(ctx.heartbeat(c.member_id, c.epoch, subscribed_topic_names=op[2], topic_partitions=owned))


def check_safety(ctx: Context, clients: list[Client]) -> None:
    g = ctx.groups.get("g")
    members = g.members if g is not None else {}
    assert_disjoint([m.owned_partitions() for m in members.values()])  # the coordinator's view
    live = [c for c in clients if c.epoch >= 0 and c.member_id in members]
    assert_disjoint([c.owned for c in live])  # what the consumers actually hold
    for c in live:  # a consumer only holds what the coordinator counts as its own
        held = members[c.member_id].owned_partitions()
        assert all(ps <= held.get(t, frozenset()) for t, ps in c.owned.items())


def test_image_topics_view_reads_the_metadata_image() -> None:
    from hightide.cluster.image import MetadataImage
    from hightide.cluster.records import PartitionRecord, TopicRecord
    from hightide.group.consumer_group import ImageTopics

    tid = uuid.UUID(int=7)
    image = MetadataImage()
    image.apply(TopicRecord("foo", str(tid)), 0)
    for p in range(3):
        image.apply(PartitionRecord(str(tid), p, 1), p + 1)
    view = ImageTopics(image)
    assert view.by_name("foo") == view.by_id(tid) == CR.TopicMetadata(tid, "foo", 3)
    assert view.by_name("bar") is None and list(view.names()) == ["foo"]
    g = ConsumerGroup("g")
    req = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("foo",), topic_partitions=())
    assert g.heartbeat(req, 0, view).response.assignment == ((tid, (0, 1, 2)),)
