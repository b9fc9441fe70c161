"""The follower side of replication with real processes (issue 15): an RF=3 partition on
three brokers. The followers' logs equal the leader's byte for byte (batches, offsets,
leader epochs); a follower killed -9 and restarted catches up; an old leader with records
nobody else has (acks=1, its followers stopped) is killed, a new leader is elected in a
new epoch, and the old leader, restarted, truncates its unreplicated tail (DivergingEpoch)
and ends equal to the new leader.
"""

from __future__ import annotations

import time

from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import iter_headers
from tests.waiting import wait_until

from .harness import ClusterHarness
from .replication_calls import TOPIC, call, on_disk, partition_state, produce


def create(c: ClusterHarness, min_isr: int) -> None:
    created = call(c.address(0), 19, 7, {"topics": [
        {"name": TOPIC, "num_partitions": 1, "replication_factor": 3, "assignments": [],
         "configs": [{"name": "min.insync.replicas", "value": str(min_isr)}]}], "timeout": 30_000,
        "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.none, created.topics[0].error_message


def leader_with_isr(c: ClusterHarness, brokers: set[int], isr: set[int]) -> int:
    """Wait until every broker in ``brokers`` sees one live leader and the ISR ``isr``."""
    def same() -> tuple[int] | None:  # a tuple: leader 0 is falsy
        states = [partition_state(c.address(b)) for b in brokers]
        first = states[0]
        if first is None or first[0] < 0 or first[1] != isr or any(s != first for s in states):
            return None
        return (first[0],)
    return int(wait_until(same, 60, what=f"one leader and ISR {sorted(isr)} seen by brokers {sorted(brokers)}")[0])


def replicas_equal(c: ClusterHarness, brokers: set[int], what: str) -> bytes:
    def equal() -> bytes | None:
        copies = {on_disk(c.node(b).spec.data_dir) for b in brokers}
        return copies.pop() if len(copies) == 1 else None
    return bytes(wait_until(equal, 60, what=what))


def test_followers_equal_the_leader_survive_kill_and_truncate_a_diverged_leader(cluster):
    c = cluster(3)
    create(c, min_isr=2)
    everyone = set(c.broker_ids)
    leader = leader_with_isr(c, everyone, everyone)
    lead = c.address(leader)
    for i in range(30):
        assert produce(lead, b"batch-%d" % i * 20, acks=-1)[0] == ErrorCode.none
    data = replicas_equal(c, everyone, "the followers' logs to equal the leader's")
    headers = list(iter_headers(data))
    assert [h.base_offset for h in headers] == list(range(30))
    first_epoch = headers[0].partition_leader_epoch
    assert {h.partition_leader_epoch for h in headers} == {first_epoch}

    # a follower killed -9 misses records, restarts and catches up
    follower, other = sorted(everyone - {leader})
    c.kill(follower)
    for i in range(30, 40):
        code, _ = produce(lead, b"batch-%d" % i * 20, acks=-1, timeout_ms=30_000)
        assert code == ErrorCode.none, code  # the killed follower leaves the ISR once fenced
    c.restart(follower)
    replicas_equal(c, everyone, f"restarted broker {follower} to catch up")
    leader = leader_with_isr(c, everyone, everyone)
    lead = c.address(leader)

    # the leader gets records no follower has, then dies; a follower takes over
    followers = sorted(everyone - {leader})
    for f in followers:
        c.pause(f)
    try:
        # a fetch parked at the leader when the followers stopped could still carry the
        # first new record to them: it is answered within replica.fetch.wait.max.ms (0.5 s)
        time.sleep(1.0)
        for i in range(3):
            assert produce(lead, b"lost-%d" % i, acks=1)[0] == ErrorCode.none
        c.kill(leader)
    finally:
        for f in followers:
            c.resume(f)
    old_leader = leader
    new_leader = leader_with_isr(c, set(followers), set(followers))
    assert new_leader != old_leader
    for i in range(5):
        code, _ = produce(c.address(new_leader), b"after-%d" % i, acks=-1, timeout_ms=30_000)
        assert code == ErrorCode.none, code
    c.restart(old_leader)
    data = replicas_equal(c, everyone, f"old leader {old_leader} to truncate and catch up")
    assert b"lost-" not in data and b"after-4" in data
    epochs = [h.partition_leader_epoch for h in iter_headers(data)]
    assert epochs == sorted(epochs) and epochs[-1] > first_epoch
    assert "truncating to offset" in c.node(old_leader).output()


def test_a_librdkafka_consumer_keeps_its_position_across_a_leader_change(cluster):
    """librdkafka validates its position after a leader epoch change with
    OffsetForLeaderEpoch (KIP-320): the answer from the new leader's epoch cache must not
    look like a truncation, or the consumer resets and reads records again (or skips)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = cluster(3)
    create(c, min_isr=2)
    everyone = set(c.broker_ids)
    leader = leader_with_isr(c, everyone, everyone)
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "position-check", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    try:
        def send(values: range) -> None:
            for i in values:
                producer.produce(TOPIC, b"value-%d" % i, partition=0)
            assert producer.flush(60) == 0

        seen: list[int] = []

        def read_until(n: int) -> None:
            deadline = time.monotonic() + 60
            while len(seen) < n and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    seen.append(m.offset())
            assert len(seen) >= n, f"read {len(seen)} of {n}"

        send(range(50))
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read_until(50)
        c.kill(leader)
        leader_with_isr(c, everyone - {leader}, everyone - {leader})
        send(range(50, 100))
        read_until(100)
        time.sleep(1.0)  # anything read again after a reset would show up now
        while (m := consumer.poll(0.2)) is not None:
            if m.error() is None:
                seen.append(m.offset())
        assert seen == list(range(100))
    finally:
        consumer.close()
