"""The share-state RPCs on a real broker: state written with WriteShareGroupState v1 survives
a restart (snapshots + updates replayed from ``__share_group_state``) and reads back through
ReadShareGroupState and ReadShareGroupStateSummary v0/v1."""

from __future__ import annotations

import re

from tests.rawkafka import RawClient
from tests.waiting import wait_until

from .clients import confluent_create_topic


def topic_id(c: RawClient, topic: str):
    r = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    assert r.topics[0].error_code == 0
    return r.topics[0].topic_id


def batch(first, last, state, count):
    return {"first_offset": first, "last_offset": last, "delivery_state": state, "delivery_count": count}


def write(c, group, tid, partition, start, batches, dcc=None, version=1, state_epoch=0, leader_epoch=0):
    part = {"partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
            "state_batches": batches}
    if dcc is not None:
        part["delivery_complete_count"] = dcc
    r = c.request(85, version, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [part]}]})
    return r.results[0].partitions[0]


def initialize(c, group, tid, partition, start, state_epoch=0):
    r = c.request(83, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": partition, "state_epoch": state_epoch, "start_offset": start}]}]})
    return r.results[0].partitions[0]


def read(c, group, tid, partition, leader_epoch=0):
    r = c.request(84, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": partition, "leader_epoch": leader_epoch}]}]})
    return r.results[0].partitions[0]


def summary(c, group, tid, partition, version=1):
    r = c.request(87, version, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": partition, "leader_epoch": 0}]}]})
    return r.results[0].partitions[0]


def test_state_survives_restart(fresh_server, topic_name):
    srv = fresh_server("--set", "share.coordinator.snapshot.update.records.per.snapshot=2")
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    with RawClient(srv.bootstrap) as c:
        tid = topic_id(c, topic_name)
        s = summary(c, "g1", tid, 0)
        assert (s.error_code, s.start_offset, s.delivery_complete_count) == (0, -1, -1)  # uninitialised
        assert write(c, "g1", tid, 0, 0, []).error_code == 42  # INVALID_REQUEST: not initialised
        assert initialize(c, "g1", tid, 0, 0).error_code == 0
        assert initialize(c, "g1", tid, 1, -1).error_code == 0
        # The seed's worked example, written in steps: snapshot, updates, snapshot, update.
        assert write(c, "g1", tid, 0, 0, [batch(0, 1, 4, 1)], dcc=2).error_code == 0
        assert write(c, "g1", tid, 0, 2, [batch(2, 2, 0, 1), batch(3, 3, 0, 2)], dcc=0).error_code == 0
        assert write(c, "g1", tid, 0, 2, [batch(4, 4, 0, 1), batch(5, 5, 2, 1)], dcc=1).error_code == 0
        assert write(c, "g1", tid, 0, 2, [batch(6, 6, 4, 1), batch(7, 9, 0, 0)], dcc=2).error_code == 0
        assert write(c, "g1", tid, 0, 2, [], dcc=2, version=0).error_code == 0  # v0: no DCC, recomputed
        before = read(c, "g1", tid, 0)
    assert srv.stop() == 0
    srv2 = fresh_server("--set", "share.coordinator.snapshot.update.records.per.snapshot=2",
                        data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as c:
        after = read(c, "g1", tid, 0)
        assert after == before
        assert after.error_code == 0 and after.start_offset == 2
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in after.state_batches] == [
            (2, 2, 0, 1), (3, 3, 0, 2), (4, 4, 0, 1), (5, 5, 2, 1), (6, 6, 4, 1), (7, 9, 0, 0)]
        s1 = summary(c, "g1", tid, 0, version=1)
        assert (s1.error_code, s1.start_offset, s1.delivery_complete_count, s1.leader_epoch) == (0, 2, 2, 0)
        s0 = summary(c, "g1", tid, 0, version=0)
        assert (s0.error_code, s0.start_offset) == (0, 2) and not hasattr(s0, "delivery_complete_count")
        s = summary(c, "g1", tid, 1)
        assert (s.start_offset, s.delivery_complete_count) == (-1, -1)
        # fencing and deletion through the RPCs
        assert write(c, "g1", tid, 0, 2, [], state_epoch=0, leader_epoch=-1).error_code == 0
        assert initialize(c, "g1", tid, 0, 5, state_epoch=3).error_code == 0
        assert write(c, "g1", tid, 0, 5, [], state_epoch=2).error_code == 124  # FENCED_STATE_EPOCH
        r = c.request(86, 0, {"group_id": "g1", "topics": [{"topic_id": tid, "partitions": [{"partition": 0}]}]})
        assert r.results[0].partitions[0].error_code == 0
        assert read(c, "g1", tid, 0).error_code == 42
        assert summary(c, "g1", tid, 0).start_offset == -1
        bogus = initialize(c, "g1", tid, 7, 0)
        assert bogus.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert "Traceback" not in srv2.output()
    assert "loaded" in srv2.output() and "share coordinator" in srv2.output()


def test_pruning_keeps_recovery_short(fresh_server, topic_name):
    """60 writes to one share partition with a snapshot every 4 updates: after pruning the
    restart replays only the records from the latest snapshot on, and the state is intact."""
    args = ("--set", "share.coordinator.snapshot.update.records.per.snapshot=4",
            "--set", "share.coordinator.state.topic.prune.interval.ms=200",
            "--set", "share.coordinator.state.topic.num.partitions=1")
    srv = fresh_server(*args)
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    with RawClient(srv.bootstrap) as c:
        tid = topic_id(c, topic_name)
        assert initialize(c, "g", tid, 0, 0).error_code == 0
        for i in range(60):
            assert write(c, "g", tid, 0, i, [batch(i, i, 2, 1), batch(i + 1, i + 1, 0, 1)], dcc=1).error_code == 0
        before = read(c, "g", tid, 0)
        # records: snapshot (init) at 0, then a snapshot every 5th write: 5, 10, ..., 60 (the last write)
        def earliest() -> int:  # the earliest offset moves once the pruner ran after the writes
            r = c.request(2, 1, {"replica_id": -1, "topics": [{"name": "__share_group_state", "partitions": [
                {"partition_index": 0, "timestamp": -2}]}]})
            return r.topics[0].partitions[0].offset
        wait_until(lambda: earliest() >= 60, timeout=10, interval=0.1, what="the pruner to move the earliest offset")
        assert earliest() == 60
    assert srv.stop() == 0
    srv2 = fresh_server(*args, data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as c:
        after = read(c, "g", tid, 0)
        assert after == before and after.start_offset == 59
        assert summary(c, "g", tid, 0).delivery_complete_count == 1
    loaded = [int(m) for m in re.findall(r"loaded (\d+) records \(1 share partitions\)", srv2.output())]
    assert loaded and loaded[-1] == 1  # the latest snapshot only


def test_find_share_coordinator(server, topic_name):
    """FindCoordinator key type SHARE (2, v6): ``group:topicId:partition``."""
    import base64
    confluent_create_topic(server.bootstrap, topic_name, 1)
    with RawClient(server.bootstrap) as c:
        tid = topic_id(c, topic_name)
        key = f"g:{base64.urlsafe_b64encode(tid.bytes).decode().rstrip('=')}:0"
        r = c.request(10, 6, {"key_type": 2, "coordinator_keys": [key, "g:nope", "g:AAAA:x"]})
        good, short, bad = r.coordinators
        assert (good.error_code, good.node_id, good.port) == (0, 1, int(server.bootstrap.split(":")[1]))
        assert short.error_code == 42 and bad.error_code == 42  # INVALID_REQUEST
        r = c.request(10, 5, {"key_type": 2, "coordinator_keys": [key]})
        assert r.coordinators[0].error_code == 42  # SHARE needs v6
