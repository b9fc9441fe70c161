"""Issue 30 as pure cases: time lag 0 at the markers, the marker probe facing a batch
larger than its per-partition limit (a fake Fetch that answers as Kafka and hightide do,
KIP-74), a run that could not be probed, and the estimated lag of a partition without a
commit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hightide.client import TopicPartition
from hightide.client import visible as visible_mod
from hightide.lag import Status
from hightide.lag.offsets import Anomaly, offset_lag, uncommitted_estimate
from hightide.lag.status import unjudged
from hightide.protocol.records import build_batch
from hightide.lag.timelag import CAUGHT_UP_AT_MARKERS, Certainty, time_lags_caught_up_at_markers

from test_lag_markers import PID, data, marker

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
BIG = build_batch([(None, b"x" * 200, [], 1000 + i) for i in range(600)], base_offset=0, producer_id=PID,
                  producer_epoch=0, base_sequence=0, is_transactional=True) + marker(600, commit=False)
"""One aborted batch of 600 records of 200 bytes (~125 KB) and its marker."""
SMALL = data(0, 3, PID, True) + marker(3)


def test_caught_up_at_markers_is_time_lag_0_by_every_method():
    got = time_lags_caught_up_at_markers(("record_timestamp", "interpolation", "max_timestamp_anchor"))
    assert [(t.ms, t.certainty, t.reason) for t in got] == [(0, Certainty.EXACT, CAUGHT_UP_AT_MARKERS)] * 3


def test_unprobed_tail_is_named_and_not_judged():
    ol = offset_lag(3, 4, 0, 4, unprobed=True)
    assert (ol.lag, ol.anomalies) == (1, (Anomaly.TAIL_UNPROBED,))
    assert offset_lag(3, 4, 0, 4, unprobed=True, next_visible=4).anomalies == ()  # probed after all: caught up
    assert offset_lag(4, 4, 0, 4, unprobed=True).anomalies == ()  # nothing after the commit
    rows: dict[Any, Any] = {TP0: (Status.STOP, "offset_unchanged_for_stop_after", True, 601),
                            TP1: (Status.ERR, "no_commit", True, None)}
    unjudged([TP0, TP1], rows)
    assert rows[TP0] == (Status.OK, "tail_unprobed", False, 601) and rows[TP1][0] == Status.ERR


def test_partition_without_commit_has_an_estimate():
    assert offset_lag(None, 110, 10, reset="earliest").estimated_lag == 100
    assert offset_lag(None, 110, 10, reset="latest").estimated_lag == 0
    assert offset_lag(None, 110, 10).estimated_lag is None  # no reset policy: no estimate
    assert offset_lag(5, 110, 0, reset="earliest").estimated_lag is None  # a commit: the real lag
    assert uncommitted_estimate(None, 0, "earliest") is None and uncommitted_estimate(9, None, "earliest") is None


def _fake_fetch(logs: dict[TopicPartition, bytes], calls: list[tuple[list[TopicPartition], int]]) -> Any:
    """Fetch as a broker answers it: the first partition of a request gets at least its
    first batch whatever the limit; any other partition whose first batch is larger than
    the limit gets 0 bytes (KIP-74)."""
    async def fetch(admin: Any, offsets: dict[TopicPartition, int], iso: int, limit: int) -> dict:
        calls.append((list(offsets), limit))
        out = {}
        for i, (tp, frm) in enumerate(offsets.items()):
            log = logs[tp]
            first = visible_mod._batch_size(log)
            out[tp] = (log if i == 0 or first <= limit else b"", [(PID, 0)] if tp == TP1 else [])
        return out
    return fetch


def test_probe_asks_again_alone_for_a_batch_larger_than_its_limit(monkeypatch):
    assert visible_mod._batch_size(BIG) > 64 * 1024
    calls: list = []
    monkeypatch.setattr(visible_mod, "_fetch", _fake_fetch({TP0: SMALL, TP1: BIG}, calls))
    got = asyncio.run(visible_mod.probe_visible_offsets(
        None, {TP0: ([3], 4), TP1: ([0], 601)}, isolation_level="read_committed"))  # type: ignore[arg-type]
    assert got.found == {(TP0, 3): 4, (TP1, 0): 601} and got.unprobed == {}
    assert calls[1][0] == [TP1] and calls[1][1] >= 64 * 1024  # alone


def test_probe_that_cannot_finish_says_so(monkeypatch):
    calls: list = []
    monkeypatch.setattr(visible_mod, "_fetch", _fake_fetch({TP0: SMALL, TP1: BIG}, calls))
    got = asyncio.run(visible_mod.probe_visible_offsets(
        None, {TP0: ([3], 4), TP1: ([0], 601)}, isolation_level="read_committed", solo_max=0))  # type: ignore[arg-type]
    assert got.found == {(TP0, 3): 4} and got.unprobed == {(TP1, 0): "batch_too_large"}

    async def failing(admin: Any, offsets: dict, iso: int, limit: int) -> dict:
        return {}
    monkeypatch.setattr(visible_mod, "_fetch", failing)
    got = asyncio.run(visible_mod.probe_visible_offsets(None, {TP0: ([3], 4)}))  # type: ignore[arg-type]
    assert got.unprobed == {(TP0, 3): "fetch_failed"}


@pytest.mark.parametrize("n", [1, 3])
def test_a_run_longer_than_the_rounds_is_unprobed(monkeypatch, n):
    markers = b"".join(marker(i) for i in range(10))  # 10 markers, one batch each

    async def one_batch(admin: Any, offsets: dict, iso: int, limit: int) -> dict:
        (tp, frm), = offsets.items()
        return {tp: (marker(frm), [])}
    monkeypatch.setattr(visible_mod, "_fetch", one_batch)
    got = asyncio.run(visible_mod.probe_visible_offsets(None, {TP0: ([0], 10)}, rounds=n))  # type: ignore[arg-type]
    assert got.unprobed == {(TP0, 0): "run_too_long"} and markers
