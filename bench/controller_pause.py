"""Metadata writes while controllers are paused (issue 26, items 4 and 5), repeated.

* Pause cycles: SIGSTOP the active controller of a 3-voter quorum, send CreateTopics
  through a broker until one succeeds, SIGCONT; how long writes stalled (p50, max). Before
  the fix the brokers' lifecycle channel stayed on the paused leader until a heartbeat
  timed out (~6.6 s with a 9 s session).
* No-quorum rounds: pause two voters, send bursts of several CreateTopics at once with
  ``timeout_ms``; each must answer REQUEST_TIMED_OUT by its timeout (before the fix, once
  the broker's channel was reconnecting, they queued behind one connection lock with 2 s
  handshakes: 5.6-17.8 s for a 3 s timeout).

Run:  .venv/bin/python bench/controller_pause.py [--cycles 20] [--rounds 5]

Same code as the two tests in ``tests/cluster/test_quorum_failover.py``
(``tests/cluster/controller_pause.py``), more cycles. Prints one JSON document (progress
on stderr); exits 1 if a pause cycle never resumed or a forwarded write overran its
timeout by more than ``--slack-s``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import _limits  # noqa: E402

from tests.cluster.controller_pause import TIMED_OUT, no_quorum_round, pause_leader_cycle  # noqa: E402
from tests.cluster.harness import ClusterHarness  # noqa: E402

log = _limits.log


def _quantiles(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "max": None}
    return {"p50": round(statistics.median(xs), 3), "max": round(max(xs), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=20, help="SIGSTOP-the-leader cycles")
    ap.add_argument("--rounds", type=int, default=5, help="no-quorum pauses (each: --bursts bursts of --callers writes)")
    ap.add_argument("--bursts", type=int, default=3, help="bursts of writes at once per no-quorum pause (the "
                    "later ones meet the broker's channel reconnecting)")
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--timeout-ms", type=int, default=3000, help="CreateTopics timeout_ms in the no-quorum rounds")
    ap.add_argument("--session-timeout-ms", type=int, default=9000, help="brokers' session (Kafka's default 9 s)")
    ap.add_argument("--slack-s", type=float, default=1.5, help="allowed overrun of a timeout on a loaded machine")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    settings = {"broker.session.timeout.ms": args.session_timeout_ms}
    stalls: list[float] = []
    never: list[dict] = []
    answers: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="controller-pause-") as tmp:
        c = ClusterHarness(Path(tmp), 1, n_controllers=3, settings=settings)
        load_before = os.getloadavg()
        t0 = time.time()
        try:
            c.start(wait_unfenced=True, timeout=120)
            for i in range(args.cycles):
                cycle = pause_leader_cycle(c, f"pause{i}")
                if cycle.resumed_s is None:
                    never.append({"cycle": i, "leader": cycle.leader, "attempts": cycle.attempts})
                else:
                    stalls.append(cycle.resumed_s)
                log(f"pause cycle {i + 1}/{args.cycles}: leader {cycle.leader}, writes resumed after "
                    f"{cycle.resumed_s} s ({len(cycle.attempts)} attempts)")
                c.wait_leader(timeout=30)
                time.sleep(1.0)  # the resumed voter rejoins as a follower
            for r in range(args.rounds):
                got = no_quorum_round(c, f"nq{r}", callers=args.callers, rounds=args.bursts, timeout_ms=args.timeout_ms)
                answers += got
                log(f"no-quorum round {r + 1}/{args.rounds}: {got}")
                c.wait_leader(timeout=30)
                time.sleep(1.0)
        finally:
            c.close()
    bound = args.timeout_ms / 1000 + args.slack_s
    late = [a for a in answers if a[0] > bound]
    wrong = [a for a in answers if a[1] != TIMED_OUT]
    result = {"bench": "controller_pause", "voters": 3, "brokers": 1,
              "session_timeout_ms": args.session_timeout_ms,
              "pause_cycles": args.cycles, "writes_resumed_s": _quantiles(stalls), "never_resumed": never,
              "no_quorum_writes": len(answers), "timeout_ms": args.timeout_ms,
              "answered_s": _quantiles([a[0] for a in answers]), "over_bound": late,
              "not_request_timed_out": wrong, "elapsed_s": round(time.time() - t0, 1),
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    sys.exit(1 if never or late else 0)


if __name__ == "__main__":
    main()
