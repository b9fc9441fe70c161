"""Restart cycles of a group coordinator with the controllers paused (issue 26, item 1):
kill -9 the coordinator of a group, commit at the new one, SIGSTOP the controller(s),
restart the old coordinator and ask it FindCoordinator / OffsetFetch / OffsetCommit while
it cannot reach them, SIGCONT them, and check the committed offset is the newest
acknowledged one. 20 cycles by default.

Run:  .venv/bin/python bench/restart_cycles.py [--cycles 20] [--brokers 3] [--controllers 1]

Same code as ``tests/cluster/test_restart_catch_up.py`` (``tests/cluster/restart_cycles.py``),
more cycles. Prints one JSON document (progress on stderr): cycles, commits acknowledged,
commits lost, stale answers of the restarted broker before its catch-up (FindCoordinator
naming itself, OffsetFetch answering an offset), commits it acknowledged then, the time
from the controllers' resume until it serves FindCoordinator (p50, max) and from its exec
to accepting connections; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import _limits  # noqa: E402

from tests.cluster import restart_cycles  # noqa: E402
from tests.cluster.harness import ClusterHarness  # noqa: E402

log = _limits.log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--controllers", type=int, default=1)
    ap.add_argument("--probe-s", type=float, default=1.5, help="how long the restarted broker is probed")
    ap.add_argument("--session-timeout-ms", type=int, default=5000)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    settings = {"broker.session.timeout.ms": args.session_timeout_ms, "offsets.topic.num.partitions": 3}
    with tempfile.TemporaryDirectory(prefix="restart-cycles-") as tmp:
        c = ClusterHarness(Path(tmp), args.brokers, n_controllers=args.controllers, settings=settings)
        load_before = os.getloadavg()
        t0 = time.time()
        try:
            c.start(wait_unfenced=True, timeout=120)

            def progress(i: int, stats: restart_cycles.Stats) -> None:
                log(f"cycle {i + 1}/{args.cycles}: acknowledged {stats.commits_acknowledged}, lost "
                    f"{stats.commits_lost}, stale answers {stats.stale_answers}, served "
                    f"{stats.serve_after_resume_s[-1]:.2f} s after the resume")
            stats = asyncio.run(restart_cycles.run(c, args.cycles, probe_s=args.probe_s, progress=progress))
        finally:
            c.close()
        result = {"bench": "restart_cycles", "brokers": args.brokers, "controllers": args.controllers,
                  "probe_s": args.probe_s, "session_timeout_ms": args.session_timeout_ms,
                  **stats.summary(), "elapsed_s": round(time.time() - t0, 1),
                  "loadavg_before": [round(x, 2) for x in load_before],
                  "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    sys.exit(1 if stats.violations else 0)


if __name__ == "__main__":
    main()
