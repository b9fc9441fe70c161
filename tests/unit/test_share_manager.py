"""The share-partition manager (IO shell) over a real partition log and an in-memory
persister: lazy initialisation by share.auto.offset.reset, acknowledgements answered only
once durable, coalesced writes, a failed write undoing what was not persisted, control
batches never handed out, lock expiry persisted."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import pytest

from hightide.config import BrokerConfig
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.records import build_batch, validate_batches
from hightide.coordinator.share_partitions import SharePartitionManager
from hightide.aio.waiters import AppendWaiters
from hightide.share.partition import AckBatch
from hightide.share.types import (
    RecordState,
    ShareGroupSettings,
    ShareState,
    ShareStateKey,
)
from tests.waiting import async_wait_until

TID = uuid.uuid4()
KEY = ShareStateKey("g", TID, 0)


class MemoryPersister:
    """SharePersister in memory; ``fail_next`` makes the next write fail."""

    def __init__(self) -> None:
        self.states: dict[ShareStateKey, ShareState] = {}
        self.writes: list[ShareState] = []
        self.fail_next = False

    async def initialize(self, key, state_epoch, start_offset):
        await asyncio.sleep(0)
        self.states[key] = ShareState(state_epoch=state_epoch, leader_epoch=0, start_offset=start_offset,
                                      delivery_complete_count=0)
        return 0

    async def read(self, key, leader_epoch=-1):
        await asyncio.sleep(0)
        return self.states.get(key) or ShareState(error_code=42, error_message="uninitialized")

    async def write(self, key, state_epoch, leader_epoch, start_offset, delivery_complete_count, state_batches):
        await asyncio.sleep(0.01)  # the append + replay take a while: acks pile up meanwhile
        if self.fail_next:
            self.fail_next = False
            return 15  # COORDINATOR_NOT_AVAILABLE
        st = ShareState(state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                        delivery_complete_count=delivery_complete_count, state_batches=tuple(state_batches))
        self.states[key] = st
        self.writes.append(st)
        return 0

    async def read_summary(self, key, leader_epoch=-1):
        return await self.read(key)

    async def delete(self, key):
        self.states.pop(key, None)
        return 0


class FakeBroker:
    def __init__(self, plog: PartitionLog, settings: ShareGroupSettings) -> None:
        self.config = BrokerConfig()
        self.waiters = AppendWaiters()
        self.share_state = MemoryPersister()
        self.stopping = False
        self._plog = plog
        self._settings = settings
        self.share_groups = self
        self.members: set[str] | None = None  # None: everyone is a member

    def partition_log(self, topic, partition):
        return self._plog if (topic, partition) == ("t", 0) else None

    def settings(self, group_id):
        return self._settings

    def is_member(self, group_id, member_id):
        return self.members is None or member_id in self.members


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=True)
    yield log
    log.close()


def append(plog: PartitionLog, n: int, control: bool = False) -> None:
    batch = build_batch([(None, b"v" * 20, [], int(time.time() * 1000)) for _ in range(n)], is_control=control)
    plog.append(batch, validate_batches(batch, client_origin=False), 0)


def make(plog, **kw) -> tuple[FakeBroker, SharePartitionManager]:
    b = FakeBroker(plog, ShareGroupSettings(**kw))
    return b, SharePartitionManager(max_sessions=b.config["group.share.max.share.sessions"], node_id=0,
                                    partition_log=b.partition_log, wake=b.waiters.wake, groups=b,
                                    persister=b.share_state)


async def _load(m: SharePartitionManager) -> None:
    assert await m.prepare(KEY, "t") == (0, None)


def test_initialises_by_auto_offset_reset(plog):
    async def main():
        append(plog, 5)
        b, m = make(plog)  # latest
        await _load(m)
        assert b.share_state.states[KEY].start_offset == 5 and m.cached(KEY).start_offset == 5
        b, m = make(plog, auto_offset_reset="earliest")
        await _load(m)
        assert m.cached(KEY).start_offset == 0
        b, m = make(plog, auto_offset_reset="by_duration:PT1H")
        await _load(m)
        assert m.cached(KEY).start_offset == 0  # every record is younger than an hour
    asyncio.run(main())


def test_acks_are_durable_before_the_answer_and_coalesced(plog):
    async def main():
        for _ in range(8):
            append(plog, 10)
        b, m = make(plog, auto_offset_reset="earliest")
        await _load(m)
        members = [f"m{i}" for i in range(8)]
        got = {mm: m.acquire(KEY, mm, 10, 1 << 20).acquired for mm in members}
        assert all(len(g) == 1 for g in got.values())

        async def ack(mm):
            a = got[mm][0]
            code, _ = await m.acknowledge(KEY, "t", mm, [AckBatch(a.first_offset, a.last_offset, (1,))])
            # answered only once a write covering this ack is in the persister
            st = b.share_state.states[KEY]
            covered = st.start_offset > a.last_offset or any(
                s.first_offset <= a.first_offset and a.last_offset <= s.last_offset and s.delivery_state == 2
                for s in st.state_batches)
            return code, covered

        res = await asyncio.gather(*(ack(mm) for mm in members))
        assert res == [(0, True)] * 8
        assert len(b.share_state.writes) < 8  # group commit: concurrent acks share writes
        assert b.share_state.states[KEY].start_offset == 80
    asyncio.run(main())


def test_failed_write_undoes_what_was_not_persisted(plog):
    async def main():
        append(plog, 10)
        b, m = make(plog, auto_offset_reset="earliest")
        await _load(m)
        a = m.acquire(KEY, "m1", 100, 1 << 20).acquired
        assert [(x.first_offset, x.last_offset, x.delivery_count) for x in a] == [(0, 9, 1)]
        b.share_state.fail_next = True
        code, _ = await m.acknowledge(KEY, "t", "m1", [AckBatch(0, 9, (1,))])
        assert code == 15
        assert m.cached(KEY) is None  # dropped: the next use reads the persisted state again
        await _load(m)
        again = m.acquire(KEY, "m2", 100, 1 << 20).acquired
        assert [(x.first_offset, x.last_offset) for x in again] == [(0, 9)]  # at-least-once: delivered again
    asyncio.run(main())


def test_control_batches_skipped_and_lock_expiry_persisted(plog):
    async def main():
        append(plog, 3)
        append(plog, 1, control=True)
        append(plog, 2)
        b, m = make(plog, auto_offset_reset="earliest", record_lock_duration_ms=1000)
        await _load(m)
        r = m.acquire(KEY, "m1", 100, 1 << 20, now_ms=0)
        assert [(x.first_offset, x.last_offset) for x in r.acquired] == [(0, 2), (4, 5)]
        assert r.size == plog.size_bytes  # the stored batches, control batch included, as they are
        assert m.cached(KEY).state_at(3)[0] == RecordState.ARCHIVED
        assert m.expire_locks(999) == 0
        assert m.expire_locks(1000) == 1
        await async_wait_until(lambda: b.share_state.writes, timeout=5, interval=0.01, what="a share state write")
        st = b.share_state.writes[-1]
        assert st.start_offset == 0 and st.delivery_complete_count == 1
        assert {(s.first_offset, s.last_offset, s.delivery_state, s.delivery_count) for s in st.state_batches} == {
            (0, 2, 0, 1), (3, 3, 4, 0), (4, 5, 0, 1)}
    asyncio.run(main())


def test_invalidate_rereads_state(plog):
    async def main():
        append(plog, 10)
        b, m = make(plog, auto_offset_reset="earliest")
        await _load(m)
        b.share_state.states[KEY] = replace(b.share_state.states[KEY], start_offset=7)  # AlterShareGroupOffsets
        m.invalidate(KEY)
        await _load(m)
        assert m.cached(KEY).start_offset == 7
        assert [(x.first_offset, x.last_offset) for x in m.acquire(KEY, "m", 100, 1 << 20).acquired] == [(7, 9)]
    asyncio.run(main())


def test_records_of_departed_members_are_released(plog):
    async def main():
        append(plog, 10)
        b, m = make(plog, auto_offset_reset="earliest")
        await _load(m)
        m.sessions.fetch_context("g", "gone", 0, [(TID, 0)], [], False, 0)
        m.sessions.fetch_context("g", "idle", 0, [(TID, 0)], [], False, 0)
        assert m.acquire(KEY, "gone", 5, 1 << 20).acquired
        assert m.release_departed() == 0
        b.members = {"other"}
        assert m.release_departed() == 1
        # their sessions wait for the clients' final requests (tests/unit/test_share_session_close.py)
        assert m.sessions.get("g", "gone").departed_ms is not None
        assert m.sessions.get("g", "idle").departed_ms is not None
        got = m.acquire(KEY, "other", 100, 1 << 20).acquired
        assert [(x.first_offset, x.last_offset, x.delivery_count) for x in got] == [(0, 9, 2)]
    asyncio.run(main())


class SummaryOnly:
    """The local share coordinator's synchronous summary, from a MemoryPersister."""

    def __init__(self, persister: MemoryPersister) -> None:
        self.persister = persister

    def summary(self, key):
        return self.persister.states.get(key) or ShareState(error_code=42)

    def initialized(self, key):
        st = self.persister.states.get(key)
        return st is not None and st.start_offset >= 0


