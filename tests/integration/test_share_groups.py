"""Share group membership over the wire (raw requests): ShareGroupHeartbeat/Describe,
ListGroups/DescribeGroups/DeleteGroups for share groups, one id one group type, group
configs on the GROUP resource, and state surviving a restart."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from ..rawkafka import RawClient
from ..waiting import wait_until
from .clients import confluent_create_topic

GROUP_RESOURCE = 32


def _hb(c: RawClient, group: str, member: str, epoch: int, topics: list[str] | None = None, rack: str | None = None):
    return c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": rack,
                             "subscribed_topic_names": topics})


def _parts(resp) -> set[tuple[uuid.UUID, int]]:
    assert resp.assignment is not None
    return {(t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions}


def _describe(c: RawClient, group: str):
    return c.request(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]


def _list(c: RawClient, types: list[str] | None = None, states: list[str] | None = None) -> dict[str, tuple]:
    r = c.request(16, 5, {"states_filter": states or [], "types_filter": types or []})
    assert r.error_code == ErrorCode.none
    return {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in r.groups}


def test_three_members_share_one_partition(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    members = [str(uuid.uuid4()) for _ in range(3)]
    with RawClient(server.bootstrap) as c:
        first = _hb(c, group, members[0], 0, [topic_name])
        assert first.error_code == ErrorCode.none, first.error_message
        assert first.member_epoch >= 1 and first.heartbeat_interval.total_seconds() == 5
        (tid, p), = _parts(first)  # assigned at once (state initialized before the answer)
        assert p == 0
        epochs = {members[0]: first.member_epoch}
        for m in members[1:]:
            r = _hb(c, group, m, 0, [topic_name])
            assert r.error_code == ErrorCode.none
            assert _parts(r) == {(tid, 0)}
            epochs[m] = r.member_epoch
        # the earlier members keep the partition (no revocation in share groups)
        for m in members:
            r = _hb(c, group, m, epochs[m])
            assert r.error_code == ErrorCode.none
            assert r.assignment is None or _parts(r) == {(tid, 0)}
        d = _describe(c, group)
        assert d.error_code == ErrorCode.none and d.group_state == "Stable" and d.assignor_name == "simple"
        assert {m.member_id for m in d.members} == set(members)
        assert all([(t.topic_name, tuple(t.partitions)) for t in m.assignment.topic_partitions] == [(topic_name, (0,))]
                   for m in d.members)
        assert _list(c, ["share"])[group] == ("share", "Stable", "share")
        assert group not in _list(c, ["consumer", "classic"])
        assert _list(c, [], ["empty"]).get(group) is None
        # leave: the group empties, a stale epoch is fenced, an unknown member is refused
        r = _hb(c, group, members[0], epochs[members[0]] + 5)
        assert r.error_code == ErrorCode.fenced_member_epoch
        for m in members:
            r = _hb(c, group, m, -1)
            assert r.error_code == ErrorCode.none and r.member_epoch == -1
        assert _hb(c, group, members[0], 3).error_code == ErrorCode.unknown_member_id
        assert _list(c, ["share"])[group][1] == "Empty"
        # DescribeGroups treats it as not a classic group; DeleteGroups removes it
        dg = c.request(15, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
        assert dg.group_state == "Dead"
        r = c.request(42, 2, {"groups_names": [group]})
        assert r.results[0].error_code == ErrorCode.none
        assert group not in _list(c)
        assert _describe(c, group).error_code == ErrorCode.group_id_not_found


def test_more_partitions_than_members_are_split(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 4)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        ra = _hb(c, group, a, 0, [topic_name])
        assert len(_parts(ra)) == 4
        rb = _hb(c, group, b, 0, [topic_name])
        ra2 = _hb(c, group, a, ra.member_epoch)
        pa, pb = _parts(ra2), _parts(rb)
        assert len(pa) == 2 and len(pb) == 2 and not pa & pb
        r = c.request(42, 2, {"groups_names": [group]})
        assert r.results[0].error_code == ErrorCode.non_empty_group


def test_invalid_requests_and_group_types(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    m = str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        assert _hb(c, group, "", 0, [topic_name]).error_code == ErrorCode.invalid_request
        assert _hb(c, group, m, 0, []).error_code == ErrorCode.invalid_request
        assert _hb(c, group, m, 0, [topic_name], rack="").error_code == ErrorCode.invalid_request
        assert _hb(c, group, m, -2, [topic_name]).error_code == ErrorCode.invalid_request
        assert _hb(c, group, m, 1, [topic_name]).error_code == ErrorCode.group_id_not_found
        assert _hb(c, group, m, 0, [topic_name]).error_code == ErrorCode.none
        # a share group id is not a consumer group, a classic group or an offsets group
        r = c.request(68, 0, {"group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                              "rebalance_timeout": 30000, "subscribed_topic_names": [topic_name],
                              "topic_partitions": []})
        assert r.error_code == ErrorCode.group_id_not_found
        r = c.request(11, 5, {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000,
                              "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}]})
        assert r.error_code == ErrorCode.inconsistent_group_protocol
        r = c.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                             "group_instance_id": None, "topics": [
                                 {"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                      "committed_leader_epoch": -1,
                                                                      "committed_metadata": ""}]}]})
        assert r.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found
        r = c.request(9, 9, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
                             "require_stable": False})
        assert r.groups[0].error_code == ErrorCode.group_id_not_found
        r = c.request(47, 0, {"group_id": group, "topics": [{"name": topic_name, "partitions": [
            {"partition_index": 0}]}]})
        assert r.error_code == ErrorCode.group_id_not_found
        # and a consumer group id cannot become a share group
        cg = f"cg-{uuid.uuid4().hex[:8]}"
        r = c.request(68, 0, {"group_id": cg, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                              "rebalance_timeout": 30000, "subscribed_topic_names": [topic_name],
                              "topic_partitions": []})
        assert r.error_code == ErrorCode.none
        r = _hb(c, cg, m, 0, [topic_name])
        assert r.error_code == ErrorCode.group_id_not_found and "not a share group" in r.error_message
        d = _describe(c, cg)
        assert d.error_code == ErrorCode.group_id_not_found


def _alter(c: RawClient, group: str, configs: dict[str, str | None], op: int = 0):
    return c.request(44, 1, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, v in configs.items()]}], "validate_only": False}
                     ).responses[0]


def _configs(c: RawClient, group: str) -> dict[str, tuple[str, int]]:
    r = c.request(32, 4, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group,
                                         "configuration_keys": None}],
                          "include_synonyms": False, "include_documentation": False}).results[0]
    assert r.error_code == ErrorCode.none, r.error_message
    return {e.name: (e.value, e.config_source) for e in r.configs}


def test_group_configs_validated_and_durable(fresh_server, topic_name):
    srv = fresh_server("--set", "group.share.min.session.timeout.ms=1000",
                       "--set", "group.share.min.heartbeat.interval.ms=500")
    group = f"sg-{uuid.uuid4().hex[:8]}"
    with RawClient(srv.bootstrap) as c:
        before = _configs(c, group)
        assert before["share.auto.offset.reset"] == ("latest", 5)  # DEFAULT_CONFIG
        assert before["share.record.lock.duration.ms"] == ("30000", 5)
        assert _alter(c, group, {"share.auto.offset.reset": "earliest",
                                 "share.session.timeout.ms": "2000",
                                 "share.heartbeat.interval.ms": "500"}).error_code == ErrorCode.none
        bad = [{"share.record.lock.duration.ms": "1000"},  # below group.share.min.record.lock.duration.ms
               {"share.delivery.count.limit": "11"},
               {"share.auto.offset.reset": "sometimes"},
               {"share.heartbeat.interval.ms": "2000"},  # not below the session timeout
               {"no.such.config": "1"}]
        for cfg in bad:
            r = _alter(c, group, cfg)
            assert r.error_code == ErrorCode.invalid_config, (cfg, r)
        assert _alter(c, group, {"share.auto.offset.reset": "by_duration:PT1H"}).error_code == ErrorCode.none
        # group configs drive the members' session timeout and heartbeat interval
        confluent_create_topic(srv.bootstrap, topic_name, 1)
        m = str(uuid.uuid4())
        r = _hb(c, group, m, 0, [topic_name])
        assert r.error_code == ErrorCode.none and r.heartbeat_interval.total_seconds() == 0.5
        wait_until(lambda: _list(c, ["share"])[group][1] == "Empty", timeout=10, interval=0.2,
                   what="the member to be fenced (2 s without heartbeats) and the group Empty")
    srv.stop()
    srv = fresh_server(*srv.args, data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv.bootstrap) as c:
        after = _configs(c, group)
        assert after["share.auto.offset.reset"] == ("by_duration:PT1H", 8)  # GROUP_CONFIG
        assert after["share.session.timeout.ms"] == ("2000", 8)
        # back to the broker default (45 s), still above the group's 500 ms heartbeat interval
        assert _alter(c, group, {"share.session.timeout.ms": None}, op=1).error_code == ErrorCode.none
        assert _configs(c, group)["share.session.timeout.ms"] == ("45000", 5)
        # a session timeout not above the heartbeat interval is refused, also when the interval is the default
        assert _alter(c, group, {"share.heartbeat.interval.ms": None}, op=1).error_code == ErrorCode.none
        assert _alter(c, group, {"share.session.timeout.ms": "5000"}).error_code == ErrorCode.invalid_config


def test_membership_survives_restart(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(srv.bootstrap) as c:
        ra = _hb(c, group, a, 0, [topic_name])
        rb = _hb(c, group, b, 0, [topic_name])
        ra = _hb(c, group, a, ra.member_epoch)
        before = _describe(c, group)
        topic_id = before.members[0].assignment.topic_partitions[0].topic_id
        # give partition 0 some share state, as a share consumer's acknowledgements would
        w = c.request(85, 1, {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": 0, "state_epoch": before.group_epoch, "leader_epoch": 0, "start_offset": 5,
             "delivery_complete_count": 0, "state_batches": []}]}]})
        assert w.results[0].partitions[0].error_code == ErrorCode.none
    srv.stop()
    srv = fresh_server(data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv.bootstrap) as c:
        after = _describe(c, group)
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
            (before.group_state, before.group_epoch, before.assignment_epoch)
        assert {(m.member_id, m.member_epoch, m.assignment) for m in after.members} == \
            {(m.member_id, m.member_epoch, m.assignment) for m in before.members}
        # members carry on with their epochs; the partitions stay initialized: a new member
        # joining does not initialize (reset) their state again
        r = _hb(c, group, b, rb.member_epoch)
        assert r.error_code == ErrorCode.none and r.member_epoch == rb.member_epoch
        assert _hb(c, group, str(uuid.uuid4()), 0, [topic_name]).error_code == ErrorCode.none
        s = c.request(87, 1, {"group_id": group, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})
        assert s.results[0].partitions[0].start_offset == 5


def test_share_consumers_join_and_leave(server, topic_name):
    """Three confluent-kafka ShareConsumers on one partition: all members hold it, every
    record is delivered exactly once, closing leaves the group empty, DeleteGroups works."""
    from confluent_kafka import Producer, ShareConsumer
    confluent_create_topic(server.bootstrap, topic_name, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    with RawClient(server.bootstrap) as c:
        assert _alter(c, group, {"share.auto.offset.reset": "earliest"}).error_code == ErrorCode.none
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(30):
        p.produce(topic_name, f"v{i}".encode())
    assert p.flush(10) == 0
    consumers = [ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group}) for _ in range(3)]
    got: list[bytes] = []
    try:
        for sc in consumers:
            sc.subscribe([topic_name])
        with RawClient(server.bootstrap) as c:
            def all_joined_and_read():  # the polls drive the consumers: no sleep between tries
                for sc in consumers:
                    got.extend(m.value() for m in sc.poll(0.2) if m.error() is None)
                d = _describe(c, group)
                return d if len(d.members) == 3 and len(got) >= 30 else None
            d = wait_until(all_joined_and_read, timeout=30, interval=0,
                           what="3 members in the group and 30 records read")
            assert d.group_state == "Stable"
            assert all([tuple(t.partitions) for t in m.assignment.topic_partitions] == [(0,)] for m in d.members)
    finally:
        for sc in consumers:
            sc.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(30))
    topic_id = d.members[0].assignment.topic_partitions[0].topic_id

    def start_offset(c: RawClient) -> int:
        r = c.request(87, 1, {"group_id": group, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})
        part = r.results[0].partitions[0]
        assert part.error_code == ErrorCode.none, part.error_message
        return part.start_offset

    with RawClient(server.bootstrap) as c:
        assert _list(c, ["share"])[group][1] == "Empty"
        assert start_offset(c) >= 0  # the share partition has state
        assert c.request(42, 2, {"groups_names": [group]}).results[0].error_code == ErrorCode.none
        assert group not in _list(c, ["share"])
        assert start_offset(c) == -1  # DeleteGroups deleted it
