"""``broker.share_groups`` (the IO shell of share group membership) in an in-process
broker whose share coordinator is a gated fake: state initialization before the answer,
heartbeats waiting for another one's initialization, failures retried, settings."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic
from hightide.group.share_group import ShareHeartbeatRequest
from hightide.share.types import ShareGroupSettings, ShareStateKey
from tests.waiting import async_wait_until


class GatedPersister:
    """Initialize waits for ``gate`` (counting its waiters in ``waiting``); answers ``code``;
    records what it was asked."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.code = 0
        self.initialized: list[tuple[ShareStateKey, int, int]] = []
        self.waiting = 0
        self.deleted: list[ShareStateKey] = []

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> int:
        self.waiting += 1
        await self.gate.wait()
        self.waiting -= 1
        self.initialized.append((key, state_epoch, start_offset))
        return self.code

    async def delete(self, key: ShareStateKey) -> int:
        self.deleted.append(key)
        return 0

    def keys_for_group(self, group_id: str) -> list[ShareStateKey]:
        return [k for k, _, _ in self.initialized if k.group_id == group_id]

    def close(self) -> None:
        pass


@pytest.fixture
def env(tmp_path):
    loop = asyncio.new_event_loop()
    b = Broker(BrokerConfig.load(overrides={"offsets.topic.num.partitions": 2}), data_dir=str(tmp_path),
               listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    _, records = b.controller.create_topics(b.image, [NewTopic("t", 2)])
    loop.run_until_complete(b.metadata_writer.commit_metadata(records))
    # the share coordinator replaced by a gated one wherever it is used (as the old
    # broker.share_state lookup did): the persister's local coordinator, the group service's
    # keys; the share partitions do not consult it
    b.share_state = b.share_persister.local = b.share_groups.share_state = GatedPersister()  # type: ignore[assignment]
    b.share_manager.state = None
    yield loop, b
    loop.run_until_complete(b.stop())
    loop.close()


def _join(b: Broker, member: str, group: str = "g"):
    return b.share_groups.heartbeat(ShareHeartbeatRequest(group, member, 0, None, ("t",)), _now())


def _now() -> int:
    return int(time.time() * 1000)


def _parts(resp) -> set[int]:
    return {p for _, ps in resp.assignment or () for p in ps}


def test_join_initializes_before_answering(env) -> None:
    loop, b = env
    resp = loop.run_until_complete(_join(b, "a"))
    tid = b.image.topics["t"].topic_id
    assert _parts(resp) == {0, 1} and resp.to_initialize == {}
    assert sorted((k.partition, e, s) for k, e, s in b.share_state.initialized) == [(0, 1, -1), (1, 1, -1)]
    assert all(k == ShareStateKey("g", tid, k.partition) for k, _, _ in b.share_state.initialized)
    assert b.share_groups.group_state("g") == "Stable" and b.share_groups.is_member("g", "a")
    assert not b.share_groups.is_member("g", "b") and b.share_groups.group_state("nope") is None


def test_concurrent_join_waits_for_the_initialization(env) -> None:
    loop, b = env
    b.share_state.gate.clear()

    async def both():
        first = asyncio.ensure_future(_join(b, "a"))
        await async_wait_until(lambda: b.share_state.waiting, timeout=5, what="a's initialization to be under way (gated)")
        second = asyncio.ensure_future(_join(b, "b"))
        await asyncio.sleep(0.05)  # fixed: that b keeps waiting is an absence, checked over a time span
        assert not second.done()  # b waits for a's initialization instead of answering empty
        b.share_state.gate.set()
        return await first, await second

    a, bb = loop.run_until_complete(both())
    assert len(b.share_state.initialized) == 2  # initialized once, not once per member
    assert _parts(a) | _parts(bb) == {0, 1} and _parts(bb)


def test_failed_initialization_assigns_nothing_then_retries(env) -> None:
    loop, b = env
    b.share_state.code = 5  # COORDINATOR_NOT_AVAILABLE
    resp = loop.run_until_complete(_join(b, "a"))
    assert resp.error_code == 0 and _parts(resp) == set()
    b.share_state.code = 0
    again = loop.run_until_complete(b.share_groups.heartbeat(
        ShareHeartbeatRequest("g", "a", resp.member_epoch), _now()))
    assert _parts(again) == {0, 1}


def test_settings_and_delete_state(env) -> None:
    loop, b = env
    assert b.share_groups.settings("g") == ShareGroupSettings()
    code, _, records = b.controller.alter_group_configs(b.image, "g", [
        ("share.auto.offset.reset", 0, "By_Duration:PT1H"), ("share.delivery.count.limit", 0, "3"),
        ("share.record.lock.duration.ms", 0, "20000")])
    assert code == 0
    loop.run_until_complete(b.metadata_writer.commit_metadata(records))
    s = b.share_groups.settings("g")
    assert (s.auto_offset_reset, s.delivery_count_limit, s.record_lock_duration_ms) == ("by_duration:PT1H", 3, 20000)
    assert b.share_groups.settings("other") == ShareGroupSettings()
    resp = loop.run_until_complete(_join(b, "a"))
    loop.run_until_complete(b.share_groups.heartbeat(ShareHeartbeatRequest("g", "a", -1), _now()))
    assert resp.error_code == 0 and b.share_groups.group_state("g") == "Empty"
    assert loop.run_until_complete(b.share_groups.delete_state("g")) == 0
    assert sorted(k.partition for k in b.share_state.deleted) == [0, 1]
    assert uuid.UUID(int=0) not in {k.topic_id for k in b.share_state.deleted}



def test_leave_frees_the_members_records_and_delete_drops_cached_partitions(env) -> None:
    loop, b = env
    left: list[tuple[str, str]] = []
    invalidated: list[ShareStateKey] = []
    b.share_manager.member_left = lambda g, m: left.append((g, m))
    b.share_manager.invalidate = invalidated.append
    loop.run_until_complete(_join(b, "a"))
    loop.run_until_complete(_join(b, "b"))
    assert left == []
    loop.run_until_complete(b.share_groups.heartbeat(ShareHeartbeatRequest("g", "a", -1), _now()))
    assert left == [("g", "a")]  # at once, not at the share manager's next sweep
    loop.run_until_complete(b.share_groups.heartbeat(ShareHeartbeatRequest("g", "b", -1), _now()))
    assert loop.run_until_complete(b.share_groups.delete_state("g")) == 0
    assert sorted(k.partition for k in invalidated) == [0, 1]
