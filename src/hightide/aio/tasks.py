"""Stopping a background task: the one way the shell's long-running loops end."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("hightide.tasks")

#: How long :func:`cancel_and_wait` waits for a cancelled task by default. A loop that
#: honours its cancellation ends within a loop step or two; one that does not is left
#: behind (and named in a warning) rather than hanging the shutdown that waits for it.
STOP_WAIT_S = 5.0


async def cancel_and_wait(task: asyncio.Task | None, timeout_s: float = STOP_WAIT_S) -> bool:
    """Cancel ``task`` (None: nothing to do) and wait up to ``timeout_s`` for it to end.

    Returns True once it has ended; a failure or cancellation it ends with is swallowed
    (the caller is stopping it). Returns False, and logs a warning naming the task, when
    it has not ended within ``timeout_s`` (it swallowed its cancellation or is stuck in
    blocking code); it stays cancelled. A cancellation of the *caller* always propagates."""
    if task is None:
        return True
    task.cancel()
    done, _ = await asyncio.wait((task,), timeout=timeout_s)
    if not done:
        log.warning("task %r did not stop within %.1f s of its cancellation; left behind",
                    task.get_name(), timeout_s)
        return False
    if not task.cancelled() and task.exception() is not None:  # retrieved: no "never retrieved" noise
        log.debug("task %r ended with %r while being stopped", task.get_name(), task.exception())
    return True


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
