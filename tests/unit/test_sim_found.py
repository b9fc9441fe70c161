"""Seeds on which the whole-cluster simulation (issue 28) found a defect in the product,
kept as regression tests: each failed on the code before its fix and must hold after."""

from __future__ import annotations

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
