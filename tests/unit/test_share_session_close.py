"""A share session outlives its member's leave (issue 12 item 12): the client's final
ShareAcknowledge/ShareFetch comes after its leave heartbeat and must find the session, as
in Kafka (a session ends with the final epoch or its connection). Departed members'
sessions are still bounded: dropped after a retention time, evicted first when the cache
is full. What a departed member holds is released at once, as before."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from hightide.coordinator.share_partitions import DEPARTED_SESSION_RETENTION_MS
from hightide.share.session import (
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    SessionError,
    ShareSessionCache,
)

from tests.unit.test_share_manager import KEY, TID, _load, append, make, plog  # noqa: F401 (fixture)

T = uuid.uuid4()


def _open(cache: ShareSessionCache, member: str, now: int = 0) -> None:
    cache.fetch_context("g", member, 0, [(T, 0)], [], False, now)


def test_final_acknowledge_after_the_member_left_closes_the_session(plog):  # noqa: F811
    async def main():
        append(plog, 10)
        b, m = make(plog, auto_offset_reset="earliest")
        await _load(m)
        m.sessions.fetch_context("g", "a", 0, [(TID, 0)], [], False, 0)
        assert m.acquire(KEY, "a", 100, 1 << 20).acquired
        b.members = {"b"}
        m.member_left("g", "a", now_ms=1_000)  # the leave heartbeat
        # its records are free at once: b gets them
        assert [(x.first_offset, x.last_offset, x.delivery_count)
                for x in m.acquire(KEY, "b", 100, 1 << 20).acquired] == [(0, 9, 2)]
        m.release_departed(now_ms=2_000)  # the timer runs between the leave and the close
        assert m.sessions.acknowledge_context("g", "a", -1, 2_500) is True  # old code: SHARE_SESSION_NOT_FOUND
        m.close_session("g", "a")
        assert m.sessions.get("g", "a") is None
    asyncio.run(main())


def test_departed_sessions_are_dropped_after_the_retention(plog):  # noqa: F811
    async def main():
        b, m = make(plog)
        m.sessions.fetch_context("g", "a", 0, [(TID, 0)], [], False, 0)
        m.sessions.fetch_context("g", "b", 0, [(TID, 0)], [], False, 0)
        b.members = {"b"}
        m.release_departed(now_ms=10_000)
        assert m.sessions.get("g", "a").departed_ms == 10_000
        m.release_departed(now_ms=10_000 + DEPARTED_SESSION_RETENTION_MS - 1)
        assert m.sessions.get("g", "a") is not None
        m.release_departed(now_ms=10_000 + DEPARTED_SESSION_RETENTION_MS)
        assert m.sessions.get("g", "a") is None and m.sessions.get("g", "b") is not None
        with pytest.raises(SessionError) as e:
            m.sessions.acknowledge_context("g", "a", -1, 0)
        assert e.value.error_code == SHARE_SESSION_NOT_FOUND
    asyncio.run(main())


def test_a_member_back_in_its_group_is_no_longer_departed(plog):  # noqa: F811
    async def main():
        b, m = make(plog)
        m.sessions.fetch_context("g", "a", 0, [(TID, 0)], [], False, 0)
        b.members = set()
        m.release_departed(now_ms=0)
        b.members = {"a"}  # rejoined with the same member id
        m.release_departed(now_ms=1)
        m.release_departed(now_ms=DEPARTED_SESSION_RETENTION_MS * 2)
        assert m.sessions.get("g", "a").departed_ms is None
    asyncio.run(main())


def test_a_full_cache_evicts_the_oldest_departed_session_first():
    cache = ShareSessionCache(max_sessions=3)
    for member in ("a", "b", "c"):
        _open(cache, member)
    with pytest.raises(SessionError) as e:
        _open(cache, "d")
    assert e.value.error_code == SHARE_SESSION_LIMIT_REACHED  # nobody departed: a live session is never evicted
    assert cache.mark_departed("g", "c", 5) and cache.mark_departed("g", "b", 7)
    assert not cache.mark_departed("g", "c", 9)  # the first departure time is kept
    _open(cache, "d")
    assert cache.get("g", "c") is None and cache.get("g", "b") is not None and len(cache) == 3
    _open(cache, "e")
    assert cache.get("g", "b") is None and {s.member_id for s in cache.sessions()} == {"a", "d", "e"}
    with pytest.raises(SessionError):
        _open(cache, "f")
