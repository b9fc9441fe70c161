"""The coordinator restart scenario of issue 26 (item 1), shared by
``test_restart_catch_up.py`` (2 cycles) and ``bench/restart_cycles.py`` (20 by default).

One cycle, on a cluster of brokers whose ``__consumer_offsets`` has three replicas:

1. kill -9 the broker X coordinating group ``g``;
2. once another broker Y is named coordinator (the controller fenced X and moved the
   partition's leadership), commit a new offset at Y (acknowledged);
3. SIGSTOP every controller and start X again: X has only its pre-crash local copy of the
   metadata, which says it leads the group's partition. For ``probe_s`` seconds X is asked
   FindCoordinator, OffsetFetch and OffsetCommit (a probe value above Y's). X must not
   name itself, must not answer an offset (the stale one), must not acknowledge a commit;
4. SIGCONT the controllers; X registers, catches up and serves: the time from the
   resume until X answers FindCoordinator (naming the real coordinator) is measured;
5. the committed offset read at the coordinator then must be the newest acknowledged one;
   an acknowledged commit above it was lost.

Every request goes to a named broker over one connection per request (BrokerConnection),
so what each broker answers is known exactly.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from hightide.client import AdminClient, NewTopic
from hightide.client.connection import BrokerConnection
from hightide.devcluster import DevCluster

GROUP = "g"
TOPIC = "t"
NONE = 0
RETRIABLE_WAIT_S = 60.0


@dataclass
class Stats:
    cycles: int = 0
    commits_acknowledged: int = 0
    commits_lost: int = 0
    #: Answers of the restarted broker before its catch-up that came from stale metadata:
    #: FindCoordinator naming itself, OffsetFetch answered with an offset.
    stale_answers: int = 0
    #: OffsetCommits the restarted broker acknowledged before its catch-up.
    acknowledged_by_restarted: int = 0
    serve_after_resume_s: list[float] = field(default_factory=list)
    restart_to_listening_s: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float | None:
            if not xs:
                return None
            s = sorted(xs)
            return round(s[min(len(s) - 1, int(q * len(s)))], 3)
        return {"cycles": self.cycles, "commits_acknowledged": self.commits_acknowledged,
                "commits_lost": self.commits_lost, "stale_answers": self.stale_answers,
                "commits_acknowledged_by_restarted_broker": self.acknowledged_by_restarted,
                "serve_after_resume_s": {"p50": pct(self.serve_after_resume_s, 0.5),
                                         "max": pct(self.serve_after_resume_s, 1.0)},
                "restart_to_listening_s": {"p50": pct(self.restart_to_listening_s, 0.5),
                                           "max": pct(self.restart_to_listening_s, 1.0)},
                "violations": self.violations}


async def ask(c: DevCluster, node: int, api: int, version: int, body: dict[str, Any],
              timeout_s: float = 3.0) -> Any | None:
    """One request to broker ``node``; None if it cannot be reached or does not answer."""
    spec = c.nodes[node].spec
    conn = BrokerConnection(spec.host, spec.port, "restart-cycles", request_timeout_s=timeout_s)
    try:
        async with asyncio.timeout(timeout_s + 1):
            await conn.connect()
            return await conn.request(api, version, body)
    except Exception:  # noqa: BLE001 - unreachable or unanswered: no answer
        return None
    finally:
        await conn.close()


def find_body() -> dict[str, Any]:
    return {"key": GROUP, "key_type": 0}


def commit_body(offset: int) -> dict[str, Any]:
    return {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


FETCH_BODY = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}], "require_stable": False}


def commit_code(resp: Any) -> int | None:
    return None if resp is None else int(resp.topics[0].partitions[0].error_code)


def fetched(resp: Any) -> int | None:
    """The committed offset an OffsetFetch answered, None unless answered without error."""
    if resp is None or resp.error_code != NONE or resp.topics[0].partitions[0].error_code != NONE:
        return None
    return int(resp.topics[0].partitions[0].committed_offset)


async def coordinator(c: DevCluster, *, exclude: int | None = None, timeout_s: float = RETRIABLE_WAIT_S) -> int:
    """The coordinator of ``g`` as a running broker other than ``exclude`` names it
    (waits until one names a running broker other than ``exclude``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for n in c.brokers:
            bid = n.spec.node_id
            if bid == exclude or not n.alive or n.paused:
                continue
            resp = await ask(c, bid, 10, 3, find_body())
            if resp is not None and resp.error_code == NONE and resp.node_id != exclude \
                    and c.nodes[resp.node_id].alive:
                return int(resp.node_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"no coordinator of {GROUP} other than {exclude} within {timeout_s:g} s")
        await asyncio.sleep(0.2)


async def commit_at(c: DevCluster, offset: int, stats: Stats, *, exclude: int | None = None) -> None:
    """Commit ``offset`` at the coordinator until acknowledged (retriable errors: ask again)."""
    deadline = time.monotonic() + RETRIABLE_WAIT_S
    while time.monotonic() < deadline:
        node = await coordinator(c, exclude=exclude)
        if commit_code(await ask(c, node, 8, 8, commit_body(offset))) == NONE:
            stats.commits_acknowledged += 1
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"commit of {offset} not acknowledged within {RETRIABLE_WAIT_S:g} s")


