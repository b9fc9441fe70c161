"""One clock for the shell (issue 27 item 3): the asyncio shell packages (``server``,
``coordinator``, ``replica``, ``node``, ``disk``) read time, sleep and schedule only
through the :class:`~hightide.aio.clock.Clock` they were built with, never from
``time`` or the event loop directly; ``hightide/aio/clock.py`` is the one place that
does. So a test or the whole-node simulator can run them on a clock of its own.

What is flagged, in code (the source is tokenized: comments and docstrings that explain
are ignored): ``time.time(``, ``time.monotonic(``, ``time.perf_counter(`` (and their
``_ns`` forms), ``asyncio.sleep(``, ``<loop>.time(`` on a name ending in ``loop``,
``call_later(`` / ``call_at(`` on anything but a clock (``clock.call_later(`` /
``self.clock.call_later(`` are the way), and importing those names from ``time`` or
``asyncio``. Deadlines of ``asyncio.timeout()`` run on the loop's time and are allowed
(see the clock module's docstring).
"""

from __future__ import annotations

import asyncio
import io
import tokenize
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hightide.aio.clock import ManualClock
from hightide.node.lifecycle import BrokerLifecycleManager

SRC = Path(__file__).resolve().parents[2] / "src" / "hightide"
SHELL = ("server", "coordinator", "replica", "node", "disk")
TIME_FUNCS = {"time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns"}
SCHEDULE = {"call_later", "call_at"}


def clock_bypasses(source: str) -> list[tuple[int, str]]:
    """(line, what) of each place in ``source``'s code that reads time, sleeps or
    schedules without a clock."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type in (tokenize.NAME, tokenize.OP)]
    found = []
    for i, tok in enumerate(toks):
        if tok.type != tokenize.NAME:
            continue
        before = toks[i - 1].string if i >= 1 else ""
        owner = toks[i - 2].string if i >= 2 and before == "." else ""
        called = i + 1 < len(toks) and toks[i + 1].string == "("
        name = tok.string
        if owner == "time" and name in TIME_FUNCS and called:
            found.append((tok.start[0], f"time.{name}("))
        elif owner == "asyncio" and name == "sleep" and called:
            found.append((tok.start[0], "asyncio.sleep("))
        elif owner.endswith("loop") and name == "time" and called:
            found.append((tok.start[0], f"{owner}.time("))
        elif owner == ")" and name == "time" and called and toks[i - 4].string == "get_running_loop":
            found.append((tok.start[0], "get_running_loop().time("))
        elif name in SCHEDULE and called and before == "." and owner != "clock":
            found.append((tok.start[0], f"{owner or '?'}.{name}("))
        elif name == "import" and i >= 2 and toks[i - 2].string == "from" and toks[i - 1].string in ("time", "asyncio"):
            names = {t.string for t in toks[i + 1:] if t.start[0] == tok.start[0]}  # one line
            bad = (TIME_FUNCS if toks[i - 1].string == "time" else {"sleep"}) & names
            if bad:
                found.append((tok.start[0], f"from {toks[i - 1].string} import {', '.join(sorted(bad))}"))
    return found


def test_the_checker_finds_code_and_ignores_comments_and_strings() -> None:
    code = ("import asyncio, time\n"
            "# time.time() and asyncio.sleep(1) in a comment\n"
            "'''``time.monotonic()`` and loop.call_later(1, f) in a docstring'''\n"
            "async def f(loop, clock, self):\n"
            "    a = time.time()\n"
            "    b = time.monotonic()\n"
            "    await asyncio.sleep(0)\n"
            "    loop.call_later(1, f)\n"
            "    c = loop.time()\n"
            "    asyncio.get_running_loop().call_at(1, f)\n"
            "    d = asyncio.get_running_loop().time()\n"
            "    clock.call_later(1, f)\n"
            "    self.clock.call_later(1, f)\n"
            "    await clock.sleep(1)\n"
            "    e = clock.monotonic() + clock.now_ms()\n"
            "    async with asyncio.timeout(1): pass\n"
            "from time import monotonic\n"
            "from asyncio import sleep\n"
            "from time import struct_time\n"
            "x = time.perf_counter()\n")
    assert [line for line, _ in clock_bypasses(code)] == [5, 6, 7, 8, 9, 10, 11, 17, 18, 20]


def test_the_shell_reads_time_only_through_its_clock() -> None:
    found = [f"{path.relative_to(SRC.parent)}:{line}: {what}"
             for pkg in SHELL
             for path in sorted((SRC / pkg).rglob("*.py"))
             for line, what in clock_bypasses(path.read_text(encoding="utf-8"))]
    assert not found, ("the shell reads time through its Clock (hightide.aio.clock; the component's clock "
                       "argument or CoordinatorEnv.clock), never time/asyncio directly:\n" + "\n".join(found))


def test_no_second_now_ms() -> None:
    """``now_ms()`` is the clock's: no module of the shell defines its own."""
    found = [f"{path.relative_to(SRC.parent)}:{line}"
             for pkg in SHELL
             for path in sorted((SRC / pkg).rglob("*.py"))
             for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if text.lstrip().startswith(("def now_ms(", "def _now_ms("))]
    assert not found, found