def test_backlog_snapshot(plog):
    """The backlog assignor's snapshot: lag and each member's in-flight records from the
    loaded partition; else lag from the committed state; not started yet: what
    share.auto.offset.reset will start it with; nothing known: None."""
    async def main():
        for _ in range(3):
            append(plog, 10)
        b, m = make(plog, auto_offset_reset="earliest")
        assert m.backlog(KEY, "t") is None  # no local share coordinator, not loaded
        m.state = SummaryOnly(b.share_state)  # type: ignore[assignment]
        assert m.backlog(KEY, "t") is None  # no state at all
        b.share_state.states[KEY] = ShareState(state_epoch=1, leader_epoch=0, start_offset=-1)
        assert m.backlog(KEY, "t").lag == 30  # earliest: all of it
        await _load(m)
        got = m.acquire(KEY, "m1", 10, 1 << 20).acquired
        m.acquire(KEY, "m2", 10, 1 << 20)
        await m.acknowledge(KEY, "t", "m1", [AckBatch(got[0].first_offset, got[0].last_offset, (1,))])
        snap = m.backlog(KEY, "t")
        assert snap.lag == 20 and dict(snap.in_flight) == {"m2": 10}
        m.invalidate(KEY)  # not loaded any more: the committed state tells the lag
        assert m.backlog(KEY, "t").lag == 20 and not m.backlog(KEY, "t").in_flight
        assert m.backlog(ShareStateKey("g", TID, 1), "t") is None  # no such log here
    asyncio.run(main())
