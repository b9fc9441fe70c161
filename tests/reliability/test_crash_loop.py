"""Crash loop: idempotent acks=all producers write to several partitions while the
broker is killed with SIGKILL at random moments and restarted. Every acknowledged
record must be present exactly once, in order, with its offset and timestamp; committed
offsets are never ahead of what was acknowledged and never go backwards."""

from __future__ import annotations

import random
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

KILLS = 20
PARTITIONS = 3


def test_kill9_loop_loses_nothing_acknowledged(fresh_server, topic_name):
    srv = fresh_server()
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])[topic_name].result(10)
    acked: dict[bytes, tuple[int, int, int]] = {}  # value -> (partition, offset, timestamp)
    failed: list = []
    stop = threading.Event()
    lock = threading.Lock()

    def produce():
        p = Producer({"bootstrap.servers": srv.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 2, "message.timeout.ms": 120000, "retry.backoff.ms": 20,
                      "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100, "log_level": 0})
        i = 0

        def cb(err, msg):
            if err:
                failed.append(err)
            else:
                with lock:
                    acked[msg.value()] = (msg.partition(), msg.offset(), msg.timestamp()[1])

        while not stop.is_set():
            try:
                p.produce(topic_name, value=b"r%08d" % i, partition=i % PARTITIONS,
                          timestamp=1_700_000_000_000 + i, on_delivery=cb)
                i += 1
            except BufferError:
                pass
            p.poll(0.001)
        assert p.flush(60) == 0

    commits: list[dict[int, int]] = []

    def commit_progress(c: Consumer):
        # Commit "everything acknowledged so far" per partition, as a consumer would.
        with lock:
            high = {}
            for part, off, _ in acked.values():
                high[part] = max(high.get(part, -1), off + 1)
        if high:
            try:
                c.commit(offsets=[TopicPartition(topic_name, p, o) for p, o in high.items()], asynchronous=False)
                commits.append(high)
            except Exception:
                pass  # the broker may be down right now

    t = threading.Thread(target=produce)
    t.start()
    rnd = random.Random(7)
    recovery = []
    committer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "crash-loop", "enable.auto.commit": False,
                          "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100, "log_level": 0})
    try:
        for _ in range(KILLS):
            time.sleep(rnd.uniform(0.05, 0.4))
            commit_progress(committer)
            srv.kill9()
            t0 = time.monotonic()
            srv = fresh_server(data_dir=srv.data_dir, port=srv.port)
            recovery.append(time.monotonic() - t0)
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(90)
    commit_progress(committer)
    assert not failed, failed[:3]
    assert len(acked) > 100

    # Every acknowledged record exactly once, at its offset, with its timestamp.
    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "crash-loop-check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic_name, p, 0) for p in range(PARTITIONS)])
    seen: dict[bytes, tuple[int, int, int]] = {}
    dups = 0
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert not m.error(), m.error()
            if m.value() in seen:
                dups += 1
            seen[m.value()] = (m.partition(), m.offset(), m.timestamp()[1])
    assert dups == 0
    missing = [v for v in acked if v not in seen]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    assert all(seen[v] == acked[v] for v in acked)
    for p in range(PARTITIONS):  # in order: values increase with offsets within a partition
        values = [v for v, (part, off, _) in sorted(seen.items(), key=lambda kv: kv[1][1]) if part == p]
        assert values == sorted(values)

    # Committed offsets: never ahead of what was acknowledged, never backwards.
    got = committer.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=10)
    ends = {}
    for part, off, _ in acked.values():
        ends[part] = max(ends.get(part, -1), off + 1)
    for tp in got:
        if tp.offset >= 0:
            assert tp.offset <= ends[tp.partition]
            assert tp.offset == max(h.get(tp.partition, -1) for h in commits)
    committer.close()
    c.close()
    print(f"crash loop: {KILLS} kills, {len(acked)} acknowledged records, "
          f"recovery p50 {sorted(recovery)[len(recovery) // 2] * 1000:.0f} ms, max {max(recovery) * 1000:.0f} ms")
