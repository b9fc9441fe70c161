"""The base both KIP-848 consumer groups and KIP-932 share groups stand on
(:mod:`hightide.group.modern_group`), driven the same way for both kinds: replay of the
shared record family (through the byte format), fencing on session expiry, tombstones,
timers after a load, capacity, and the container's routing rules."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.group.consumer_api import HeartbeatRequest, Result, StaticTopics, Timers, TimersKey
from hightide.group.consumer_group import ConsumerGroupConfig, ConsumerGroups
from hightide.group.modern_group import ModernGroup, ModernGroups, from_wire, to_wire
from hightide.group.shard import decode_record, encode_record
from hightide.group.share_group import ShareGroupConfig, ShareGroups, ShareHeartbeatRequest, ShareTimersKey

G = "g"
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
SESSION_MS = 10_000
TOPICS = StaticTopics({"foo": (T1, 3), "bar": (T2, 2)})


class Driver:
    """Heartbeats one kind of group, writes the records through the byte codec (as the
    runtime appends them) and replays them, then the live records."""

    kind: str

    def __init__(self, max_size: int = 100) -> None:
        self.groups: ModernGroups = self.new_groups(max_size)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.now = 1_000
        self.epochs: dict[str, int] = {}

    def new_groups(self, max_size: int) -> ModernGroups:
        raise NotImplementedError

    def request(self, member: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
        raise NotImplementedError

    def apply(self, result: Result) -> Any:
        for k, v in result.records:
            kb, vb = encode_record(k, v)
            self.log.append((kb, vb))
            decoded = decode_record(kb, vb)
            assert decoded == (k, v)
            self.groups.replay(*decoded)
        for k, v in result.live:
            self.groups.replay(k, v)
        return result.response

    def group(self) -> ModernGroup:
        return self.groups.get_or_new(G)

    def hb(self, member: str, topics: tuple[str, ...] | None = None) -> Any:
        epoch = self.epochs.get(member, 0)
        if epoch == 0 and topics is None:
            topics = ("foo",)
        resp = self.apply(self.group().heartbeat(self.request(member, epoch, topics), self.now, TOPICS))
        if resp.error_code == ErrorCode.none:
            self.epochs[member] = resp.member_epoch
        return resp

    def leave(self, member: str) -> Any:
        resp = self.apply(self.group().heartbeat(self.request(member, -1, None), self.now, TOPICS))
        self.epochs.pop(member, None)
        return resp

    def reloaded(self) -> ModernGroups:
        fresh = self.new_groups(100)
        for kb, vb in self.log:
            record = decode_record(kb, vb)
            assert record is not None
            fresh.replay(*record)
        return fresh


class ConsumerDriver(Driver):
    kind = "consumer"

    def new_groups(self, max_size: int) -> ModernGroups:
        ids = (f"m{i}" for i in itertools.count())
        return ConsumerGroups(ConsumerGroupConfig(session_timeout_ms=SESSION_MS, max_size=max_size), lambda: next(ids))

    def request(self, member: str, epoch: int, topics: tuple[str, ...] | None) -> HeartbeatRequest:
        """A well-behaved client: it reports what it was given as owned (revocations done)."""
        current = self.group().members.get(member)
        owned = to_wire(current.assigned) if current is not None and epoch > 0 else ()
        return HeartbeatRequest(G, member, epoch, rebalance_timeout_ms=5_000 if epoch == 0 else -1,
                                subscribed_topic_names=topics, topic_partitions=owned,
                                client_id="client", client_host="/127.0.0.1", api_version=1)


class ShareDriver(Driver):
    kind = "share"

    def new_groups(self, max_size: int) -> ModernGroups:
        return ShareGroups(ShareGroupConfig(session_timeout_ms=SESSION_MS, max_size=max_size))

    def request(self, member: str, epoch: int, topics: tuple[str, ...] | None) -> ShareHeartbeatRequest:
        return ShareHeartbeatRequest(G, member, epoch, None, topics, "client", "/127.0.0.1")

    def hb(self, member: str, topics: tuple[str, ...] | None = None) -> Any:
        """Also plays the IO shell: initializes the share partitions the heartbeat asks for."""
        resp = super().hb(member, topics)
        if resp.error_code == ErrorCode.none and resp.to_initialize:
            self.apply(self.group().initialized_result(resp.to_initialize, TOPICS))
        return resp


DRIVERS = [ConsumerDriver, ShareDriver]


@pytest.fixture(params=DRIVERS, ids=lambda d: d.kind)
def drv(request: pytest.FixtureRequest) -> Driver:
    return request.param()


def test_members_epochs_and_targets_replay_from_the_records(drv: Driver) -> None:
    for m in ("a", "b", "c"):
        drv.hb(m)
    for m in ("a", "b", "c") * 3:  # settle: revocations acknowledged, every member at the target epoch
        drv.hb(m)
    g = drv.group()
    assert sorted(g.members) == ["a", "b", "c"] and g.group_epoch >= 3
    assert g.assignment_epoch == g.group_epoch
    assert all(m.member_epoch == g.group_epoch for m in g.members.values())
    assigned = [p for m in g.members.values() for ps in m.assigned.values() for p in ps]
    assert len(assigned) == len(set(assigned)) == 3  # foo's 3 partitions, one member each
    assert drv.reloaded().get(G).persisted_state() == g.persisted_state()


def test_leave_tombstones_the_member_and_bumps_the_epoch_once(drv: Driver) -> None:
    drv.hb("a"), drv.hb("b")
    epoch = drv.group().group_epoch
    drv.leave("a")
    g = drv.group()
    assert sorted(g.members) == ["b"] and "a" not in g.timers and "a" not in g.targets
    assert g.group_epoch == epoch + 1
    assert drv.reloaded().get(G).persisted_state() == g.persisted_state()


def test_poll_fences_expired_members_in_id_order_one_epoch_bump_each(drv: Driver) -> None:
    for m in ("c", "a", "b"):
        drv.hb(m)
    g = drv.group()
    epoch = g.group_epoch
    assert g.next_deadline() == drv.now + SESSION_MS
    assert g.poll(drv.now + SESSION_MS - 1, TOPICS) == Result()
    result = g.poll(drv.now + SESSION_MS, TOPICS)
    fenced = [k.member_id for k, v in result.records if v is None and type(k) is g.RECORDS.member]
    bumps = [v.epoch for k, v in result.records if type(k) is g.RECORDS.group]
    assert fenced == ["a", "b", "c"] and bumps == [epoch + 1, epoch + 2, epoch + 3]
    assert sorted(k.member_id for k, v in result.live if v is None) == ["a", "b", "c"]
    assert g.members and g.group_epoch == epoch  # poll only proposes
    drv.apply(result)
    g = drv.group()
    assert not g.members and not g.timers and g.next_deadline() is None and g.state == "Empty"
    assert drv.reloaded().get(G).persisted_state() == g.persisted_state()


def test_tombstones_in_kafka_order_and_replaying_them_drops_the_group(drv: Driver) -> None:
    drv.hb("a"), drv.hb("b")
    g = drv.group()
    records = g.tombstones()
    r = g.RECORDS
    assert all(v is None for _, v in records)
    assert [type(k) for k, _ in records] == [r.assignment] * 2 + [r.target_member] * 2 + [r.target_epoch] + \
        [r.member] * 2 + [r.subscription, r.group]
    drv.apply(Result(records=records))
    assert drv.groups.get(G) is None and drv.reloaded().get(G) is None


def test_loaded_timers_arm_every_member(drv: Driver) -> None:
    drv.hb("b"), drv.hb("a")
    loaded = drv.reloaded().get(G)
    assert loaded.timers == {}
    live = loaded.loaded_timers(50_000).live
    assert [(k.member_id, v.session_deadline_ms) for k, v in live] == [("a", 60_000), ("b", 60_000)]
    assert all(type(k) is loaded.RECORDS.timers for k, _ in live)
    assert [v.session_deadline_ms for _, v in loaded.loaded_timers(50_000, 1_000).live] == [51_000, 51_000]


def test_a_full_group_refuses_a_new_member_with_kafkas_message(drv: Driver) -> None:
    drv.groups = drv.new_groups(max_size=1)
    drv.hb("a")
    resp = drv.hb("b")
    assert resp.error_code == ErrorCode.group_max_size_reached
    assert resp.error_message == f"The {drv.kind} group has reached its maximum capacity of 1 members."
    assert drv.hb("a").error_code == ErrorCode.none  # an existing member still heartbeats


def test_describe_has_the_shared_fields(drv: Driver) -> None:
    drv.hb("a"), drv.hb("a")
    d = drv.group().describe(TOPICS)
    assert d["group_id"] == G and d["group_epoch"] == d["assignment_epoch"] == drv.group().group_epoch
    (m,) = d["members"]
    assert {k: m[k] for k in ("member_id", "client_id", "client_host", "subscribed_topic_names")} == \
        {"member_id": "a", "client_id": "client", "client_host": "/127.0.0.1", "subscribed_topic_names": ["foo"]}
    assert sorted(p for _, name, ps in m["assignment"] for p in ps) == [0, 1, 2]


@pytest.mark.parametrize(("groups", "timers_key"), [(ConsumerGroups, TimersKey), (ShareGroups, ShareTimersKey)],
                         ids=["consumer", "share"])
def test_a_cancelled_timer_of_an_unknown_group_does_not_create_it(groups: type, timers_key: type) -> None:
    c = groups()
    c.replay(timers_key("nope", "m"), None)
    assert c.get("nope") is None and c.next_deadline() is None
    c.replay(c.RECORDS.group("nope"), None)
    assert c.get("nope") is None


def test_next_deadline_counts_a_rebalance_deadline() -> None:
    c = ConsumerGroups()
    c.replay(TimersKey(G, "m"), Timers(500, 200, 1))
    c.replay(TimersKey("h", "m"), Timers(300))
    assert c.get(G).next_deadline() == 200 and c.next_deadline() == 200


assignments = st.dictionaries(st.uuids(), st.frozensets(st.integers(0, 2**31 - 1), min_size=1, max_size=6),
                              max_size=5)


@given(assignments)
@settings(max_examples=50)
def test_to_wire_is_sorted_and_from_wire_inverts_it(a: dict) -> None:
    wire = to_wire(a)
    assert [t for t, _ in wire] == sorted(a, key=lambda t: t.bytes)
    assert all(list(ps) == sorted(ps) for _, ps in wire)
    assert from_wire(wire) == a
    assert from_wire(list(wire) + [(t, ()) for t in a]) == a  # repeats merge, empty topics drop


def test_unknown_members_and_wrong_epochs_get_kafkas_errors(drv: Driver) -> None:
    drv.hb("a")
    epoch = drv.epochs["a"]
    drv.epochs["ghost"] = 3
    resp = drv.hb("ghost")
    assert (resp.error_code, resp.error_message) == (ErrorCode.unknown_member_id, f"Member ghost is not a member "
                                                                                  f"of group {G}.")
    drv.epochs["a"] = epoch + 5
    resp = drv.hb("a")
    assert resp.error_code == ErrorCode.fenced_member_epoch
    assert resp.error_message == (f"The {drv.kind} group member has a greater member epoch ({epoch + 5}) than the "
                                  f"one known by the group coordinator ({epoch}). The member must abandon all its "
                                  "partitions and rejoin.")
    drv.epochs["a"] = epoch
    assert drv.hb("a").error_code == ErrorCode.none
    resp = drv.leave("ghost")
    assert resp.error_code == ErrorCode.unknown_member_id and "ghost" not in drv.reloaded().get(G).members


ops = st.lists(st.tuples(st.sampled_from(["hb", "sub", "leave", "expire"]), st.sampled_from(["a", "b", "c", "d"])),
               min_size=1, max_size=25)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.kind)
@given(steps=ops)
@settings(max_examples=40, deadline=None)
def test_any_sequence_reloads_to_the_same_state_and_keeps_the_invariants(driver: type, steps: list) -> None:
    drv = driver()
    for op, member in steps:
        if op == "hb":
            drv.hb(member)
        elif op == "sub" and member in drv.epochs:
            drv.hb(member, ("foo", "bar"))
        elif op == "leave" and member in drv.epochs:
            drv.leave(member)
        elif op == "expire":
            drv.now += SESSION_MS
            drv.apply(drv.group().poll(drv.now, TOPICS))
            drv.epochs = {m: e for m, e in drv.epochs.items() if m in drv.group().members}
        g = drv.groups.get(G)
        if g is None:
            continue
        assert g.assignment_epoch <= g.group_epoch
        assert all(m.member_epoch <= g.assignment_epoch for m in g.members.values())
        assert set(g.timers) <= set(g.members) and set(g.targets) <= set(g.members)
        reloaded = drv.reloaded().get(G)
        assert reloaded is not None and reloaded.persisted_state() == g.persisted_state()
