"""dev-cluster's status lines with one broker not answering (issue 26, item 7): its
poller asked every broker with one 2 s timeout, the same as the brokers' read wait, so
while one broker was SIGSTOPped the healthy ones (their DescribeCluster held ~2 s by the
read gate) showed as ``starting``, and the silent broker was never shown as such. Each
broker is now polled on its own deadline; a silent one is ``not answering``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hightide.cli.dev_cluster import broker_states
from hightide.devcluster import StatusPoller


@dataclass
class Spec:
    node_id: int


@dataclass
class Node:
    spec: Spec
    alive: bool = True
    paused: bool = False
    returncode: int | None = None


@dataclass
class Cluster:
    brokers: list[Node] = field(default_factory=lambda: [Node(Spec(i)) for i in range(3)])


ALL_UNFENCED = {0: "unfenced", 1: "unfenced", 2: "unfenced"}


def test_a_silent_broker_is_not_answering_and_the_others_stay_unfenced() -> None:
    asked: list[tuple[int, float]] = []

    async def describe(bid: int, timeout_s: float) -> dict[int, str] | None:
        asked.append((bid, timeout_s))
        if bid == 2:  # SIGSTOPped: accepts, never answers
            await asyncio.sleep(3600)
        await asyncio.sleep(0.3)  # held by the read gate (the paused broker holds the LAO back)
        return dict(ALL_UNFENCED)

    async def run() -> list[dict[int, str]]:
        poller = StatusPoller(describe, timeout_s=10.0, silent_s=0.5)
        seen = []
        try:
            for _ in range(12):
                views, silent = await poller.poll([0, 1, 2], wait_s=0.1)
                seen.append(broker_states(Cluster(), views, silent))
        finally:
            poller.close()
        return seen
    seen = asyncio.run(run())
    assert seen[-1] == {0: "unfenced", 1: "unfenced", 2: "not answering"}, seen
    first = next(i for i, s in enumerate(seen) if s[0] == "unfenced")
    assert all(s[0] == "unfenced" and s[1] == "unfenced" for s in seen[first:]), seen  # never "starting" again
    assert all(t > 2.0 for _, t in asked), "a broker's deadline must exceed the brokers' 2 s read wait"
    assert [b for b, _ in asked].count(2) == 1  # one request out per broker, not one per poll


def test_a_failed_answer_is_not_answering_and_recovers() -> None:
    answers = {0: [None, dict(ALL_UNFENCED)]}

    async def describe(bid: int, timeout_s: float) -> dict[int, str] | None:
        return answers[bid].pop(0) if bid in answers else dict(ALL_UNFENCED)

    async def run() -> list[dict[int, str]]:
        poller = StatusPoller(describe, silent_s=5.0)
        out = []
        for _ in range(2):
            views, silent = await poller.poll([0, 1, 2], wait_s=0.5)
            out.append(broker_states(Cluster(), views, silent))
        return out
    first, second = asyncio.run(run())
    assert first[0] == "not answering" and first[1] == "unfenced"
    assert second == ALL_UNFENCED


def test_process_states_come_first() -> None:
    c = Cluster()
    c.brokers[0].alive, c.brokers[0].returncode = False, -9
    c.brokers[1].paused = True
    assert broker_states(c, {2: ALL_UNFENCED}, {1, 2}) == {0: "exited (-9)", 1: "paused", 2: "not answering"}
