"""KIP-848 consumer groups inside the group coordinator shard: routing of records (key
versions 3–8 next to offsets and classic groups), loading by replay through the byte
format, one protocol per group id, and the offsets and admin APIs for consumer groups."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from hightide.group import consumer_records as CR
from hightide.group.classic import JoinRequest
from hightide.group.consumer_api import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    StaticTopics,
)
from hightide.group.offsets import CommitRequest
from hightide.group.records import GroupKey, GroupValue
from hightide.group.shard import GroupConfig, decode_record, encode_record
from tests.unit.coordinator_context import GroupShardContext

E = ErrorCode
G = "grp"
TOPIC_ID = uuid.UUID(int=7)
TOPICS = StaticTopics({"foo": (TOPIC_ID, 4)})
SESSION_MS = 10_000


class Ctx(GroupShardContext):
    """The shared shard context (call, commit through the codec, replay, fake clock running
    the consumer group timers) with short consumer group timeouts."""

    def __init__(self) -> None:
        super().__init__(GroupConfig(consumer=ConsumerGroupConfig(session_timeout_ms=SESSION_MS,
                                                                  heartbeat_interval_ms=500)))
        self.topics = TOPICS

    # -- requests ---------------------------------------------------------------------
    def heartbeat(self, member_id="", epoch=0, owned=(), group=G, **kw):
        if epoch == 0:
            kw = {"rebalance_timeout_ms": 30_000, "subscribed_topic_names": ("foo",), **kw}
        req = HeartbeatRequest(group, member_id, epoch, topic_partitions=owned, **kw)
        return self.apply(self.shard.consumer_group_heartbeat(req, self.now, TOPICS))

    def join_classic(self, member_id="", group=G) -> object:
        req = JoinRequest(group, member_id, None, "c", "/127.0.0.1", 10_000, 30_000, "consumer",
                          (("range", b""),), require_known_member_id=True)
        self.apply(self.shard.join_group(req, 1, self.now))
        return self.answers.pop(1, None)  # None: parked (the rebalance waits)

    def commit(self, member_id, epoch, api_version=9, group=G):
        commits = [CommitRequest("foo", 0, 42, -1, "")]
        return self.apply(self.shard.commit_offsets(group, epoch, member_id, commits, self.now,
                                                    lambda t, p: True, api_version=api_version))

    def stable_member(self) -> tuple[str, int]:
        """A single member owning all four partitions; (member id, epoch)."""
        r = self.heartbeat()
        assert r.error_code == E.none and r.assignment == ((TOPIC_ID, (0, 1, 2, 3)),)
        return r.member_id, r.member_epoch


def test_consumer_records_route_to_the_consumer_groups():
    ctx = Ctx()
    ctx.stable_member()
    assert ctx.shard.list_consumer_groups() == [(G, "Stable")]
    assert ctx.shard.group_exists(G)
    assert ctx.shard.groups == {} and ctx.shard.list_groups() == []
    assert ctx.shard.describe_group(G) is None  # DescribeGroups: not a classic group
    d = ctx.shard.describe_consumer_group(G, TOPICS)
    assert d["members"][0]["assignment"] == [(TOPIC_ID, "foo", [0, 1, 2, 3])]
    assert {type(decode_record(kb, vb)[0]) for _, kb, vb in ctx.log} >= {
        CR.ConsumerGroupMetadataKey, CR.ConsumerGroupMemberMetadataKey, CR.ConsumerGroupCurrentMemberAssignmentKey}


def test_loading_by_replay_restores_the_group_and_arms_its_timers():
    ctx = Ctx()
    member, epoch = ctx.stable_member()
    assert ctx.commit(member, epoch) == (E.none, {("foo", 0): E.none})
    before = ctx.shard.consumer.get(G).persisted_state()
    shard = ctx.reload()
    group = shard.consumer.get(G)
    assert group.persisted_state() == before
    assert group.next_deadline() == ctx.now + SESSION_MS
    assert shard.fetch_offsets(G, [("foo", 0)])[0].offset == 42
    # the member carries on with its epoch after the reload ...
    assert ctx.heartbeat(member, epoch, owned=None).error_code == E.none
    # ... and is fenced when its session expires
    ctx.advance(SESSION_MS + 1)
    assert ctx.shard.consumer.get(G).members == {}
    assert ctx.shard.list_consumer_groups() == [(G, "Empty")]


def test_heartbeat_for_a_classic_group_with_members_is_group_id_not_found():
    ctx = Ctx()
    first = ctx.join_classic()
    ctx.join_classic(first.member_id)  # parked: the group now has a member
    r = ctx.heartbeat()
    assert r.error_code == E.group_id_not_found
    assert ctx.shard.consumer.get(G) is None


def test_join_for_a_consumer_group_with_members_is_inconsistent_group_protocol():
    ctx = Ctx()
    ctx.stable_member()
    assert ctx.join_classic().error == E.inconsistent_group_protocol
    assert ctx.shard.groups == {}


def test_an_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets():
    ctx = Ctx()
    assert ctx.commit("", -1) == (E.none, {("foo", 0): E.none})  # offsets of a simple group
    empty = GroupValue("consumer", 3, None, None, ctx.now, ())  # and an Empty classic group
    ctx.log.append((len(ctx.log), *encode_record(GroupKey(G), empty)))
    ctx.shard.replay(GroupKey(G), empty)
    assert ctx.shard.list_groups() == [(G, "consumer", "Empty")]
    ctx.stable_member()
    assert decode_record(*ctx.log[2][1:]) == (GroupKey(G), None)  # the classic group's tombstone first
    assert ctx.shard.groups == {} and ctx.shard.list_groups() == []
    shard = ctx.reload()
    assert shard.groups == {} and shard.list_consumer_groups() == [(G, "Stable")]
    assert shard.fetch_offsets(G, [("foo", 0)])[0].offset == 42


def test_an_empty_consumer_group_becomes_a_classic_group():
    ctx = Ctx()
    member, _ = ctx.stable_member()
    ctx.heartbeat(member, -1)
    first = ctx.join_classic()
    assert first.error == E.member_id_required
    ctx.join_classic(first.member_id)
    assert G in ctx.shard.groups
    assert ctx.reload().consumer.get(G) is None


def test_offset_commit_and_fetch_check_the_member_epoch():
    ctx = Ctx()
    member, epoch = ctx.stable_member()
    assert ctx.commit(member, epoch + 1)[0] == E.stale_member_epoch
    assert ctx.commit("nobody", epoch)[0] == E.unknown_member_id
    assert ctx.commit(member, epoch, api_version=8)[0] == E.unsupported_version
    assert ctx.commit("", -1)[0] == E.unknown_member_id  # a simple commit needs an empty group
    assert ctx.shard.validate_fetch(G, member, epoch) == E.none
    assert ctx.shard.validate_fetch(G, member, epoch - 1) == E.stale_member_epoch
    assert ctx.shard.validate_fetch(G, None, -1) == E.none
    assert ctx.shard.validate_fetch("other", "x", 3) == E.none


def test_delete_group_refuses_members_then_tombstones_everything():
    ctx = Ctx()
    member, epoch = ctx.stable_member()
    ctx.commit(member, epoch)
    assert ctx.apply(ctx.shard.delete_group(G)) == E.non_empty_group
    ctx.heartbeat(member, -1)
    assert ctx.shard.list_consumer_groups() == [(G, "Empty")]
    assert ctx.apply(ctx.shard.delete_group(G)) == E.none
    assert not ctx.shard.group_exists(G)
    shard = ctx.reload()
    assert shard.consumer.groups == {} and not shard.group_exists(G)
    assert shard.fetch_offsets(G, [("foo", 0)])[0].offset == -1
