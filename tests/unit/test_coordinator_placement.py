"""Coordinator placement as Kafka's (issue 20 item 5): ``Utils.abs(hashCode) % n`` for
``__consumer_offsets`` (group id) and ``__share_group_state`` ("group:topicId:partition"),
not ``hash & 0x7FFFFFFF``; and share state an older hightide stored in the wrong
``__share_group_state`` partition is moved at start-up, once. (The group migration is
tested end to end in tests/integration/test_group_placement.py.)"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic
from hightide.group.records import java_string_hash, partition_for
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.records import build_batch, validate_batches
from hightide.share import records as share_records
from hightide.share.records import STATE_TOPIC, ShareSnapshotKey, ShareSnapshotValue, coordinator_key
from hightide.share.types import ShareStateKey, StateBatch

N = 50


def test_group_placement_is_kafkas_abs_of_the_java_hash():
    from hightide.group.records import java_abs
    assert java_string_hash("g-cmp-5a109cd5") == -4695597
    assert partition_for("g-cmp-5a109cd5", 50) == 47  # (hash & 0x7FFFFFFF) % 50 would be 1
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50
    assert java_abs(-(1 << 31)) == 0 and java_abs(-5) == 5 and java_abs(5) == 5  # Utils.abs


def test_share_state_placement_is_kafkas_abs_of_the_java_hash():
    text = "sg:AAAAAAAAAAAAAAAAAAAAAA:3"
    h = java_string_hash(text)
    assert share_records.partition_for(text, N) == abs(h) % N


def _misplaced_key(topic_id) -> ShareStateKey:
    """A share partition whose Kafka placement differs from the old ``& 0x7FFFFFFF`` one."""
    for i in itertools.count():
        key = ShareStateKey(f"sg-{i}", topic_id, 0)
        h = java_string_hash(coordinator_key(key.group_id, key.topic_id, key.partition))
        if (h & 0x7FFFFFFF) % N != abs(h) % N:
            return key
    raise AssertionError


@pytest.fixture
def env(tmp_path):
    loop = asyncio.new_event_loop()
    started: list[Broker] = []

    def start() -> Broker:
        b = Broker(BrokerConfig.load(overrides={"share.coordinator.state.topic.num.partitions": N}),
                   data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        loop.run_until_complete(b.start())
        started.append(b)
        return b

    def stop(b: Broker) -> None:
        loop.run_until_complete(b.stop())
        started.remove(b)
    yield loop, start, stop, tmp_path
    for b in started:
        loop.run_until_complete(b.stop())
    loop.close()


def _log_ends(path) -> dict[int, int]:
    ends = {}
    for p in range(N):
        plog = PartitionLog.open(str(path / f"{STATE_TOPIC}-{p}"), LogConfig(), int(time.time() * 1000),
                                 clean_shutdown=True)
        ends[p] = plog.log_end_offset
        plog.close()
    return ends


def test_share_state_in_the_old_partition_is_moved_once(env):
    loop, start, stop, path = env
    b = start()
    _, records = b.controller.create_topics(b.image, [NewTopic("t", 1)])
    loop.run_until_complete(b.metadata_writer.commit_metadata(records))
    key = _misplaced_key(b.image.topics["t"].topic_id)
    other = ShareStateKey("sg-home", key.topic_id, 0)
    assert loop.run_until_complete(b.share_state.initialize(other, 1, 3)) == 0  # creates the topic
    stop(b)
    text = coordinator_key(key.group_id, key.topic_id, key.partition)
    old, home = (java_string_hash(text) & 0x7FFFFFFF) % N, share_records.partition_for(text, N)
    now = int(time.time() * 1000)
    plog = PartitionLog.open(str(path / f"{STATE_TOPIC}-{old}"), LogConfig(), now, clean_shutdown=True)
    value = ShareSnapshotValue(0, 1, 0, 10, now, now, (StateBatch(10, 11, 2, 1),), 2)
    batch = build_batch([(share_records.encode_key(ShareSnapshotKey(key.group_id, key.topic_id, key.partition)),
                          share_records.encode_value(value), [], now)])
    plog.append(batch, validate_batches(batch, client_origin=False), now)  # where the old code put it
    plog.close()

    b = start()
    loop.run_until_complete(b.share_state.wait_loaded())
    s = b.share_state.summary(key)
    assert (s.error_code, s.start_offset, s.delivery_complete_count) == (0, 10, 2)
    assert b.share_state.runtime.shard(home).state(key) is not None
    assert b.share_state.runtime.shard(old).state(key) is None
    assert b.share_state.summary(other).start_offset == 3
    stop(b)
    ends = _log_ends(path)

    b = start()
    loop.run_until_complete(b.share_state.wait_loaded())
    assert b.share_state.summary(key).start_offset == 10
    stop(b)
    assert _log_ends(path) == ends  # nothing moved again
