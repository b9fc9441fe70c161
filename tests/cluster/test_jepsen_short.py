"""A short Jepsen-style run (bench/jepsen) in CI: a controller and three brokers behind
fault proxies, a topic with three replicas (min.insync.replicas=2), idempotent acks=all
producers, two consumer groups (classic and KIP-848) committing, a share group, and a
nemesis that kill -9s, pauses and partitions brokers for 15 s; the checker must find
nothing (no acknowledged write lost, no duplicate, order kept, no poll or committed offset
going backwards, nothing visible then gone).

The long run (hundreds of faults) is ``bench/jepsen/run.py``; the checker's own tests
(each check fires on a violating history) are tests/unit/test_jepsen_checker.py.
"""

from __future__ import annotations

import json

from bench.jepsen.run import run


def test_short_jepsen_run_finds_no_anomaly(tmp_path):
    result = run(brokers=3, duration=15.0, faults=["kill", "pause", "partition"], seed=5, partitions=3,
                 replication_factor=3, producers=2, rate=50.0, base_dir=tmp_path / "cluster",
                 history_path=tmp_path / "history.jsonl")
    report = result.pop("check")
    summary = json.dumps({**result, "stats": report["stats"],
                          "anomalies": {k: v for k, v in report["checks"].items() if v["count"]}}, indent=1)
    assert result["replication_factor"] == 3, summary
    assert report["valid"], summary
    assert result["faults_injected"] >= 2, summary
    assert not result["final_read_problems"] and not result["nemesis_errors"], summary
    stats = report["stats"]
    assert stats["acknowledged"] > 100 and stats["final_records"] >= stats["acknowledged"], summary
    assert stats["ops"].get("commit:ok", 0) > 0 and stats["ops"].get("committed:ok", 0) > 0, summary
    assert stats["share_deliveries"] > 0, summary
