"""Stopping in steps: an ordered list, every step bounded, every step run.

A shell's ``stop``/``close`` is a list of :class:`Step` s run by :func:`run_steps`:

* in order, one at a time; an async step runs as a task of its own and is waited for
  at most ``timeout_s``; one that has not finished by then is cancelled (and waited for
  another :data:`CANCEL_GRACE_S` at most) and left behind;
* whatever a step does — returns, raises an exception, raises ``CancelledError`` from
  inside (a connection it closes was cancelled under it), or hangs — the next step runs;
  each step that failed or did not finish in time is logged at warning with its name;
* when the task running the steps is itself cancelled, the step in progress is
  abandoned as above, the remaining steps marked ``essential`` (flush, close the logs,
  release the data-dir lock) still run, each bounded, and only then ``CancelledError``
  is raised: a cancel is delayed by at most the essential steps' deadlines, never
  swallowed.

A synchronous step (``run`` returns a non-awaitable) is called on the loop and cannot be
interrupted: only CPU-bound or local-disk work belongs there (a blocking wait for a
thread goes through ``asyncio.to_thread`` so that its deadline holds).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: How long a step that overran its deadline is waited for once cancelled.
CANCEL_GRACE_S = 1.0
#: A step that finished but took longer than this is logged (info) with its duration.
SLOW_STEP_S = 1.0


@dataclass(frozen=True)
class Step:
    """One step of a stop: ``run()`` returns None or an awaitable (awaited up to
    ``timeout_s``). ``essential`` steps run even when the stop is cancelled."""

    name: str
    run: Callable[[], object]
    timeout_s: float
    essential: bool = False


async def run_steps(what: str, steps: Iterable[Step | None], log: logging.Logger) -> list[str]:
    """Run ``steps`` (None entries are skipped) as the module doc says; return the names
    of the steps that failed or did not finish in time (empty: a clean stop). ``what``
    names the stop in the log lines. Raises ``CancelledError`` after the essential steps
    when the calling task was cancelled meanwhile."""
    failed: list[str] = []
    skipped: list[str] = []
    cancelled = False
    for step in steps:
        if step is None:
            continue
        if cancelled and not step.essential:
            skipped.append(step.name)
            continue
        started = time.monotonic()
        try:
            ok = await _run_step(what, step, log)
            took = time.monotonic() - started
            if ok and took > SLOW_STEP_S:
                log.info("%s: stop step %r took %.1f s", what, step.name, took)
        except asyncio.CancelledError:  # this task was cancelled (a step's own cancel is caught inside)
            if not cancelled:
                log.warning("%s was cancelled during step %r; only the essential steps left run", what, step.name)
            cancelled = True
            ok = False
        if not ok:
            failed.append(step.name)
    if skipped:
        log.warning("%s: steps skipped after the cancellation: %s", what, ", ".join(skipped))
    if cancelled:
        raise asyncio.CancelledError()
    return failed


async def _run_step(what: str, step: Step, log: logging.Logger) -> bool:
    """Run one step; True if it finished without error within its deadline. Raises
    CancelledError only when the calling task is cancelled (the step then abandoned)."""
    try:
        result = step.run()
    except (Exception, asyncio.CancelledError) as exc:
        log.warning("%s: stop step %r failed: %r; going on", what, step.name, exc, exc_info=exc)
        return False
    if not inspect.isawaitable(result):
        return True
    task = asyncio.ensure_future(result)
    try:
        done, _ = await asyncio.wait((task,), timeout=step.timeout_s)
    except asyncio.CancelledError:
        await _abandon(task, what, step, log)
        raise
    if not done:
        log.warning("%s: stop step %r did not finish within %.1f s; cancelled it and going on",
                    what, step.name, step.timeout_s)
        await _abandon(task, what, step, log)
        return False
    if task.cancelled():
        log.warning("%s: stop step %r ended with a CancelledError raised inside it; going on", what, step.name)
        return False
    error = task.exception()
    if error is not None:
        log.warning("%s: stop step %r failed: %r; going on", what, step.name, error, exc_info=error)
        return False
    return True


async def _abandon(task: asyncio.Future[object], what: str, step: Step, log: logging.Logger) -> None:
    """Cancel ``task`` and give it :data:`CANCEL_GRACE_S` to end (it is left behind,
    with a warning, otherwise); its outcome is retrieved so that nothing is reported as
    never retrieved."""
    task.cancel()
    if not task.done():
        await asyncio.wait((task,), timeout=CANCEL_GRACE_S)
    if not task.done():
        log.warning("%s: stop step %r did not end within %.1f s of its cancellation either; left behind",
                    what, step.name, CANCEL_GRACE_S)
    elif not task.cancelled():
        task.exception()
