"""SIGTERM brokers during metadata churn, 20 times (by default): each must exit cleanly
within the bound (issue 26 item 3).

Run:  .venv/bin/python bench/shutdown_cycles.py [--cycles 20] [--brokers 3] [--out FILE]

Same code as ``tests/cluster/test_shutdown.py`` (``tests/cluster/shutdown_cycles.py``),
longer: a controller and ``--brokers`` brokers; each cycle creates and deletes topics
(RF 3) and, while more churn is in flight, SIGTERMs one broker (round robin), which must
exit with code 0 within ``bound_s``, log "stopped cleanly" and no traceback; it is then
restarted and the cluster waits until it is unfenced. Prints one JSON document (progress
on stderr): stops, exit time max/p50, hangs (not exited within the bound: killed),
unclean stops and their details; exits 1 on any hang or unclean stop.
"""

from __future__ import annotations

import argparse
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

from tests.cluster.harness import ClusterHarness  # noqa: E402
from tests.cluster.shutdown_cycles import run_cycles, summary  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    load_before = os.getloadavg()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="shutdown-cycles-") as tmp:
        c = ClusterHarness(Path(tmp), args.brokers)
        try:
            c.start(timeout=90)
            stops = run_cycles(c, args.cycles, log=_limits.log)
        finally:
            c.close(timeout=10)
    result = summary(stops)
    out = {
        "benchmark": "shutdown_cycles",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "commit": _limits.git_revision(),
        "machine": _limits.machine(),
        "loadavg_before_after": [round(x, 2) for x in (*load_before, *os.getloadavg())],
        "brokers": args.brokers,
        **result,
        "ok": result["hangs"] == 0 and result["unclean"] == 0,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
