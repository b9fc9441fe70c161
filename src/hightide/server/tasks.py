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
