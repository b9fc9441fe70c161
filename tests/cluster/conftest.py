"""Fixtures of the multi-process cluster tests (see harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import ClusterHarness, describe_failure, kafka_names

ClusterFactory = Callable[..., ClusterHarness]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        made = getattr(item, "_clusters", None)
        if made:
            report.sections.append(("cluster node logs", describe_failure(made)))


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClusterFactory]:
    """A factory: ``cluster(n_brokers=3, *, controllers=1, proxied=(), wait=True,
    timeout=60, settings=None, log_level="INFO", **kafka_settings)`` starts ``controllers`` controllers
    (one, or a quorum) and ``n_brokers`` brokers
    (heartbeat 250 ms, session 3000 ms; ``dynamic_voters``: a dynamic quorum, KIP-853;
    ``log_level`` is each node's ``--log-level``,
    e.g. ``"hightide.request=debug"``) and, with ``wait``, returns once every broker is
    unfenced on every broker. Keyword settings use ``_`` for ``.``
    (``metadata_read_consistency="local"``). Every node is stopped at teardown, also when
    the test fails; a failed test's report carries every node's log."""
    made: list[ClusterHarness] = []
    request.node._clusters = made

    def make(n_brokers: int = 3, *, controllers: int = 1, proxied: tuple[int, ...] | list[int] = (),
             wait: bool = True, timeout: float = 60.0, settings: dict[str, Any] | None = None,
             log_level: str = "INFO", dynamic_voters: bool = False, **kafka_settings: Any) -> ClusterHarness:
        merged = {**(settings or {}), **kafka_names(kafka_settings)}
        h = ClusterHarness(tmp_path / f"cluster-{len(made)}", n_brokers, proxied=proxied, settings=merged,
                           n_controllers=controllers, log_level=log_level, dynamic_voters=dynamic_voters)
        made.append(h)
        h.start(wait_unfenced=wait, timeout=timeout)
        return h

    try:
        yield make
    finally:
        for h in made:
            h.close()
