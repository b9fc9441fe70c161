"""``hightide dev-cluster`` end to end: it starts a controller and two brokers, prints
the bootstrap string and each broker's state in 80 columns, serves clients, reports a
broker that dies, and on SIGINT stops the other nodes cleanly and exits 0."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hightide.cli import main

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_dev_cluster_starts_serves_reports_a_dead_broker_and_stops_on_sigint(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "dev-cluster", "--brokers", "2", "--base-port", "0",
                             "--data-dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    pids: list[int] = []

    def until(pattern: str, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                assert proc.poll() is None, f"dev-cluster exited {proc.returncode}:\n" + "\n".join(seen)
                continue
            seen.append(line)
            pids.extend(int(p) for p in re.findall(r"\(pid (\d+)\)", line))
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n" + "\n".join(seen))
    try:
        bootstrap = until(r"^bootstrap: ").split(": ", 1)[1]
        assert re.fullmatch(r"127\.0\.0\.1:\d+,127\.0\.0\.1:\d+", bootstrap)
        until(r"all 2 brokers unfenced; Ctrl-C stops the cluster")
        assert len(pids) == 3
        assert any(re.search(r"broker 0 +unfenced", x) for x in seen)
        r = CliRunner().invoke(main, ["brokers", "-b", bootstrap], catch_exceptions=False)
        assert r.exit_code == 0 and r.output.count("unfenced") == 2, r.output
        os.kill(pids[2], signal.SIGKILL)  # broker-1 (controller, broker-0, broker-1 in start order)
        until(r"broker 1 +exited \(-9\)")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        reader.join(5)
        while not lines.empty():
            seen.append(lines.get())
        out = "\n".join(seen)
        for name in ("broker-0", "controller-3000"):
            assert f"{name} stopped (exit 0)" in out, out
        assert "broker-1 stopped (exit -9)" in out
        assert out.index("broker-0 stopped") < out.index("controller-3000 stopped")  # brokers first
        wide = [x for x in seen if len(x) > 80 and str(tmp_path) not in x]  # (the data dir is the user's path)
        assert not wide, wide
        assert not [p for p in pids if _alive(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_node_restarted_from_a_worker_thread_outlives_the_thread(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG fires when the forking *thread* exits: a node a fault injector
    restarted from its own thread used to be SIGKILLed as soon as that thread ended."""
    from hightide.devcluster import DevCluster, plan
    with DevCluster(plan(0, tmp_path / "d", base_port=None), tmp_path / "d") as dc:
        dc.start(wait_unfenced=False)
        node = dc.controllers[0]
        worker = threading.Thread(target=lambda: node.restart(kill=True))
        worker.start()
        worker.join()
        node.wait_listening(30)
        time.sleep(1.0)
        assert node.alive, f"the node died with its starting thread ({node.returncode})"
