"""The classic group protocol, driven through the sans-IO shard with a fake clock."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.group.classic import GroupLimits, GroupState, IllegalTransition, JoinRequest, JoinResponse, \
    SyncResponse, ClassicGroup, transition
from hightide.group.offsets import CommitRequest
from hightide.group.records import GroupKey, decode_key, decode_value
from hightide.group.shard import GroupConfig
from tests.unit.coordinator_context import GroupShardContext

import pytest

E = ErrorCode
G = "grp"
RANGE = (("range", b"r-meta"),)


class Ctx(GroupShardContext):
    """The shared shard context (call, commit through the codec, replay, fake clock) with
    classic limits; ``answers`` collects parked answers by handle."""

    def __init__(self, **limits) -> None:
        limits = {"initial_rebalance_delay_ms": 3000, "min_session_timeout_ms": 6000,
                  "max_session_timeout_ms": 1800000, **limits}
        super().__init__(GroupConfig(classic=GroupLimits(**limits)))
        self.handles = itertools.count(1)

    @property
    def group(self) -> ClassicGroup:
        return self.shard.groups[G]

    # -- requests ---------------------------------------------------------------------
    def join(self, member_id="", instance=None, protocols=RANGE, session=10000, rebalance=30000, v4=True,
             client="c", group=G, ptype="consumer") -> int:
        h = next(self.handles)
        req = JoinRequest(group, member_id, instance, client, "/127.0.0.1", session, rebalance, ptype,
                          tuple(protocols), require_known_member_id=v4)
        self.apply(self.shard.join_group(req, h, self.now))
        return h

    def join_new(self, **kw) -> tuple[str, int]:
        """A dynamic member's two-step join (MEMBER_ID_REQUIRED, then rejoin)."""
        r = self.answers[self.join(**kw)]
        assert r.error == E.member_id_required
        return r.member_id, self.join(member_id=r.member_id, **kw)

    def sync(self, member_id, generation, assignments=None, instance=None, group=G) -> int:
        h = next(self.handles)
        self.apply(self.shard.sync_group(group, member_id, instance, generation, "consumer", None,
                                         assignments or {}, h, self.now))
        return h

    def heartbeat(self, member_id, generation, instance=None, group=G) -> ErrorCode:
        return self.apply(self.shard.heartbeat(group, member_id, instance, generation, self.now))

    def leave(self, *members, group=G):
        return self.apply(self.shard.leave_group(group, list(members), self.now))

    def answer(self, h):
        return self.answers.get(h)

    def reload(self) -> "Ctx":
        """A new shard loaded from the records this one wrote (through the byte format)."""
        super().reload()
        return self

    # -- recipes ----------------------------------------------------------------------
    def stable_group(self, n: int) -> list[str]:
        """n dynamic members in a Stable group (first one leader); returns member ids."""
        joins = [self.join_new() for _ in range(n)]
        while self.answer(joins[0][1]) is None:  # the initial delay, extended per newcomer
            self.advance(1000)
        ids = [m for m, _ in joins]
        resp = [self.answer(h) for _, h in joins]
        assert all(r.error == E.none for r in resp)
        gen = resp[0].generation
        leader = resp[0].leader
        syncs = {m: self.sync(m, gen, {x: f"a-{x}".encode() for x in ids} if m == leader else None)
                 for m in ids}
        assert all(self.answer(h).error == E.none for h in syncs.values())
        assert self.group.state is GroupState.STABLE
        return ids


def group_records(ctx: Ctx) -> list:
    out = []
    for _, kb, vb in ctx.log:
        k = decode_key(kb)
        if isinstance(k, GroupKey):
            out.append(decode_value(k, vb))
    return out


# -- state machine table ------------------------------------------------------------------------
def test_transition_table_refuses_illegal_moves():
    g = ClassicGroup("x")
    with pytest.raises(IllegalTransition):
        transition(g, GroupState.STABLE, 0)
    transition(g, GroupState.PREPARING_REBALANCE, 5)
    assert g.state is GroupState.PREPARING_REBALANCE and g.state_ts == 5
    with pytest.raises(IllegalTransition):
        transition(g, GroupState.STABLE, 0)