# -- a component on a manual clock ------------------------------------------------------
class FakeControllerChannel:
    """The lifecycle's controller channel: every registration and heartbeat is answered
    at once (epoch 42, unfenced, caught up), each request noted with the clock's time."""

    address = ("127.0.0.1", 9093)

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.sent: list[tuple[int, int]] = []  # (api key, clock ms when sent)

    async def connection(self, deadline: float | None = None) -> SimpleNamespace:
        return SimpleNamespace(pick_version=lambda api_key, wanted_max, our_min=0: wanted_max)

    async def request(self, api_key: int, version: Any, body: dict, **kw: Any) -> Any:
        self.sent.append((api_key, self.clock.now_ms()))
        if api_key == 62:
            return SimpleNamespace(error_code=0, broker_epoch=42)
        return SimpleNamespace(error_code=0, is_caught_up=True, is_fenced=False, should_shut_down=False,
                               lowest_acknowledged_offset=-1)

    def reset(self) -> None:
        pass


def test_the_lifecycle_heartbeats_on_the_manual_clocks_schedule() -> None:
    """BrokerLifecycleManager waits for its next heartbeat on its clock: with a manual
    clock, a heartbeat goes out exactly when the clock passes the interval and never
    before, however long the loop runs meanwhile (no real sleep drives it)."""
    async def run() -> None:
        clock = ManualClock()
        channel = FakeControllerChannel(clock)
        settings = SimpleNamespace(node_id=1, heartbeat_interval_ms=2000, session_timeout_ms=9000)
        mgr = BrokerLifecycleManager(settings, channel, lambda: "c1", lambda: {}, lambda lao: None,  # type: ignore[arg-type]
                                     clock=clock)
        mgr.core.on_caught_up(clock.now_ms())
        mgr.start()
        try:
            await clock.advance_and_settle(0)  # registers, then the first heartbeat at once (unfence)
            t0 = clock.now_ms()
            assert [k for k, _ in channel.sent] == [62, 63] and mgr.unfenced.is_set()
            for _ in range(50):  # the loop runs; the clock stands still: nothing more is sent
                await asyncio.sleep(0)
            assert len(channel.sent) == 2
            await clock.advance_and_settle(1.9)
            assert len(channel.sent) == 2  # 1.9 s < heartbeat.interval.ms
            await clock.advance_and_settle(0.2)
            assert [k for k, _ in channel.sent] == [62, 63, 63] and channel.sent[-1][1] == t0 + 2000
            await clock.advance_and_settle(6.0)
            assert [at - t0 for k, at in channel.sent[2:]] == [2000, 4000, 6000, 8000]
        finally:
            await mgr.close()
    asyncio.run(run())


def test_the_broker_hands_its_clock_to_every_component_and_its_timers_run_on_it(tmp_path: Any) -> None:
    """``Broker(clock=...)``: every component built by the broker gets that clock, and
    the broker's own timers (here the group timers, every 100 ms) run on it: with a
    manual clock they poll only as it is advanced, at its times."""
    from hightide import Broker, BrokerConfig

    async def run() -> None:
        clock = ManualClock()
        b = Broker(BrokerConfig(), data_dir=str(tmp_path), listen=("127.0.0.1", 0), clock=clock)
        assert all(c is clock for c in (
            b.flusher.clock, b.cleaner.clock, b.replica_manager.clock, b.replica_fetchers.clock,
            b.leader_offsets.clock, b.groups.env.clock, b.share_state.env.clock, b.txns.env.clock,
            b.share_manager.clock, b.services.clock, b.groups.runtime.clock))
        polls: list[int] = []

        async def poll(now_ms: int) -> None:
            polls.append(now_ms)
        b.groups.poll = poll  # type: ignore[method-assign]
        await b.start()
        try:
            t0 = clock.now_ms()
            for _ in range(50):
                await asyncio.sleep(0)
            assert polls == []  # the clock stands still: no timer fired
            await clock.advance_and_settle(0.35)
            assert polls == [t0 + 100, t0 + 200, t0 + 300]
        finally:
            await b.stop()
    asyncio.run(run())
