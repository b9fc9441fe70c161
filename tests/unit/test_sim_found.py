"""Seeds on which the whole-cluster simulation (issue 28) found a defect in the product,
kept as regression tests: each failed on the code before its fix and must hold after."""

from __future__ import annotations

from hightide.sim.batch import Job, run_jobs
from hightide.sim.run import simulate

ALL_NETWORK_AND_NODE_FAULTS = ("kill", "stop", "pause", "partition", "one-way", "sever", "slow", "clock")


def test_a_new_leader_never_shows_a_high_watermark_below_the_old_one() -> None:
    """Seed 69 (the finding was seed 57 of the schedule before faults were drawn by
    index): after a leader change the new leader's HW still lagged the start of its leader epoch and a Fetch
    answered it (sim-2: 288, then 285). A new leader now answers a consumer's Fetch
    OFFSET_NOT_AVAILABLE until its HW reaches its epoch start, as Kafka's ListOffsets
    does. On the code before the fix this seed fails (also with another PYTHONHASHSEED)."""
    r = simulate(69, duration_s=30.0, kinds=ALL_NETWORK_AND_NODE_FAULTS)
    assert r.ok, (f"{r.anomaly}\nreplay: python -m hightide.sim --seed 69 --duration 30 "
                  f"--faults {','.join(ALL_NETWORK_AND_NODE_FAULTS)} --trace --logs\n" + "\n".join(r.trace[-20:]))


def test_a_broker_whose_operator_restart_was_under_way_at_healing_is_restarted() -> None:
    """Seed 1030 of 10 s (bench/cluster_sim.py, 2026-11-29; the simulator's own defect):
    broker 2's fsync failed at 6.3 s; at 12.2 s its operator restart began (the ordered
    stop, then a start) and healing, a moment later, cancelled that step in the middle:
    the broker went on stopping, was never started again, and its replicas could not
    catch up (``replicas {2: None, ...} did not catch up``). The same pattern as seeds 17
    and 23 of the schedule before faults were drawn by index (``closing log sim-0
    failed``). Healing now lets an undo step that has begun finish. Run as its replay
    command runs it (a worker with the command line's hash seed)."""
    job = Job(1030, 10.0)
    (outcome,) = run_jobs([job], 1)
    assert outcome.ok, outcome.report()