# -- joining ----------------------------------------------------------------------------------------
def test_join_v4_requires_member_id_and_waits_initial_delay():
    ctx = Ctx()
    h = ctx.join()
    r = ctx.answer(h)
    assert r.error == E.member_id_required and r.member_id == "c-1"
    assert ctx.group.state is GroupState.EMPTY and "c-1" in ctx.group.pending
    h2 = ctx.join(member_id="c-1")
    assert ctx.answer(h2) is None  # parked during the initial delay
    assert ctx.group.state is GroupState.PREPARING_REBALANCE
    ctx.advance(2999)
    assert ctx.answer(h2) is None
    ctx.advance(1)
    r = ctx.answer(h2)
    assert (r.error, r.generation, r.leader, r.member_id, r.protocol) == (E.none, 1, "c-1", "c-1", "range")
    assert r.members == (("c-1", None, b"r-meta"),)
    assert ctx.group.state is GroupState.COMPLETING_REBALANCE


def test_join_v3_gets_member_id_at_once():
    ctx = Ctx(initial_rebalance_delay_ms=0)
    h = ctx.join(v4=False)
    ctx.advance(0)
    r = ctx.answer(h)
    assert r.error == E.none and r.member_id == "c-1" and r.generation == 1


def test_initial_delay_extends_while_members_arrive_up_to_rebalance_timeout():
    ctx = Ctx(initial_rebalance_delay_ms=1000)
    _, h1 = ctx.join_new(rebalance=2500)
    ctx.advance(900)
    _, h2 = ctx.join_new(rebalance=2500)  # a new member during the delay extends it
    ctx.advance(100)
    assert ctx.answer(h1) is None
    ctx.advance(1000)
    assert ctx.answer(h1).error == E.none and ctx.answer(h2).error == E.none
    assert ctx.answer(h1).generation == 1


def test_unknown_member_of_unknown_group_and_bad_requests():
    ctx = Ctx()
    assert ctx.answer(ctx.join(member_id="nobody")).error == E.unknown_member_id
    assert ctx.answer(ctx.join(group="")).error == E.invalid_group_id
    assert ctx.answer(ctx.join(session=5999)).error == E.invalid_session_timeout
    assert ctx.answer(ctx.join(session=1800001)).error == E.invalid_session_timeout
    assert ctx.answer(ctx.join(protocols=())).error == E.inconsistent_group_protocol
    assert G not in ctx.shard.groups  # failed joins leave nothing behind


def test_inconsistent_protocols_and_protocol_selection():
    ctx = Ctx(initial_rebalance_delay_ms=0)
    a, ha = ctx.join_new(protocols=(("range", b"1"), ("roundrobin", b"2")))
    b, hb = ctx.join_new(protocols=(("roundrobin", b"3"), ("range", b"4")))
    c, hc = ctx.join_new(protocols=(("roundrobin", b"5"),))
    assert ctx.answer(ctx.join(protocols=(("sticky", b""),))).error == E.inconsistent_group_protocol
    assert ctx.answer(ctx.join(ptype="connect")).error == E.inconsistent_group_protocol
    ctx.advance(0)
    r = ctx.answer(ha)
    assert r.protocol == "roundrobin" and r.leader == a
    assert dict((m, meta) for m, _, meta in r.members) == {a: b"2", b: b"3", c: b"5"}
    assert ctx.answer(hb).members == ()  # followers do not get the member list


def test_group_max_size():
    ctx = Ctx(max_size=2, initial_rebalance_delay_ms=0)
    ctx.stable_group(2)
    assert ctx.answer(ctx.join()).error == E.group_max_size_reached


