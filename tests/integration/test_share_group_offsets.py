"""DescribeShareGroupOffsets v0/v1 (Lag), AlterShareGroupOffsets and DeleteShareGroupOffsets
on a real broker. The oracle is share state written directly with WriteShareGroupState, so
the expected lag (LEO − SPSO − DeliveryCompleteCount) is known exactly."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from ..rawkafka import RawClient
from .clients import Rec, confluent_create_topic, confluent_produce
from .test_share_state import batch, topic_id, write


def produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    confluent_produce(bootstrap, topic, [Rec(partition, None, b"v%d" % i, (), 0) for i in range(n)])


def join_and_leave(c: RawClient, group: str, topic: str) -> None:
    """A share group that consumed ``topic`` (its partitions' state initialised) and is now empty."""
    member = str(uuid.uuid4())
    r = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                          "subscribed_topic_names": [topic]})
    assert r.error_code == 0, r.error_message
    r = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": -1, "rack_id": None,
                          "subscribed_topic_names": None})
    assert r.error_code == 0


def describe(c: RawClient, group: str, topics=None, version: int = 1):
    body_topics = None if topics is None else [{"topic_name": t, "partitions": ps} for t, ps in topics]
    r = c.request(90, version, {"groups": [{"group_id": group, "topics": body_topics}]})
    g = r.groups[0]
    assert g.error_code == 0
    return {(t.topic_name, p.partition_index): p for t in g.topics for p in t.partitions}, g


def seed_oracle(c: RawClient, group: str, tid) -> dict[int, int]:
    """Partition 0: the seed's worked example (11 records, SPSO 2, offsets 5 acked and 6
    archived: lag 7). Partition 1: 4 records, SPSO 1, offset 2 acknowledged: lag 2."""
    assert write(c, group, tid, 0, 2, [batch(0, 1, 4, 1), batch(2, 2, 0, 1), batch(3, 3, 0, 2), batch(4, 4, 0, 1),
                                       batch(5, 5, 2, 1), batch(6, 6, 4, 1), batch(7, 9, 0, 0)],
                 dcc=2, state_epoch=-1).error_code == 0
    assert write(c, group, tid, 1, 1, [batch(1, 1, 0, 1), batch(2, 2, 2, 1)], dcc=1, state_epoch=-1).error_code == 0
    return {0: 11 - 2 - 2, 1: 4 - 1 - 1}


def test_describe_lag_matches_the_oracle(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 2)
    produce(server.bootstrap, topic_name, 0, 11)
    produce(server.bootstrap, topic_name, 1, 4)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    with RawClient(server.bootstrap) as c:
        tid = topic_id(c, topic_name)
        join_and_leave(c, group, topic_name)
        parts, _ = describe(c, group)  # initialised, not started: start offset and lag unknown
        assert {k: (p.start_offset, p.lag) for k, p in parts.items()} == {
            (topic_name, 0): (-1, -1), (topic_name, 1): (-1, -1)}
        expected = seed_oracle(c, group, tid)
        parts, g = describe(c, group)
        assert {k[1]: p.lag for k, p in parts.items()} == expected
        assert {k[1]: p.start_offset for k, p in parts.items()} == {0: 2, 1: 1}
        assert g.topics[0].topic_id == tid
        parts0, _ = describe(c, group, version=0)
        assert {k[1]: p.start_offset for k, p in parts0.items()} == {0: 2, 1: 1}
        assert not hasattr(parts0[(topic_name, 0)], "lag")
        # named topics: an unknown topic answers start offset -1; an empty list answers nothing
        parts, g = describe(c, group, [(topic_name, [1]), ("no-such-topic", [0])])
        assert parts[(topic_name, 1)].lag == 2
        assert (parts[("no-such-topic", 0)].start_offset, parts[("no-such-topic", 0)].lag) == (-1, -1)
        assert g.topics[-1].topic_id in (None, uuid.UUID(int=0))  # kio reads the zero uuid as None
        assert describe(c, group, [])[1].topics == ()
        # more records: the lag grows by as many
        produce(server.bootstrap, topic_name, 0, 5)
        assert describe(c, group, [(topic_name, [0])])[0][(topic_name, 0)].lag == expected[0] + 5
        # a group without state has nothing to describe
        assert describe(c, "no-such-group")[1].topics == ()


def test_alter_and_delete(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 2)
    produce(server.bootstrap, topic_name, 0, 11)
    produce(server.bootstrap, topic_name, 1, 4)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    with RawClient(server.bootstrap) as c:
        tid = topic_id(c, topic_name)

        def alter(g, topic, parts):
            return c.request(91, 0, {"group_id": g, "topics": [{"topic_name": topic, "partitions": [
                {"partition_index": p, "start_offset": o} for p, o in parts]}]})

        def delete(g, topics):
            return c.request(92, 0, {"group_id": g, "topics": [{"topic_name": t} for t in topics]})

        assert alter("", topic_name, [(0, 1)]).error_code == ErrorCode.invalid_group_id
        assert alter("no-such-group", topic_name, [(0, 1)]).error_code == ErrorCode.group_id_not_found
        assert delete("no-such-group", [topic_name]).error_code == ErrorCode.group_id_not_found
        member = str(uuid.uuid4())
        r = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                              "subscribed_topic_names": [topic_name]})
        assert r.error_code == 0
        assert alter(group, topic_name, [(0, 1)]).error_code == ErrorCode.non_empty_group
        assert delete(group, [topic_name]).error_code == ErrorCode.non_empty_group
        c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": -1, "rack_id": None,
                          "subscribed_topic_names": None})
        seed_oracle(c, group, tid)
        # alter: partition 0 starts again at 5 (nothing delivered: lag 11 - 5); 9 does not exist
        r = alter(group, topic_name, [(0, 5), (9, 0)])
        assert r.error_code == 0
        assert [(p.partition_index, p.error_code) for p in r.responses[0].partitions] == [
            (0, 0), (9, ErrorCode.unknown_topic_or_partition)]
        assert r.responses[0].topic_id == tid
        r = alter(group, "no-such-topic", [(0, 5)])
        assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        parts, _ = describe(c, group)
        assert (parts[(topic_name, 0)].start_offset, parts[(topic_name, 0)].lag) == (5, 6)
        assert (parts[(topic_name, 1)].start_offset, parts[(topic_name, 1)].lag) == (1, 2)  # untouched
        # delete: the topic's state goes; unknown topics and topics without state are errors
        r = delete(group, [topic_name, "no-such-topic"])
        assert r.error_code == 0
        assert [(t.topic_name, t.error_code) for t in r.responses] == [
            (topic_name, 0), ("no-such-topic", ErrorCode.unknown_topic_or_partition)]
        assert describe(c, group)[1].topics == ()
        r = delete(group, [topic_name])
        assert r.responses[0].error_code == ErrorCode.unknown_topic_or_partition
        assert r.responses[0].error_message == "There is no offset information to delete."
        # the group forgot the topic was initialized: a new member's heartbeat initializes it
        # again before assigning it (uninitialized state, start offset -1, lag unknown)
        member = str(uuid.uuid4())
        r = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                              "subscribed_topic_names": [topic_name]})
        assert r.error_code == 0
        assigned = {p for t in r.assignment.topic_partitions for p in t.partitions}
        assert assigned == {0, 1}
        parts, _ = describe(c, group)
        assert {p: (parts[(topic_name, p)].start_offset, parts[(topic_name, p)].lag) for p in (0, 1)} == {
            0: (-1, -1), 1: (-1, -1)}
