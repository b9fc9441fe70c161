"""Shutdown is bounded and runs to its end (issue 26 item 3).

A broker SIGTERMed after metadata churn sometimes never exited (a task that swallowed its
cancellation, waited for without limit), and one died of a ``CancelledError`` raised
inside ``Broker.stop`` (replica fetcher -> inter-broker connection) that skipped the
flush, closing the logs and releasing the data-dir lock. Now every stop step has a
deadline, the steps after one that raised (anything, ``CancelledError`` included) or hung
still run, and a cancelled ``stop()`` still flushes, closes and unlocks before it ends
cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest

from hightide.config import BrokerConfig
from hightide.log.dirlock import DirLock
from hightide.log.manager import CLEAN_SHUTDOWN
from hightide.server.broker import Broker
from hightide.aio.shutdown import Step, run_steps
from hightide.aio.tasks import cancel_and_wait

BOUND_S = 15.0  # far above what these stops take (~0.5 s of step deadline), for a loaded machine


def run(coro):
    return asyncio.run(coro)


async def _raise_cancelled() -> None:
    raise asyncio.CancelledError()


async def _raise_error() -> None:
    raise RuntimeError("boom")


async def _hang() -> None:
    await asyncio.Event().wait()


async def _swallow_a_cancel() -> None:
    """Swallows its first cancellation (what asyncio.wait_for made of the metadata
    follower's fetch loop); a second one (asyncio.run's clean-up) ends it."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass
    await asyncio.sleep(3600)


# -- the step runner ------------------------------------------------------------------------
def test_every_step_runs_whatever_the_one_before_raised_or_how_long_it_hung(caplog):
    ran: list[str] = []

    def sync_fails() -> None:
        ran.append("sync")
        raise OSError("disk")

    async def main() -> list[str]:
        steps = [Step("cancelled inside", _raise_cancelled, 1.0), Step("fails", _raise_error, 1.0),
                 Step("hangs", _hang, 0.2), Step("swallows its cancel", _swallow_a_cancel, 0.2),
                 Step("sync fails", sync_fails, 1.0), None,
                 Step("flush", lambda: ran.append("flush"), 1.0, essential=True),
                 Step("unlock", lambda: ran.append("unlock"), 1.0, essential=True)]
        return await run_steps("test stop", steps, logging.getLogger("test.stop"))

    caplog.set_level(logging.WARNING, "test.stop")
    started = time.monotonic()
    failed = run(main())
    assert time.monotonic() - started < BOUND_S
    assert ran == ["sync", "flush", "unlock"]
    assert failed == ["cancelled inside", "fails", "hangs", "swallows its cancel", "sync fails"]
    for name in failed:
        assert f"'{name}'" in caplog.text, caplog.text


def test_a_cancelled_run_still_runs_the_essential_steps_then_ends_cancelled():
    ran: list[str] = []

    async def main() -> asyncio.Task:
        steps = [Step("hangs", _hang, 30.0), Step("optional", lambda: ran.append("optional"), 1.0),
                 Step("flush", lambda: ran.append("flush"), 1.0, essential=True),
                 Step("unlock", lambda: ran.append("unlock"), 1.0, essential=True)]
        task = asyncio.ensure_future(run_steps("test stop", steps, logging.getLogger("test.stop")))
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.wait((task,), timeout=BOUND_S)
        return task

    task = run(main())
    assert task.done() and task.cancelled()
    assert ran == ["flush", "unlock"]


# -- cancel_and_wait ------------------------------------------------------------------------
def test_cancel_and_wait_gives_up_on_a_task_that_ignores_its_cancel_and_names_it(caplog):
    async def main() -> tuple[bool, float]:
        task = asyncio.get_running_loop().create_task(_swallow_a_cancel(), name="stubborn-loop")
        await asyncio.sleep(0)
        started = time.monotonic()
        stopped = await cancel_and_wait(task, timeout_s=0.2)
        return stopped, time.monotonic() - started

    caplog.set_level(logging.WARNING)
    stopped, elapsed = run(main())
    assert not stopped and elapsed < BOUND_S
    assert "stubborn-loop" in caplog.text


def test_cancel_and_wait_lets_the_callers_own_cancel_through():
    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)
            raise

    async def main() -> asyncio.Task:
        target = asyncio.ensure_future(slow_to_stop())
        await asyncio.sleep(0)
        caller = asyncio.ensure_future(cancel_and_wait(target))
        await asyncio.sleep(0.05)
        caller.cancel()
        await asyncio.wait((caller, target), timeout=BOUND_S)
        return caller

    assert run(main()).cancelled()


# -- Broker.stop -----------------------------------------------------------------------------
async def _started(tmp_path) -> Broker:
    b = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0))
    await b.start()
    b.stop_step_timeout_s = 0.5
    return b


def _assert_released(data_dir: str) -> None:
    assert os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN)), "the logs were not closed"
    DirLock.acquire(data_dir).release()  # raises DataDirLocked when stop() kept the lock


@pytest.mark.parametrize("part, behaviour", [
    ("replica_fetchers", _raise_cancelled),  # what killed a broker: CancelledError inside stop
    ("share_persister", _raise_error),
    ("leader_offsets", _hang),
])
def test_broker_stop_flushes_closes_and_unlocks_whatever_one_step_does(tmp_path, caplog, part, behaviour):
    async def main() -> tuple[Broker, asyncio.Task, float]:
        b = await _started(tmp_path)
        setattr(getattr(b, part), "close", behaviour)
        started = time.monotonic()
        task = asyncio.ensure_future(b.stop())
        await asyncio.wait((task,), timeout=BOUND_S)
        return b, task, time.monotonic() - started

    caplog.set_level(logging.WARNING)
    b, task, elapsed = run(main())
    assert task.done(), f"stop() did not return within {BOUND_S} s"
    assert not task.cancelled() and task.exception() is None, f"stop() raised {task.exception()!r}"
    assert elapsed < BOUND_S
    assert b.logs is None
    _assert_released(b.data_dir)
    assert "stop step" in caplog.text and part.replace("_", " ") in caplog.text, caplog.text


def test_a_cancelled_broker_stop_still_flushes_closes_and_unlocks_then_ends_cancelled(tmp_path):
    async def main() -> tuple[Broker, asyncio.Task]:
        b = await _started(tmp_path)
        b.stop_step_timeout_s = 30.0
        b.leader_offsets.close = _hang
        task = asyncio.ensure_future(b.stop())
        await asyncio.sleep(0.3)  # stop() is now waiting in the hung step
        task.cancel()
        await asyncio.wait((task,), timeout=BOUND_S)
        return b, task

    b, task = run(main())
    assert task.done(), "the cancelled stop() did not end"
    assert task.cancelled()
    assert b.logs is None
    _assert_released(b.data_dir)