# -- sync ------------------------------------------------------------------------------------------
def test_follower_sync_waits_for_leader():
    ctx = Ctx()
    (a, ha), (b, _hb) = ctx.join_new(), ctx.join_new()
    ctx.advance(3000)
    assert ctx.answer(ha) is None  # b arrived during the delay: extended once
    ctx.advance(3000)
    gen = ctx.answer(ha).generation
    hs_b = ctx.sync(b, gen)
    assert ctx.answer(hs_b) is None
    assert ctx.shard.commit_offsets(G, gen, b, [], ctx.now, lambda t, p: True).response[0] == \
        E.rebalance_in_progress
    assert ctx.answer(ctx.sync(a, gen + 1)).error == E.illegal_generation
    assert ctx.answer(ctx.sync("zz", gen)).error == E.unknown_member_id
    hs_a = ctx.sync(a, gen, {a: b"A", b: b"B"})
    assert ctx.answer(hs_a) == SyncResponse(E.none, "consumer", "range", b"A")
    assert ctx.answer(hs_b) == SyncResponse(E.none, "consumer", "range", b"B")
    assert ctx.group.state is GroupState.STABLE
    rec = group_records(ctx)[-1]
    assert rec.generation == gen and rec.leader == a and rec.protocol == "range"
    assert {m.member_id: m.assignment for m in rec.members} == {a: b"A", b: b"B"}
    # a late sync in Stable gets the stored assignment at once
    assert ctx.answer(ctx.sync(b, gen)).assignment == b"B"


def test_sync_during_rebalance_and_parked_sync_interrupted():
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    gen = ctx.group.generation
    hc = ctx.join_new()[1]  # a third member: rebalance
    assert ctx.group.state is GroupState.PREPARING_REBALANCE
    assert ctx.answer(ctx.sync(b, gen)).error == E.rebalance_in_progress
    ha, _hb = ctx.join(member_id=a), ctx.join(member_id=b)  # everyone rejoined: completes at once
    assert ctx.answer(hc).generation == gen + 1 == ctx.answer(ha).generation
    hs = ctx.sync(b, gen + 1)
    ctx.leave((a, None))  # the leader leaves while b's sync is parked
    assert ctx.answer(hs).error == E.rebalance_in_progress


def test_pending_sync_timeout_removes_members_that_never_sync():
    ctx = Ctx(initial_rebalance_delay_ms=0)
    (a, ha), (b, _hb) = ctx.join_new(rebalance=5000), ctx.join_new(rebalance=5000)
    ctx.advance(0)
    gen = ctx.answer(ha).generation
    hs = ctx.sync(b, gen)
    ctx.advance(5000)  # the leader never sent its assignment
    assert ctx.answer(hs).error == E.rebalance_in_progress
    assert a not in ctx.group.members and ctx.group.state is GroupState.PREPARING_REBALANCE


# -- heartbeats and timeouts --------------------------------------------------------------------------
def test_heartbeat_errors():
    ctx = Ctx()
    assert ctx.heartbeat("x", 0) == E.unknown_member_id  # unknown group
    a, b = ctx.stable_group(2)
    gen = ctx.group.generation
    assert ctx.heartbeat(a, gen) == E.none
    assert ctx.heartbeat("x", gen) == E.unknown_member_id
    assert ctx.heartbeat(a, gen - 1) == E.illegal_generation
    ctx.join_new()
    assert ctx.heartbeat(a, gen) == E.rebalance_in_progress
    assert ctx.heartbeat(a, gen, instance="i-1") == E.unknown_member_id


def test_session_expiry_removes_member_and_rebalances():
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    gen = ctx.group.generation
    for _ in range(2):
        ctx.advance(4000)
        assert ctx.heartbeat(a, gen) == E.none  # b stays silent
    assert b in ctx.group.members
    ctx.advance(2000)  # b's 10 s session is over
    assert b not in ctx.group.members
    assert ctx.group.state is GroupState.PREPARING_REBALANCE
    assert ctx.heartbeat(a, gen) == E.rebalance_in_progress
    h = ctx.join(member_id=a)
    r = ctx.answer(h)
    assert r.generation == gen + 1 and [m for m, _, _ in r.members] == [a]


