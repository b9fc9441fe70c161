"""The broker-lifecycle core under a seeded simulation (tests/unit/cluster_lifecycle_simulator.py):
brokers heartbeating with jitter over a lossy, delaying network, with pauses, crashes,
restarts under new incarnations, controlled shutdowns, failed appends and controller
failovers; invariants are checked after every event. A failure names its seed:
``simulate(seed)`` replays it. bench/cluster_lifecycle_sim.py runs thousands of seeds."""

from __future__ import annotations

import dataclasses

import pytest

from hightide.cluster.lifecycle import BrokerLifecycle

from tests.unit.cluster_lifecycle_simulator import InvariantViolation, Params, Stats, simulate

SEEDS = 100  # per mode: 200 runs, a few seconds


def _run_seeds(params: Params, seeds: int = SEEDS) -> list[Stats]:
    out = []
    for seed in range(seeds):
        try:
            out.append(simulate(seed, params))
        except InvariantViolation as exc:
            pytest.fail(f"{exc}\n(params: {params})")
    return out


@pytest.mark.parametrize("fetch_acks", [False, True], ids=["heartbeat-acks", "fetch-acks"])
def test_invariants_hold_for_every_seed(fetch_acks):
    stats = _run_seeds(Params(fetch_acks=fetch_acks))
    total = {f.name: sum(getattr(s, f.name) for s in stats) for f in dataclasses.fields(Stats) if f.name != "seed"}
    # the faults really happened, so the invariants were exercised
    for name in ("crashes", "pauses", "duplicates", "fenced_by_timeout", "controlled_shutdowns", "unfenced",
                 "failovers"):
        assert total[name] > 0, (name, total)
    assert all(s.lowest_published > 0 for s in stats)  # the seed's offset moved in every run


@pytest.mark.parametrize("brokers", [1, 5])
def test_invariants_hold_with_one_and_five_brokers(brokers):
    stats = _run_seeds(Params(brokers=brokers, fetch_acks=brokers == 5), seeds=20)
    assert sum(s.unfenced for s in stats) >= 20 and sum(s.fenced_by_timeout for s in stats) > 0


def test_a_seed_replays_exactly():
    assert simulate(7) == simulate(7)
    assert simulate(7) != simulate(8)


def test_the_invariants_catch_kafkas_catch_up_rule(monkeypatch):
    """Unfencing a broker as soon as it applied its own registration record (Kafka's rule,
    without hightide's floor) lets the lowest acknowledged offset go backwards; the
    simulator must notice within the seeds the test runs."""
    monkeypatch.setattr(BrokerLifecycle, "catch_up_offset", lambda self, reg: reg.registration_offset)
    with pytest.raises(InvariantViolation, match=r"seed=\d+ .*replay: simulate"):
        for seed in range(SEEDS):
            simulate(seed)
