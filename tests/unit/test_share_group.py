"""KIP-932 share groups in the group coordinator shard (sans-IO): the heartbeat state
machine, state initialization, fencing and session expiry, one type per group id,
DeleteGroups, loading by replay through the byte format, and the ``simple`` assignor."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.group import share_assignor
from hightide.group.classic import JoinRequest
from hightide.group.consumer_api import HeartbeatRequest, StaticTopics
from hightide.group.offsets import CommitRequest
from hightide.group.shard import GroupConfig
from tests.unit.coordinator_context import GroupShardContext
from hightide.group.share_group import ShareGroupConfig, ShareHeartbeatRequest, validate

E = ErrorCode
G = "sg"
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
SESSION_MS = 10_000


class Ctx(GroupShardContext):
    """The shared shard context (call, commit through the codec, replay, fake clock running
    the share group timers). ``hb`` also plays the IO shell's part: it initializes what the
    heartbeat asks for and heartbeats again (``init=False``: not)."""

    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]] | None = None, max_size: int = 200) -> None:
        super().__init__(GroupConfig(share=ShareGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                                                            max_size=max_size, initialize_retry_ms=30_000)))
        self.topics = StaticTopics(topics or {"foo": (T1, 1)})
        self.initialized: list[dict] = []

    def hb(self, member: str, epoch: int, topics: tuple[str, ...] | None = None, group: str = G, init: bool = True,
           rack: str | None = None):
        if epoch == 0 and topics is None:
            topics = ("foo",)
        req = ShareHeartbeatRequest(group, member, epoch, rack, topics, "client", "/127.0.0.1")
        assert validate(req) is None
        resp = self.apply(self.shard.share_group_heartbeat(req, self.now, self.topics))
        if init and resp.error_code == E.none and resp.to_initialize:
            self.initialized.append(dict(resp.to_initialize))
            self.apply(self.shard.share_initialized(group, resp.to_initialize, self.topics, True))
            again = self.hb(member, resp.member_epoch, group=group, init=False)
            return again if again.assignment is not None else resp
        return resp

    def group(self, group: str = G):
        return self.shard.share.get(group)


def parts(resp) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in resp.assignment for p in ps}


def test_join_initializes_then_assigns() -> None:
    ctx = Ctx({"foo": (T1, 2)})
    first = ctx.shard.share_group_heartbeat(ShareHeartbeatRequest(G, "a", 0, None, ("foo",)), ctx.now, ctx.topics)
    resp = ctx.apply(first)
    assert resp.error_code == E.none and resp.member_epoch == 1
    assert resp.assignment == () and resp.to_initialize == {T1: frozenset({0, 1})}  # nothing initialized yet
    g = ctx.group()
    assert g.initializing == {T1: frozenset({0, 1})} and not g.initialized
    # a second heartbeat right away does not ask again (an initialization is in flight)
    again = ctx.hb("a", 1, init=False)
    assert again.to_initialize == {}
    ctx.apply(ctx.shard.share_initialized(G, resp.to_initialize, ctx.topics, True))
    assert g.initialized == {T1: frozenset({0, 1})} and not g.initializing
    resp = ctx.hb("a", 1)
    assert resp.member_epoch == 2 and parts(resp) == {(T1, 0), (T1, 1)}
    assert ctx.group().state == "Stable" and ctx.group().assignment_epoch == 2


def test_members_share_a_partition_without_revocation() -> None:
    ctx = Ctx()
    epochs = {}
    for m in "abc":
        r = ctx.hb(m, 0)
        assert parts(r) == {(T1, 0)}, m
        epochs[m] = r.member_epoch
    assert len(ctx.initialized) == 1  # initialized once, for the first member
    for m in "ab":  # the earlier members keep it; their epoch moves on
        r = ctx.hb(m, epochs[m])
        assert r.error_code == E.none and r.member_epoch == ctx.group().group_epoch == 4
        assert r.assignment is None  # unchanged
    d = ctx.shard.describe_share_group(G, ctx.topics)
    assert [m["assignment"] for m in d["members"]] == [[(T1, "foo", [0])]] * 3
    assert d["assignor_name"] == "simple" and d["group_state"] == "Stable"


def test_partitions_split_and_rebalance_on_leave() -> None:
    ctx = Ctx({"foo": (T1, 4)})
    a = ctx.hb("a", 0)
    b = ctx.hb("b", 0)
    a = ctx.hb("a", a.member_epoch)
    assert len(parts(a)) == 2 and len(parts(b)) == 2 and not parts(a) & parts(b)
    left = ctx.hb("b", -1)
    assert left.error_code == E.none and left.member_epoch == -1
    assert "b" not in ctx.group().members
    a = ctx.hb("a", a.member_epoch)
    assert parts(a) == {(T1, p) for p in range(4)}


def test_errors() -> None:
    ctx = Ctx(max_size=2)
    assert ctx.hb("a", 3).error_code == E.group_id_not_found  # no such group
    assert ctx.hb("a", -1).error_code == E.group_id_not_found
    a = ctx.hb("a", 0)
    assert ctx.hb("x", 1).error_code == E.unknown_member_id
    assert ctx.hb("x", -1).error_code == E.unknown_member_id
    assert ctx.hb("a", a.member_epoch + 1).error_code == E.fenced_member_epoch
    assert ctx.hb("a", 0).error_code == E.fenced_member_epoch  # not its previous epoch
    ctx.hb("b", 0)
    assert ctx.hb("c", 0).error_code == E.group_max_size_reached
    # the previous epoch is accepted (the answer with the bump may have been lost)
    a2 = ctx.group().members["a"]
    assert ctx.hb("a", a2.previous_member_epoch).error_code == E.none
    bad = [ShareHeartbeatRequest(G, "", 0, None, ("foo",)), ShareHeartbeatRequest("", "m", 0, None, ("foo",)),
           ShareHeartbeatRequest(G, "m", 0, "", ("foo",)), ShareHeartbeatRequest(G, "m", 0, None, ()),
           ShareHeartbeatRequest(G, "m", -2, None, None)]
    assert all(validate(r).code == E.invalid_request for r in bad)


def test_session_expiry_fences() -> None:
    ctx = Ctx()
    a = ctx.hb("a", 0)
    ctx.now += SESSION_MS // 2
    ctx.hb("b", 0)
    ctx.now += SESSION_MS // 2  # a's session is over, b's is not
    assert ctx.shard.share.next_deadline() <= ctx.now
    ctx.apply(ctx.shard.share_poll(ctx.now, ctx.topics))
    assert set(ctx.group().members) == {"b"}
    assert ctx.hb("a", a.member_epoch).error_code == E.unknown_member_id
    ctx.now += SESSION_MS
    ctx.apply(ctx.shard.share_poll(ctx.now, ctx.topics))
    assert ctx.group().state == "Empty" and ctx.group().group_epoch > 0


def test_reload_from_bytes_keeps_everything() -> None:
    ctx = Ctx({"foo": (T1, 3), "bar": (T2, 1)})
    ctx.hb("a", 0, ("foo", "bar"), rack="r1")
    ctx.hb("b", 0, ("foo",))
    ctx.hb("c", 0, ("bar",))
    ctx.hb("c", -1)
    before = ctx.group().persisted_state()
    ctx.reload()
    assert ctx.group().persisted_state() == before
    assert set(ctx.group().timers) == {"a", "b"}  # timers armed on load
    # members carry on with their epochs and are not asked to initialize again
    r = ctx.hb("b", before["members"]["b"].member_epoch, init=False)
    assert r.error_code == E.none and r.to_initialize == {}


def test_failed_initialization_is_retried() -> None:
    ctx = Ctx()
    resp = ctx.hb("a", 0, init=False)
    ctx.apply(ctx.shard.share_initialized(G, resp.to_initialize, ctx.topics, False))
    assert not ctx.group().initializing and not ctx.group().initialized
    assert ctx.hb("a", resp.member_epoch, init=False).to_initialize == {T1: frozenset({0})}
    # an attempt lost in a restart is retried after the retry interval
    ctx.reload()
    assert ctx.hb("a", resp.member_epoch, init=False).to_initialize == {T1: frozenset({0})}


def test_new_partitions_bump_the_epoch() -> None:
    ctx = Ctx({"foo": (T1, 1)})
    a = ctx.hb("a", 0)
    ctx.topics = StaticTopics({"foo": (T1, 3)})
    a = ctx.hb("a", a.member_epoch)
    assert parts(a) == {(T1, 0), (T1, 1), (T1, 2)}
    assert ctx.initialized[-1] == {T1: frozenset({1, 2})}


def test_one_group_id_one_type() -> None:
    ctx = Ctx({"foo": (T1, 1)})
    ctx.hb("a", 0)
    cg = ctx.apply(ctx.shard.consumer_group_heartbeat(
        HeartbeatRequest(G, "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("foo",),
                         topic_partitions=()), ctx.now, ctx.topics))
    assert cg.error_code == E.group_id_not_found
    join = ctx.shard.join_group(JoinRequest(G, "", None, "c", "h", 10_000, 10_000, "consumer", (("range", b""),)),
                                "h1", ctx.now)
    assert join.completions[0][1].error == E.inconsistent_group_protocol
    r = ctx.shard.commit_offsets(G, -1, "", [CommitRequest("foo", 0, 1)], ctx.now, lambda t, p: True)
    assert r.response[0] == E.group_id_not_found
    assert ctx.shard.validate_fetch(G, None, -1) == E.group_id_not_found
    assert ctx.shard.describe_group(G) is None and ctx.shard.describe_consumer_group(G, ctx.topics) is None
    # and a consumer group (or an offsets-only group) is not a share group
    ctx.apply(ctx.shard.consumer_group_heartbeat(
        HeartbeatRequest("cg", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("foo",),
                         topic_partitions=()), ctx.now, ctx.topics))
    assert ctx.hb("x", 0, group="cg").error_code == E.group_id_not_found
    ctx.apply(ctx.shard.commit_offsets("simple", -1, "", [CommitRequest("foo", 0, 1)], ctx.now, lambda t, p: True))
    assert ctx.hb("x", 0, group="simple").error_code == E.group_id_not_found


def test_delete_group() -> None:
    ctx = Ctx()
    ctx.hb("a", 0)
    assert ctx.shard.delete_group(G).response == E.non_empty_group
    ctx.hb("a", -1)
    assert ctx.shard.list_share_groups() == [(G, "Empty")]
    assert ctx.apply(ctx.shard.delete_group(G)) == E.none
    assert ctx.group() is None and not ctx.shard.group_exists(G)
    ctx.reload()
    assert ctx.group() is None
    assert ctx.hb("a", 0).error_code == E.none  # the id is free again, of any type


# -- the simple assignor ------------------------------------------------------------------
def _holders(result, topic) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for m, a in result.items():
        for p in a.get(topic, ()):
            out.setdefault(p, set()).add(m)
    return out


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.data())
def test_simple_assignor_fresh(members: int, partitions: int, data) -> None:
    specs = {f"m{i}": share_assignor.ShareMemberSpec(frozenset({T1})) for i in range(members)}
    out = share_assignor.assign(specs, {T1: frozenset(range(partitions))})
    sharing = -(-members // partitions)
    holders = _holders(out, T1)
    assert set(holders) == set(range(partitions))
    assert all(len(h) == sharing for h in holders.values())
    sizes = [len(a.get(T1, ())) for a in out.values()]
    assert max(sizes) - min(sizes) <= 1
    assert out == share_assignor.assign(dict(reversed(list(specs.items()))), {T1: frozenset(range(partitions))})


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_simple_assignor_any_current_assignment(data) -> None:
    topics = {T1: data.draw(st.integers(1, 5)), T2: data.draw(st.integers(1, 5))}
    names = [f"m{i}" for i in range(data.draw(st.integers(1, 7)))]
    specs = {}
    for m in names:
        subs = frozenset(data.draw(st.sets(st.sampled_from([T1, T2]), min_size=1)))
        current = {t: frozenset(data.draw(st.sets(st.integers(0, 6), max_size=4))) for t in [T1, T2]}
        specs[m] = share_assignor.ShareMemberSpec(subs, current)
    assignable = {t: frozenset(range(n)) for t, n in topics.items()}
    out = share_assignor.assign(specs, assignable)
    for t, n in topics.items():
        subscribers = {m for m, s in specs.items() if t in s.subscribed_topic_ids}
        holders = _holders(out, t)
        if subscribers:  # every partition held, only by subscribers
            assert set(holders) == set(range(n))
            assert all(h and h <= subscribers for h in holders.values())
        else:
            assert not holders


def test_simple_assignor_is_sticky() -> None:
    specs = {m: share_assignor.ShareMemberSpec(frozenset({T1})) for m in ("a", "b")}
    first = share_assignor.assign(specs, {T1: frozenset(range(6))})
    specs = {m: share_assignor.ShareMemberSpec(frozenset({T1}), first[m]) for m in ("a", "b")}
    specs["c"] = share_assignor.ShareMemberSpec(frozenset({T1}))
    second = share_assignor.assign(specs, {T1: frozenset(range(6))})
    assert second["a"][T1] <= first["a"][T1] and second["b"][T1] <= first["b"][T1]  # only moves to the newcomer
    assert [len(second[m][T1]) for m in "abc"] == [2, 2, 2]


def test_deleted_state_is_initialized_again() -> None:
    ctx = Ctx({"foo": (T1, 2)})
    a = ctx.hb("a", 0)
    ctx.hb("a", -1)
    ctx.apply(ctx.shard.share_state_deleted(G, [T1], ctx.topics))
    assert not ctx.group().initialized
    assert ctx.shard.share_state_deleted(G, [T2], ctx.topics).records == []  # nothing known about T2
    ctx.reload()
    a = ctx.hb("a", 0)
    assert ctx.initialized[-1] == {T1: frozenset({0, 1})} and parts(a) == {(T1, 0), (T1, 1)}


def test_deleted_topic_is_forgotten_and_a_recreated_one_initialized() -> None:
    ctx = Ctx({"foo": (T1, 1)})
    a = ctx.hb("a", 0)
    assert parts(a) == {(T1, 0)}
    ctx.topics = StaticTopics({"foo": (T2, 2)})  # deleted and created again: a new topic id
    a = ctx.hb("a", a.member_epoch)
    assert parts(a) == {(T2, 0), (T2, 1)}
    assert ctx.group().initialized == {T2: frozenset({0, 1})}  # T1 forgotten
    ctx.topics = StaticTopics({})
    a = ctx.hb("a", a.member_epoch)
    assert parts(a) == set() and ctx.group().initialized == {}
