"""Stopping a background task: the one way the shell's long-running loops end."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel ``task`` (None: nothing to do) and wait until it has ended. Its
    cancellation or a failure it ends with is swallowed: the caller is stopping it."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``timeout_s`` passes (False; None: no limit).

    Use it, not ``asyncio.wait_for(event.wait(), ...)``, in a loop that is stopped by
    cancellation: in Python 3.11 ``wait_for`` returns normally when the event is set in
    the same loop iteration as the cancel, and the loop then never ends."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait((waiter,), timeout=timeout_s)
        return bool(done)
    finally:
        waiter.cancel()