def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    gen = ctx.group.generation
    ha = ctx.join(member_id=a, protocols=(("range", b"new"),))  # a rejoins with new metadata
    ctx.advance(5000)
    assert ctx.heartbeat(b, gen) == E.rebalance_in_progress  # b keeps heartbeating, never rejoins
    ctx.advance(5000)
    assert ctx.heartbeat(b, gen) == E.rebalance_in_progress
    ctx.advance(20000)  # rebalance timeout (30 s) from the rejoin
    assert ctx.answer(ha).generation == gen + 1
    assert list(ctx.group.members) == [a]


def test_pending_member_id_expires():
    ctx = Ctx()
    mid = ctx.answer(ctx.join()).member_id
    ctx.advance(10000)
    assert mid not in ctx.group.pending


# -- leave ------------------------------------------------------------------------------------------
def test_leave_batched_and_last_member_makes_group_empty():
    ctx = Ctx()
    a, b, c = ctx.stable_group(3)
    gen = ctx.group.generation
    top, codes = ctx.leave((b, None), ("zz", None), (c, None))
    assert top == E.none and codes == [E.none, E.unknown_member_id, E.none]
    assert ctx.group.state is GroupState.PREPARING_REBALANCE
    h = ctx.join(member_id=a)
    assert ctx.answer(h).generation == gen + 1
    ctx.leave((a, None))
    ctx.advance(0)
    assert ctx.group.state is GroupState.EMPTY and ctx.group.generation == gen + 2
    rec = group_records(ctx)[-1]
    assert rec.members == () and rec.generation == gen + 2 and rec.protocol is None
    assert ctx.leave(("a", None), group="nope") == (E.unknown_member_id, [E.unknown_member_id])


def test_leave_answers_parked_join():
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    ha = ctx.join(member_id=a)
    ctx.leave((a, None))
    assert ctx.answer(ha).error == E.unknown_member_id


# -- static membership ---------------------------------------------------------------------------------
def test_static_member_rejoin_replaces_member_id_without_rebalance():
    ctx = Ctx(initial_rebalance_delay_ms=0)
    h1 = ctx.join(instance="i-1", client="s")
    h2 = ctx.join(instance="i-2", client="s")
    ctx.advance(0)
    r1, r2 = ctx.answer(h1), ctx.answer(h2)
    gen = r1.generation
    ctx.sync(r1.member_id, gen, {r1.member_id: b"A", r2.member_id: b"B"}, instance="i-1")
    ctx.sync(r2.member_id, gen, instance="i-2")
    assert ctx.group.state is GroupState.STABLE
    h = ctx.join(instance="i-2", client="s")  # restarted: no member id
    r = ctx.answer(h)
    assert r.error == E.none and r.generation == gen and r.member_id not in (r1.member_id, r2.member_id)
    assert ctx.group.state is GroupState.STABLE
    assert ctx.answer(ctx.sync(r.member_id, gen, instance="i-2")).assignment == b"B"
    assert ctx.heartbeat(r2.member_id, gen, instance="i-2") == E.fenced_instance_id
    assert ctx.answer(ctx.join(member_id=r2.member_id, instance="i-2")).error == E.fenced_instance_id
    assert group_records(ctx)[-1].members[1].member_id == r.member_id  # persisted
    # the static leader rejoining gets the members and skips the assignment
    rl = ctx.answer(ctx.join(instance="i-1", client="s"))
    assert rl.skip_assignment and len(rl.members) == 2 and ctx.group.state is GroupState.STABLE
    # changed protocols: a rebalance
    ctx.join(instance="i-2", client="s", protocols=(("range", b"other"),))
    assert ctx.group.state is GroupState.PREPARING_REBALANCE


def test_static_member_leave_and_fencing():
    ctx = Ctx(initial_rebalance_delay_ms=0)
    h = ctx.join(instance="i-1")
    ctx.advance(0)
    mid = ctx.answer(h).member_id
    assert ctx.leave(("other", "i-1")) == (E.none, [E.fenced_instance_id])
    assert ctx.leave(("", "i-9")) == (E.none, [E.unknown_member_id])
    assert ctx.leave(("", "i-1")) == (E.none, [E.none])
    assert mid not in ctx.group.members


