"""The shell defects of issue 26 as seeds of the whole-cluster simulation (issue 28 item
6): each defect, put back into today's code by its variant in hightide.sim.regressions
(the code before the fixes predates the simulator's seams), is found on its seed with an
anomaly of the kind it causes, and the same seed holds every invariant on the real code.
And shrinking (item 5): a failing seed shrinks to fewer faults that still fail.

A seed here is a whole replay command: ``python -m hightide.sim --seed S --duration D
--faults K --probes P --only-faults I --plant NAME`` (without ``--plant``: the real code).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from hightide.sim.loop import SimLoop
from hightide.sim.run import simulate
from hightide.sim.shrink import anomaly_kind, shrink


@dataclass(frozen=True)
class Case:
    variant: str
    seed: int
    duration_s: float
    kinds: tuple[str, ...]
    probes: tuple[str, ...]
    only: frozenset[int] | None
    expected: frozenset[str]  # anomaly kinds (hightide.sim.shrink.anomaly_kind) the defect shows as

    def run(self, plant: str | None) -> tuple[str | None, str]:
        r = simulate(self.seed, duration_s=self.duration_s, kinds=self.kinds, probes=self.probes, only=self.only,
                     plant=plant)
        return r.anomaly, "\n".join(r.trace[-25:])

    @property
    def replay(self) -> str:
        only = "" if self.only is None else f" --only-faults {','.join(map(str, sorted(self.only))) or 'none'}"
        probes = f" --probes {','.join(self.probes)}" if self.probes else ""
        return (f"python -m hightide.sim --seed {self.seed} --duration {self.duration_s:g} --faults "
                f"{','.join(self.kinds)}{probes}{only} --trace --logs")


CASES = [
    # item 1: kill -9 of a broker; restarted, it leads and coordinates from its pre-crash image
    Case("stale-coordinator", 4, 8.0, ("kill",), (), frozenset({0}),
         frozenset({"commit-lost", "producer-refused", "hw-back", "record-lost", "replicas-differ"})),
    # item 3: SIGTERM to broker 2 on a loaded machine (CPU in time slices): the answer to the
    # metadata follower's fetch is handled in the slice whose next step cancels it; wait_for
    # swallows the cancel and the follower runs on (the unbounded stop would hang). Seed 50
    # found it until the heartbeats got their own connection; 57 and 64 of 51-64 since.
    Case("shutdown-swallowed-cancel", 57, 12.0, ("stop-busy",), (), frozenset({0, 4}), frozenset({"bound"})),
    # item 4: SIGSTOP of the active controller; forwarded writes fail after a new one leads
    Case("channel-stays-on-paused-leader", 3, 11.0, ("pause-leader",), ("forward",), frozenset({0}),
         frozenset({"controller-failover"})),
    # item 5: two controllers paused (no quorum), brokers cut off from the controllers: a
    # CreateTopics through broker 0 waits behind its channel's connect lock for an attempt
    # on a paused voter (2 s handshake), answered 4.33 s after it was sent (timeout 3 s)
    Case("forwarded-write-overruns-deadline", 9, 22.0, ("cut-off", "quorum-loss"), ("forward",),
         frozenset({1, 3, 5, 6}), frozenset({"deadline"})),
    # item 6: no fault at all: TxnOffsetCommit with the transaction coordinator on another broker
    Case("txn-offset-commit-unverified", 2, 1.0, ("kill",), ("txn",), frozenset(),
         frozenset({"txn-offset-commit"})),
]


@pytest.mark.parametrize("case", CASES, ids=[c.variant for c in CASES])
def test_defect_found_on_its_seed_and_not_after_the_fix(case: Case) -> None:
    anomaly, trace = case.run(case.variant)
    assert anomaly_kind(anomaly) in case.expected, (
        f"{case.variant}: expected an anomaly of kind {sorted(case.expected)}, got {anomaly!r}\n"
        f"replay: {case.replay} --plant {case.variant}\n{trace}")
    anomaly, trace = case.run(None)
    assert anomaly is None, f"the real code fails the seed: {anomaly}\nreplay: {case.replay}\n{trace}"


def _answer_then_cancel(wait: str, slice_s: float) -> str:
    """A node's task awaits an answer (``wait``: by ``wait_for`` or under
    ``asyncio.timeout``); the answer arrives at 10 ms, a cancel of the task at 20 ms, the
    node running in time slices of ``slice_s`` (0: none). What became of the task."""
    loop = SimLoop(start_s=0.0)

    async def main() -> str:
        run, ctx = loop.node_context(1)
        loop.slice(run, slice_s)
        answer: asyncio.Future[str] = loop.create_future()

        async def request() -> str:
            if wait == "wait_for":
                return await asyncio.wait_for(answer, 10)
            async with asyncio.timeout(10):
                return await answer

        task = loop.create_task(request(), context=ctx)
        loop.call_later(0.010, answer.set_result, "answered", context=ctx)
        loop.call_later(0.020, task.cancel, context=ctx)
        await asyncio.wait((task,), timeout=1.0)
        if task.cancelled():
            return "cancelled"
        return f"{task.result()}, cancel swallowed" if task.cancelling() else task.result()

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_node_in_time_slices_handles_what_fell_due_meanwhile_in_one_iteration() -> None:
    """The loop model item 3's seed rests on (``SimLoop.slice``, the ``stop-busy`` fault):
    an answer and a cancel that fall due 10 ms apart between two slices are handled in one
    iteration, where ``wait_for`` returns the answer and swallows the cancel and
    ``asyncio.timeout`` lets the cancel through; without slices the answer is in before
    the cancel, either way."""
    assert _answer_then_cancel("wait_for", 0.05) == "answered, cancel swallowed"
    assert _answer_then_cancel("timeout", 0.05) == "cancelled"
    assert _answer_then_cancel("wait_for", 0.0) == "answered"
    assert _answer_then_cancel("timeout", 0.0) == "answered"


def test_shrinking_keeps_the_anomaly_with_fewer_faults() -> None:
    """A planted bug's failing seed shrinks to fewer faults and a shorter run that fail
    with the same kind of anomaly, and replaying the shrunk schedule fails the same way."""
    first = simulate(SHRINK_SEED, duration_s=SHRINK_DURATION_S, kinds=SHRINK_KINDS, plant=SHRINK_PLANT)
    got = shrink(SHRINK_SEED, duration_s=SHRINK_DURATION_S, kinds=SHRINK_KINDS, plant=SHRINK_PLANT, first=first)
    assert got is not None, "the planted bug's seed no longer fails: pick another"
    assert len(got.faults) < len(first.applied) and got.duration_s < SHRINK_DURATION_S, got.replay()
    r = simulate(SHRINK_SEED, duration_s=got.duration_s, kinds=SHRINK_KINDS, plant=SHRINK_PLANT,
                 only=frozenset(got.faults))
    assert anomaly_kind(r.anomaly) == got.kind == anomaly_kind(first.anomaly), got.replay()
    assert r.trace == got.result.trace  # the replay command replays it exactly


SHRINK_PLANT = "acks-before-hw"
SHRINK_SEED = 3
SHRINK_DURATION_S = 15.0
SHRINK_KINDS = ("kill", "pause", "partition", "one-way")


def test_command_line_refuses_bad_fault_indices_and_probes(capsys: pytest.CaptureFixture[str]) -> None:
    from hightide.sim.__main__ import main
    assert main(["--seed", "1", "--only-faults", "1,x"]) == 2
    assert "--only-faults takes fault indices" in capsys.readouterr().err
    assert main(["--seed", "1", "--probes", "nosuch"]) == 2
    assert "unknown probe(s) nosuch" in capsys.readouterr().err
