"""The operating tools on a controller quorum: ``hightide metadata-quorum describe``
finds the active controller from any voter's address and shows every voter and observer
(a killed voter's lag and stale fetch times included), also through a broker; and
``hightide dev-cluster --controllers 3`` runs a quorum, reports a controller that dies
while the cluster goes on, and stops everything on SIGINT."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hightide.cli import main
from tests.waiting import wait_until

from .conftest import ClusterFactory
from .test_dev_cluster_run import _alive


def describe(*args: str) -> Any:
    r = CliRunner().invoke(main, ["metadata-quorum", "describe", "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_metadata_quorum_shows_every_voter_and_observer_from_any_voter(cluster: ClusterFactory) -> None:
    h = cluster(3, controllers=3)
    leader = h.quorum_leader()
    ids = sorted(n.spec.node_id for n in h.controllers)
    follower = next(n for n in h.controllers if n.spec.node_id != leader)
    status = describe("--status", "--bootstrap-controller", follower.spec.address)  # not the leader's address
    assert status["leader_id"] == leader and status["leader_epoch"] >= 1 and status["high_watermark"] > 0
    assert [v["id"] for v in status["current_voters"]] == ids
    assert all(v["endpoints"] == [f"CONTROLLER://{h.address(v['id'])}"] for v in status["current_voters"])
    assert sorted(o["id"] for o in status["current_observers"]) == [0, 1, 2]
    via_broker = describe("--status", "-b", h.bootstrap)  # forwarded to the active controller
    assert via_broker["leader_id"] == leader and via_broker["lowest_acknowledged_offset"] is not None

    killed_ms = int(time.time() * 1000)
    h.kill(follower.spec.node_id)

    def lagging() -> Any:  # the dead voter lags while everyone else has fetched since the kill
        rows = {r["node_id"]: r for r in describe("--replication", "--bootstrap-controller", h.bootstrap_controller)}
        others = [r for i, r in rows.items() if i not in (follower.spec.node_id, rows_leader(rows))]
        fresh = all(r["last_fetch_timestamp"] > killed_ms for r in others)
        return rows if rows[follower.spec.node_id]["lag"] > 0 and fresh else None
    rows = wait_until(lagging, 20, what=f"voter {follower.spec.node_id} lagging after its kill")
    assert [rows[i]["status"] for i in ids] == ["Leader" if i == leader else "Follower" for i in ids]
    assert [rows[b]["status"] for b in (0, 1, 2)] == ["Observer"] * 3
    dead = rows[follower.spec.node_id]
    assert dead["last_fetch_timestamp"] <= killed_ms and dead["last_caught_up_timestamp"] <= killed_ms
    alive = [rows[i] for i in ids if i != follower.spec.node_id] + [rows[b] for b in (0, 1, 2)]
    assert all(r["last_fetch_timestamp"] > killed_ms for r in alive), rows


def rows_leader(rows: dict[int, Any]) -> int:
    return next(i for i, r in rows.items() if r["status"] == "Leader")


def test_dev_cluster_runs_a_quorum_and_survives_a_controller_exit(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "dev-cluster", "--controllers", "3", "--brokers", "2",
                             "--base-port", "0", "--data-dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    assert proc.stdout is not None
    def read() -> None:
        assert proc.stdout is not None
        for x in proc.stdout:
            lines.put(x.rstrip("\n"))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    pids: dict[str, int] = {}

    def until(pattern: str, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                assert proc.poll() is None, f"dev-cluster exited {proc.returncode}:\n" + "\n".join(seen)
                continue
            seen.append(line)
            m = re.search(r"^\s+(\S+)\s.*\(pid (\d+)\)", line)
            if m:
                pids[m.group(1)] = int(m.group(2))
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n" + "\n".join(seen))
    try:
        assert re.search(r": 3 controllers, 2 brokers$", until(r"^dev cluster "))
        controllers = until(r"^controllers: ").split(": ", 1)[1]
        assert len(controllers.split(",")) == 3
        until(r"all 2 brokers unfenced; Ctrl-C stops the cluster")
        assert sorted(pids) == ["broker-0", "broker-1", "controller-3000", "controller-3001", "controller-3002"]
        leader = describe("--status", "--bootstrap-controller", controllers)["leader_id"]
        os.kill(pids[f"controller-{leader}"], signal.SIGKILL)
        until(rf"controller-{leader} exited \(-9\)")
        bootstrap = next(x for x in seen if x.startswith("bootstrap: ")).split(": ", 1)[1]
        r = CliRunner().invoke(main, ["topics", "create", "after-the-leader-died", "-b", bootstrap])
        assert r.exit_code == 0, r.output  # a new leader took over: metadata writes go on
        assert describe("--status", "--bootstrap-controller", controllers)["leader_id"] != leader
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        reader.join(5)
        while not lines.empty():
            seen.append(lines.get())
        out = "\n".join(seen)
        assert "stopping: brokers first, then the controllers" in out
        assert f"controller-{leader} stopped (exit -9)" in out
        assert out.index("broker-0 stopped") < out.index(f"controller-{3000 if leader != 3000 else 3001} stopped")
        assert not [p for p in pids.values() if _alive(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