# -- offset commits by members ---------------------------------------------------------------------------
def test_offset_commit_member_validation():
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    gen = ctx.group.generation

    def commit(gen_, member, instance=None):
        return ctx.shard.commit_offsets(G, gen_, member, [CommitRequest("t", 0, 5)], ctx.now, lambda t, p: True,
                                        instance).response[0]

    assert commit(gen, a) == E.none
    assert commit(gen + 1, a) == E.illegal_generation
    assert commit(gen, "zz") == E.unknown_member_id
    assert commit(-1, "") == E.unknown_member_id  # simple commit while the group has members
    assert commit(gen, a, instance="i-1") == E.unknown_member_id
    ctx.join_new()
    assert commit(gen, a) == E.none  # PreparingRebalance: members may still commit
    assert ctx.shard.subscribed_topics(G) == set()  # metadata b"r-meta" is no subscription


def test_subscribed_topics_and_empty_since():
    from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
    from kio.serial import entity_writer
    import io
    buf = io.BytesIO()
    entity_writer(ConsumerProtocolSubscription)(buf, ConsumerProtocolSubscription(topics=("t1", "t2"),
                                                                                  user_data=None))
    meta = b"\x00\x00" + buf.getvalue()
    ctx = Ctx(initial_rebalance_delay_ms=0)
    m, h = ctx.join_new(protocols=(("range", meta),))
    ctx.advance(0)
    assert ctx.shard.subscribed_topics(G) == {"t1", "t2"}
    assert ctx.shard.empty_since(G) is None
    ctx.leave((m, None))
    assert ctx.shard.empty_since(G) == ctx.now and ctx.shard.subscribed_topics(G) == set()


# -- describe / list / delete -------------------------------------------------------------------------------
def test_describe_list_delete():
    ctx = Ctx()
    assert ctx.shard.describe_group(G) is None
    a, b = ctx.stable_group(2)
    d = ctx.shard.describe_group(G)
    assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer" and d["protocol_data"] == "range"
    assert [(m["member_id"], m["member_assignment"]) for m in d["members"]] == [(a, b"a-" + a.encode()),
                                                                              (b, b"a-" + b.encode())]
    ctx.join_new()
    d = ctx.shard.describe_group(G)
    assert d["group_state"] == "PreparingRebalance" and d["members"][0]["member_metadata"] == b""
    ctx.apply(ctx.shard.commit_offsets("simple", -1, "", [CommitRequest("t", 0, 1)], ctx.now, lambda t, p: True))
    assert sorted(ctx.shard.list_groups()) == [(G, "consumer", "PreparingRebalance"), ("simple", "", "Empty")]
    assert ctx.apply(ctx.shard.delete_group(G)) == E.non_empty_group
    assert ctx.apply(ctx.shard.delete_group("nope")) == E.group_id_not_found
    assert ctx.apply(ctx.shard.delete_group("simple")) == E.none
    assert ctx.shard.fetch_offsets("simple", None) == [] and "simple" not in dict(
        (g, 1) for g, _, _ in ctx.shard.list_groups())
    ctx.apply(ctx.shard.commit_offsets(G, ctx.group.generation, a, [CommitRequest("t", 0, 7)], ctx.now,
                                       lambda t, p: True))
    ctx.leave((a, None), (b, None))
    ctx.advance(3000)
    for kid in list(ctx.group.pending):
        ctx.leave((kid, None))
    ctx.advance(30000)
    assert ctx.group.state is GroupState.EMPTY
    assert ctx.apply(ctx.shard.delete_group(G)) == E.none
    assert G not in ctx.shard.groups and ctx.shard.fetch_offsets(G, None) == []
    assert ctx.reload().shard.describe_group(G) is None  # tombstones survive a reload


