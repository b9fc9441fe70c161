"""Waiting for a condition in tests, instead of sleeping a fixed time.

A fixed ``time.sleep`` is either too short on a loaded machine (a flaky test) or too long
everywhere else (a slow suite). :func:`wait_until` polls a condition until it holds and
fails with a message naming what was awaited and the last value seen.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")

__all__ = ["wait_until", "async_wait_until"]


def wait_until(cond: Callable[[], T], timeout: float = 15.0, interval: float = 0.02,
               what: str | None = None) -> T:
    """Call ``cond`` until it returns a truthy value; return that value.

    Exceptions raised by ``cond`` count as "not yet" and are reported if the time runs
    out. Raises ``AssertionError`` after ``timeout`` seconds, naming ``what`` (or the
    condition's name) and the last value or exception seen.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = cond()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - reported below
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for "
                                 f"{what or getattr(cond, '__name__', 'condition')}; last: {last!r}")
        time.sleep(interval)


async def async_wait_until(cond: Callable[[], T | Awaitable[T]], timeout: float = 15.0, interval: float = 0.02,
                           what: str | None = None) -> T:
    """:func:`wait_until` for asyncio tests; ``cond`` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = cond()
            if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
                value = await value
            last = value
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - reported below
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for "
                                 f"{what or getattr(cond, '__name__', 'condition')}; last: {last!r}")
        await asyncio.sleep(interval)
