"""Seeds on which the whole-cluster simulation (issue 28) found a defect in the product,
kept as regression tests: each failed on the code before its fix and must hold after."""

from __future__ import annotations

from hightide.sim.run import simulate

ALL_NETWORK_AND_NODE_FAULTS = ("kill", "stop", "pause", "partition", "one-way", "sever", "slow", "clock")


def test_a_new_leader_never_shows_a_high_watermark_below_the_old_one() -> None:
    """Seed 57: broker 1 is stopped (a controlled shutdown) while it leads sim-1; the new
    leader's HW still lagged the start of its leader epoch and a Fetch answered it (33,
    then 30). A new leader now answers a consumer's Fetch OFFSET_NOT_AVAILABLE until its
    HW reaches its epoch start, as Kafka's ListOffsets does."""
    r = simulate(57, duration_s=30.0, kinds=ALL_NETWORK_AND_NODE_FAULTS)
    assert r.ok, (f"{r.anomaly}\nreplay: python -m hightide.sim --seed 57 --duration 30 "
                  f"--faults {','.join(ALL_NETWORK_AND_NODE_FAULTS)} --trace --logs\n" + "\n".join(r.trace[-20:]))