# -- persistence --------------------------------------------------------------------------------------------
def test_reload_keeps_stable_group_and_members_must_heartbeat():
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    gen = ctx.group.generation
    ctx.reload()
    g = ctx.group
    assert g.state is GroupState.STABLE and g.generation == gen and list(g.members) == [a, b]
    assert g.leader == a and g.protocol == "range" and g.members[b].assignment == b"a-" + b.encode()
    assert ctx.answer(ctx.sync(b, gen)).assignment == b"a-" + b.encode()
    ctx.advance(100)  # timers start counting the sessions
    for _ in range(2):
        ctx.advance(4000)
        assert ctx.heartbeat(a, gen) == E.none
    assert b in ctx.group.members
    ctx.advance(2000)
    assert b not in ctx.group.members and ctx.group.state is GroupState.PREPARING_REBALANCE


def test_reload_of_empty_group_keeps_generation():
    ctx = Ctx(initial_rebalance_delay_ms=0)
    m, h = ctx.join_new()
    ctx.advance(0)
    ctx.leave((m, None))
    gen = ctx.group.generation
    ctx.reload()
    assert ctx.group.state is GroupState.EMPTY and ctx.group.generation == gen
    m2, h2 = ctx.join_new()
    ctx.advance(0)
    assert ctx.answer(h2).generation == gen + 1


# -- property: random operations never break the invariants ----------------------------------------------------
OPS = st.lists(st.one_of(
    st.tuples(st.just("join_new"), st.integers(0, 4)),
    st.tuples(st.just("rejoin"), st.integers(0, 4)),
    st.tuples(st.just("static"), st.integers(0, 2)),
    st.tuples(st.just("sync"), st.integers(0, 4)),
    st.tuples(st.just("heartbeat"), st.integers(0, 4)),
    st.tuples(st.just("leave"), st.integers(0, 4)),
    st.tuples(st.just("time"), st.sampled_from([0, 100, 1000, 3000, 7000, 31000])),
    st.tuples(st.just("rejoin_all"), st.just(0)),
    st.tuples(st.just("leader_sync"), st.just(0)),
), min_size=10, max_size=60)


def _check(ctx: Ctx, last_gen: list[int]) -> None:
    g = ctx.shard.groups.get(G)
    if g is None:
        return
    assert g.generation >= last_gen[0], "generation went backwards"
    last_gen[0] = g.generation
    if g.members:
        assert g.leader in g.members, "leader is not a member"
    else:
        assert g.state in (GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
    if g.state is GroupState.STABLE:
        assert all(m.sync_handle is None and m.join_handle is None for m in g.members.values())
        leader_assigned = {m.member_id for m in g.members.values() if m.assignment}
        assert leader_assigned == set(g.members), "Stable member without an assignment"
    for iid, mid in g.static.items():
        assert g.members[mid].instance_id == iid
    if g.state is GroupState.EMPTY:
        assert not g.members


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_operations_keep_invariants(ops):
    ctx = Ctx(initial_rebalance_delay_ms=500)
    known: list[str] = []
    last_gen = [0]
    for op, arg in ops:
        g = ctx.shard.groups.get(G)
        members = list(g.members) if g else []
        pick = (members + known)[arg % len(members + known)] if members + known else ""
        gen = g.generation if g else 0
        if op == "join_new":
            r = ctx.answer(ctx.join())
            if r is not None and r.error == E.member_id_required:
                known.append(r.member_id)
                ctx.join(member_id=r.member_id)
        elif op == "rejoin" and pick:
            ctx.join(member_id=pick)
        elif op == "static":
            ctx.join(instance=f"i-{arg}")
        elif op == "sync" and pick:
            is_leader = g is not None and pick == g.leader
            ctx.sync(pick, gen, {m: b"x-" + m.encode() for m in members} if is_leader else None)
        elif op == "heartbeat" and pick:
            ctx.heartbeat(pick, gen)
        elif op == "leave" and pick:
            ctx.leave((pick, None))
        elif op == "rejoin_all":
            for m in members:
                ctx.join(member_id=m)
        elif op == "leader_sync" and g is not None and g.leader:
            ctx.sync(g.leader, gen, {m: b"x-" + m.encode() for m in members})
        elif op == "time":
            ctx.advance(arg)
        _check(ctx, last_gen)
        for r in ctx.answers.values():
            assert isinstance(r, (JoinResponse, SyncResponse))
