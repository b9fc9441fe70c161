"""AppendWaiters.wait: wakes, times out, and never swallows its caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from hightide.aio.waiters import AppendWaiters


def test_a_wake_ends_the_wait_and_unregisters() -> None:
    async def go() -> None:
        w = AppendWaiters()
        task = asyncio.create_task(w.wait(["k"], 10))
        await asyncio.sleep(0)
        w.wake("k")
        await asyncio.wait_for(task, 1)
        await asyncio.sleep(0)
        assert not w._by_key

    asyncio.run(go())


def test_the_timeout_ends_the_wait_and_unregisters() -> None:
    async def go() -> None:
        w = AppendWaiters()
        await w.wait(["k"], 0.01)
        await asyncio.sleep(0)  # done callbacks run on the next loop iteration
        assert not w._by_key

    asyncio.run(go())


def test_cancel_right_after_a_wake_is_not_swallowed() -> None:
    """Broker.stop wakes every waiter, then cancels its background tasks: a task looping
    on wait() must end (it hung the single node's shutdown with asyncio.wait_for)."""
    async def go() -> None:
        w = AppendWaiters()

        async def loop_forever() -> None:
            while True:
                await w.wait(["k"], 60)

        task = asyncio.create_task(loop_forever())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        w.wake_all()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)
        assert task.cancelled()

    asyncio.run(go())


def test_wait_event_propagates_a_cancel_that_lands_with_the_set() -> None:
    from hightide.aio.tasks import wait_event

    async def go() -> None:
        event = asyncio.Event()

        async def loop_forever() -> None:
            while True:
                await wait_event(event, 60)
                event.clear()

        task = asyncio.create_task(loop_forever())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        event.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)
        assert await wait_event(asyncio.Event(), 0.01) is False

    asyncio.run(go())
