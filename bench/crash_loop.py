"""The long crash loop: SIGKILL a real ``hightide serve`` 200 times (by default) under
idempotent acks=all producers on several partitions, a committing consumer group and a
share-group consumer.

Run:  .venv/bin/python bench/crash_loop.py [--kills 200] [--partitions 6] [--producers 3]

Same code as ``tests/reliability/test_crash_loop.py`` (``tests/reliability/crashloop.py``),
longer: after every restart the group's committed offsets must read back neither
behind the last confirmed commit nor ahead of what was acknowledged, and the
share-partition start offsets neither go backwards nor pass the log end; at the end every
acknowledged record must be present exactly once, in each producer's order, at its
acknowledged offset with its timestamp, and delivered to the share group at least once.
Prints one JSON document (progress on stderr)
with the recovery time (exec of ``hightide serve`` -> accepting connections, p50/p99/max)
and the time from each kill to the next acknowledgement; exits 1 on any violation.
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

from tests.conftest import ServerProcess  # noqa: E402
from tests.reliability import crashloop  # noqa: E402


log = _limits.log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-share", action="store_true", help="leave out the share-group consumer")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="crash-loop-") as tmp:
        started: list[ServerProcess] = []

        def start(data_dir, port):
            srv = ServerProcess(Path(data_dir) if data_dir else Path(tmp) / "data", port).start()
            started.append(srv)
            return srv

        load_before = os.getloadavg()
        t0 = time.time()
        result = crashloop.run(start, "crash-loop", kills=args.kills, partitions=args.partitions,
                               producers=args.producers, share=not args.no_share, seed=args.seed,
                               progress=log)
        srv = result.pop("server")
        tracebacks = sum(s.output().count("Traceback") for s in started)
        srv.stop()
        out = {
            "benchmark": "crash_loop",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
            "commit": _limits.git_revision(),
            "machine": _limits.machine(),
            "loadavg_before_after": [round(x, 2) for x in (*load_before, *os.getloadavg())],
            **result,
            "broker_tracebacks": tracebacks,
            "ok": not result["violations"] and tracebacks == 0,
        }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
