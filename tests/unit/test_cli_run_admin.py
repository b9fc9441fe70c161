"""``run_admin`` (cli/_common.py) hands the command's result back without asyncio ever
formatting it: on Python 3.11 ``asyncio.run`` builds the repr of its main task — and of
the task's result — when it restores the SIGINT handler at exit (``signal.getsignal``
tries the handler as a ``Handlers`` value and formats the ValueError's message). A
``groups describe`` of 10,000 partitions spent seconds there (issue 33)."""

from __future__ import annotations

from typing import Any

import pytest

import hightide.client
from hightide.cli._common import run_admin


class Huge:
    """A result whose repr is counted (a describe of 10,000 partitions is this, big)."""

    reprs = 0

    def __repr__(self) -> str:
        Huge.reprs += 1
        return "Huge()"


class FakeAdmin:
    def __init__(self, bootstrap: str, **options: Any) -> None:
        self.bootstrap = bootstrap

    async def __aenter__(self) -> FakeAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def test_the_result_is_returned_and_never_formatted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hightide.client, "AdminClient", FakeAdmin, raising=False)
    result = Huge()

    async def fn(admin: Any) -> Huge:
        assert isinstance(admin, FakeAdmin)
        return result

    Huge.reprs = 0
    assert run_admin("127.0.0.1:9092", fn) is result
    assert Huge.reprs == 0
