"""The simulation's event loop: simulated time, determinism, pause/resume, kill."""

from __future__ import annotations

import asyncio
import time

import pytest

from hightide.sim.loop import NODE, SimLoop, SimulationStuck


def run(coro_fn, loop=None):
    loop = loop or SimLoop()
    try:
        return loop, loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


def test_time_jumps_to_the_next_timer():
    async def main(loop):
        t0 = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - t0

    started = time.monotonic()
    _, took = run(main)
    assert took == pytest.approx(3600)
    assert time.monotonic() - started < 5  # no real sleep


def test_timeouts_follow_simulated_time():
    async def main(loop):
        try:
            async with asyncio.timeout(10):
                await asyncio.sleep(100)
        except TimeoutError:
            return loop.time()
        return None

    loop = SimLoop(start_s=0.0)
    _, at = run(main, loop)
    assert at == pytest.approx(10)


def test_same_program_same_trace():
    async def main(loop):
        trace: list[tuple[float, str]] = []

        async def worker(name, delays):
            for d in delays:
                await asyncio.sleep(d)
                trace.append((loop.time(), name))

        await asyncio.gather(worker("a", [0.1, 0.3, 0.0, 0.2]), worker("b", [0.2, 0.2, 0.0]),
                             worker("c", [0.0, 0.4]))
        return trace

    assert run(main)[1] == run(main)[1]


def test_executor_jobs_run_on_the_loop_after_the_disk_delay():
    async def main(loop):
        t0 = loop.time()
        value = await asyncio.to_thread(lambda: 42)
        return value, loop.time() - t0

    loop = SimLoop(disk_delay=lambda: 0.005)
    _, (value, took) = run(main, loop)
    assert value == 42 and took == pytest.approx(0.005)


def test_a_paused_node_runs_nothing_until_resumed_then_its_timers_fire_at_once():
    async def main(loop):
        ticks: list[float] = []
        node, ctx = loop.node_context(1)

        async def ticker():
            assert NODE.get() is node
            while True:
                await asyncio.sleep(1)
                ticks.append(loop.time())

        loop.create_task(ticker(), context=ctx)
        await asyncio.sleep(3.5)
        loop.pause(node)
        await asyncio.sleep(10)
        during = list(ticks)
        loop.resume(node)
        await asyncio.sleep(0.1)
        return during, ticks

    loop = SimLoop(start_s=0.0)
    _, (during, ticks) = run(main, loop)
    assert during == [1.0, 2.0, 3.0]
    assert ticks[3] == pytest.approx(13.5)  # the tick due at 4.0 runs on resume, not before
    assert len(ticks) == 4


def test_a_killed_node_never_runs_again_and_its_finally_blocks_do_not_run():
    async def main(loop):
        events: list[str] = []
        node, ctx = loop.node_context(1)

        async def victim():
            try:
                await asyncio.sleep(100)
                events.append("woke")
            finally:
                events.append("finally")

        loop.create_task(victim(), context=ctx)
        await asyncio.sleep(1)
        loop.kill(node)
        await asyncio.sleep(200)
        return events

    loop = SimLoop()
    _, events = run(main, loop)
    assert events == []


def test_a_deadlock_is_reported():
    async def main(loop):
        await loop.create_future()

    with pytest.raises(SimulationStuck):
        run(main)


def test_a_busy_loop_that_never_lets_time_move_is_reported():
    async def main(loop):
        while True:
            await asyncio.sleep(0)

    with pytest.raises(SimulationStuck, match="livelock"):
        run(main)


def test_a_deadline_one_ulp_past_its_timer_still_ends():
    async def main(loop):
        deadline = loop.time() + 0.1 + 1e-13
        spins = 0
        while loop.time() < deadline:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            spins += 1
        return spins

    assert run(main)[1] <= 2


def test_a_sleep_below_the_float_resolution_still_moves_time():
    async def main(loop):
        await asyncio.sleep(1)
        deadline = loop.time() + 1e-13  # below one ulp of ~1001 s: the same float
        spins = 0
        while loop.time() < deadline + 1e-10:
            await asyncio.sleep(max(1e-13, deadline + 1e-10 - loop.time()))
            spins += 1
        return spins

    assert run(main)[1] <= 2