async def read_committed(c: DevCluster) -> int:
    deadline = time.monotonic() + RETRIABLE_WAIT_S
    while time.monotonic() < deadline:
        value = fetched(await ask(c, await coordinator(c), 9, 7, FETCH_BODY))
        if value is not None:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"no committed offset of {GROUP} read within {RETRIABLE_WAIT_S:g} s")


async def setup(c: DevCluster) -> None:
    """The topic ``t`` (3 replicas) and ``__consumer_offsets`` (created by FindCoordinator)."""
    async with AdminClient(c.bootstrap, request_timeout_s=15.0) as admin:
        await admin.create_topics([NewTopic(TOPIC, 1, min(3, len(c.brokers)))])
    await coordinator(c)


async def cycle(c: DevCluster, index: int, stats: Stats, *, probe_s: float) -> None:
    """One kill / commit / paused-controller restart / resume cycle (see the module doc)."""
    old = await coordinator(c)
    c.nodes[old].kill()
    base = (index + 1) * 1000
    await commit_at(c, base, stats, exclude=old)
    acked = [base]  # the values acknowledged in this cycle, in order
    for ctl in c.controllers:
        ctl.pause()
    try:
        t0 = time.monotonic()
        c.nodes[old].start().wait_listening(30)
        stats.restart_to_listening_s.append(time.monotonic() - t0)
        probe = base
        deadline = time.monotonic() + probe_s
        while time.monotonic() < deadline:
            found = await ask(c, old, 10, 3, find_body(), timeout_s=1.0)
            if found is not None and found.error_code == NONE and found.node_id == old:
                stats.stale_answers += 1
                stats.violations.append(f"cycle {index}: the restarted broker {old} named itself coordinator")
            value = fetched(await ask(c, old, 9, 7, FETCH_BODY, timeout_s=1.0))
            if value is not None:
                stats.stale_answers += 1
                stats.violations.append(f"cycle {index}: the restarted broker {old} answered offset {value} "
                                        f"(newest acknowledged {acked[-1]})")
            probe += 1
            if commit_code(await ask(c, old, 8, 8, commit_body(probe), timeout_s=1.0)) == NONE:
                stats.commits_acknowledged += 1
                stats.acknowledged_by_restarted += 1
                acked.append(probe)
                stats.violations.append(f"cycle {index}: the restarted broker {old} acknowledged commit {probe} "
                                        "before catching up")
            await asyncio.sleep(0.1)
    finally:
        for ctl in c.controllers:
            ctl.resume()
    resumed = time.monotonic()
    while True:
        found = await ask(c, old, 10, 3, find_body(), timeout_s=1.0)
        if found is not None and found.error_code == NONE:
            stats.serve_after_resume_s.append(time.monotonic() - resumed)
            break
        if time.monotonic() - resumed > RETRIABLE_WAIT_S:
            raise AssertionError(f"the restarted broker {old} did not serve FindCoordinator within "
                                 f"{RETRIABLE_WAIT_S:g} s of the controllers' resume")
        await asyncio.sleep(0.05)
    final = await read_committed(c)
    if final != acked[-1]:
        stats.commits_lost += max(1, sum(1 for v in acked if v > final))
        stats.violations.append(f"cycle {index}: committed offset {final}, newest acknowledged {acked[-1]}")
    stats.cycles += 1


async def run(c: DevCluster, cycles: int, *, probe_s: float = 1.5, progress: Any = None) -> Stats:
    """``cycles`` cycles on the running cluster ``c``; returns what was seen."""
    stats = Stats()
    await setup(c)
    await commit_at(c, 0, stats)
    for i in range(cycles):
        await cycle(c, i, stats, probe_s=probe_s)
        if progress is not None:
            progress(i, stats)
        await wait_unfenced(c)
    return stats


async def wait_unfenced(c: DevCluster, timeout_s: float = RETRIABLE_WAIT_S) -> None:
    """Until every running broker lists every running broker as unfenced."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = [n.spec.node_id for n in c.brokers if n.alive and not n.paused]
        views = await c.astates(running)
        if len(views) == len(running) and all(v.get(b) == "unfenced" for v in views.values() for b in running):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"brokers {running} not unfenced everywhere within {timeout_s:g} s: {views}")
        await asyncio.sleep(0.2)
