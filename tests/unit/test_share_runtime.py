"""``broker.share_state`` (the share coordinator runtime) in an in-process broker: a failed
append changes nothing, ``flush.messages=1`` waits for the fsync, pruning and reload."""

from __future__ import annotations

import asyncio
import time

import pytest

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic
from hightide.share.records import STATE_TOPIC
from hightide.share.types import ShareStateKey, StateBatch
from tests.waiting import async_wait_until


@pytest.fixture
def env(tmp_path):
    loop = asyncio.new_event_loop()

    def start(**overrides):
        b = Broker(BrokerConfig.load(overrides={"share.coordinator.state.topic.num.partitions": 2, **overrides}),
                   data_dir=str(tmp_path), listen=("127.0.0.1", 0))
        loop.run_until_complete(b.start())
        started.append(b)
        return b
    started: list[Broker] = []
    yield loop, start
    for b in started:
        if b.logs is not None:
            loop.run_until_complete(b.stop())
    loop.close()


def _topic(loop, b: Broker) -> ShareStateKey:
    if "t" not in b.image.topics:
        _, records = b.controller.create_topics(b.image, [NewTopic("t", 1)])
        loop.run_until_complete(b.metadata_writer.commit_metadata(records))
    return ShareStateKey("g", b.image.topics["t"].topic_id, 0)


def test_failed_append_changes_nothing(env, monkeypatch):
    loop, start = env
    b = start()
    key = _topic(loop, b)
    rt = b.share_state
    assert loop.run_until_complete(rt.initialize(key, 0, 0)) == 0
    assert loop.run_until_complete(rt.write(key, 0, 0, 0, 1, (StateBatch(0, 0, 2, 1),))) == 0
    plog = b.hosted.partition_log(STATE_TOPIC, rt.partition_for(key))
    before = plog.log_end_offset

    def broken(*a, **kw):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(plog, "append", broken)
    assert loop.run_until_complete(rt.write(key, 0, 0, 5, 0, ())) == 15  # COORDINATOR_NOT_AVAILABLE
    s = rt.summary(key)
    assert (s.start_offset, s.delivery_complete_count) == (0, 1)  # unchanged
    monkeypatch.undo()
    assert plog.log_end_offset == before


def test_flush_messages_waits_for_fsync(env):
    loop, start = env
    b = start(**{"log.flush.interval.messages": 1})
    key = _topic(loop, b)
    rt = b.share_state
    assert loop.run_until_complete(rt.initialize(key, 0, 0)) == 0
    plog = b.hosted.partition_log(STATE_TOPIC, rt.partition_for(key))
    assert plog.unflushed_messages == 0  # answered only once fsynced
    assert loop.run_until_complete(rt.write(key, 0, 0, 0, 0, (StateBatch(0, 3, 0, 1),))) == 0
    assert plog.unflushed_messages == 0


def test_prune_then_reload(env):
    loop, start = env
    b = start(**{"share.coordinator.snapshot.update.records.per.snapshot": 3})
    key = _topic(loop, b)
    rt = b.share_state
    assert loop.run_until_complete(rt.initialize(key, 0, 0)) == 0
    for i in range(20):
        assert loop.run_until_complete(rt.write(key, 0, 0, i, 1, (StateBatch(i, i, 2, 1),))) == 0
    freed = loop.run_until_complete(rt.prune(int(time.time() * 1000)))
    plog = b.hosted.partition_log(STATE_TOPIC, rt.partition_for(key))
    assert freed == plog.log_start_offset > 0
    before = rt.summary(key)
    loop.run_until_complete(b.stop())
    b2 = start(**{"share.coordinator.snapshot.update.records.per.snapshot": 3})
    loop.run_until_complete(b2.share_state.wait_loaded())
    assert b2.share_state.summary(key) == before
    assert b2.share_state.loaded_records <= 4  # the latest snapshot and at most 3 updates
    assert b2.share_state.keys_for_group("g") == [key]


def test_start_prunes_without_waiting_for_the_interval(env):
    """A broker killed again and again before the prune interval passes must not replay
    more at every start: the first prune runs right after start-up."""
    loop, start = env
    cfg = {"share.coordinator.snapshot.update.records.per.snapshot": 3,
           "share.coordinator.state.topic.prune.interval.ms": 3_600_000}
    b = start(**cfg)
    key = _topic(loop, b)
    rt = b.share_state
    assert loop.run_until_complete(rt.initialize(key, 0, 0)) == 0
    for i in range(20):
        assert loop.run_until_complete(rt.write(key, 0, 0, i, 1, (StateBatch(i, i, 2, 1),))) == 0
    plog = b.hosted.partition_log(STATE_TOPIC, rt.partition_for(key))
    assert plog.log_start_offset == 0  # the interval never passed: nothing pruned yet
    before = rt.summary(key)
    loop.run_until_complete(b.stop())
    b2 = start(**cfg)
    loop.run_until_complete(b2.share_state.wait_loaded())
    assert b2.share_state.loaded_records > 4  # this start still replays everything...
    plog = b2.hosted.partition_log(STATE_TOPIC, b2.share_state.partition_for(key))
    loop.run_until_complete(async_wait_until(lambda: plog.log_start_offset > 0, 5, what="the prune at start-up"))
    assert b2.share_state.summary(key) == before
    loop.run_until_complete(b2.stop())
    b3 = start(**cfg)
    loop.run_until_complete(b3.share_state.wait_loaded())
    assert b3.share_state.loaded_records <= 4 and b3.share_state.summary(key) == before
