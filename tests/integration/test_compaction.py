"""Compacted topics: the cleaner keeps the latest value per key, drops tombstones after
delete.retention.ms, refuses null keys; __consumer_offsets reloads after compaction."""

from __future__ import annotations


import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ..rawkafka import RawClient
from ..waiting import wait_until
from .clients import confluent_consume

pytestmark = pytest.mark.integration


def test_compaction_keeps_latest_per_key(fresh_server, topic_name):
    srv = fresh_server("--set", "log.cleaner.backoff.ms=200")
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "1500", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0"})])[topic_name].result(10)
    p = Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 0, "batch.size": 200})
    latest = {}
    for i in range(200):
        key = f"k{i % 10}".encode()
        value = None if (i % 10 == 3 and i > 150) else f"v{i}".encode()
        p.produce(topic_name, key=key, value=value)
        latest[key] = value
        p.poll(0)
    p.flush(10)
    err = {}
    p.produce(topic_name, key=None, value=b"no key", on_delivery=lambda e, m: err.setdefault("e", e))
    p.flush(10)
    assert err["e"] is not None and err["e"].code() == 87  # INVALID_RECORD: compacted topics need keys
    wait_until(lambda: "cleaned" in srv.output(), what="the cleaner's first pass")
    got = confluent_consume(srv.bootstrap, topic_name, 1, 10, timeout=5)
    seen = {}
    for g in got:  # replaying the compacted log gives the latest value for every key
        seen[g.key] = g.value
    assert {k: v for k, v in seen.items() if v is not None} == {k: v for k, v in latest.items() if v is not None}
    assert len(got) < 200, "records were compacted away"
    offsets = [g.offset for g in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_consumer_offsets_reload_after_compaction(fresh_server, topic_name):
    from .test_offsets import CommitPartition, commit_v9, fetch_v9
    srv = fresh_server("--set", "log.cleaner.backoff.ms=200", "--set", "offsets.topic.segment.bytes=4096",
                       "--set", "offsets.topic.num.partitions=1")
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    with RawClient(srv.bootstrap) as c:
        for i in range(300):
            commit_v9(c, "g-compact", topic_name, [CommitPartition(0, i), CommitPartition(1, 2 * i, metadata="x" * 20)])
    wait_until(lambda: "cleaned __consumer_offsets-0" in srv.output(), what="a cleaning of __consumer_offsets-0")
    srv.kill9()
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as c:
        # After a restart the coordinator loads its partition in the background and
        # answers COORDINATOR_LOAD_IN_PROGRESS (14) meanwhile, as Kafka does.
        group = wait_until(lambda: _loaded(fetch_v9(c, "g-compact", topic_name, [0, 1])[0]),
                           what="the offsets coordinator to finish loading")
        assert [p.committed_offset for p in group.topics[0].partitions] == [299, 598]


def _loaded(group):
    """The OffsetFetch answer's group once the coordinator has loaded, else None."""
    return None if group.error_code == 14 else group
