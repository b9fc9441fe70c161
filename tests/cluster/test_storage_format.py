"""A controller quorum started by hand, as docs/cluster.md's "Running a quorum" shows:
``hightide storage random-uuid``, ``hightide storage format`` of each voter's dir with the
flags that start it, then ``hightide serve`` with the same flags: a leader is elected.
Started on unformatted dirs the voters used to elect nobody, forever (each wrote its own
random cluster id and none had a voter set); now ``serve`` refuses an unformatted quorum
voter's dir in one line naming the format command, and a voter whose dir has only
``meta.properties`` says at start that it will not vote until it follows a leader."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hightide.devcluster import free_ports
from hightide.log.data_dir import write_meta_properties
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

HIGHTIDE = [sys.executable, "-m", "hightide"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def hightide(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HIGHTIDE, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def node_flags(node_id: int, data_dir: Path, ports: list[int]) -> list[str]:
    """The flags of docs/cluster.md's "Running a quorum" for one voter."""
    voters = ",".join(f"{3000 + i}@127.0.0.1:{p}" for i, p in enumerate(ports))
    return ["--node-id", str(node_id), "--data-dir", str(data_dir), "--set", "process.roles=controller",
            "--set", f"listeners=CONTROLLER://127.0.0.1:{ports[node_id - 3000]}",
            "--set", "controller.listener.names=CONTROLLER", "--set", f"controller.quorum.voters={voters}"]


class Serve:
    """One ``hightide serve`` process; its stderr collected by a thread."""

    def __init__(self, flags: list[str]) -> None:
        self.proc = subprocess.Popen([*HIGHTIDE, "serve", *flags], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=ENV)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def test_a_quorum_formatted_and_started_by_hand_elects_a_leader(tmp_path: Path) -> None:
    ports = free_ports(3)
    r = hightide("storage", "random-uuid")
    assert r.returncode == 0, r.stderr
    cid = r.stdout.strip()
    for i in range(3):
        f = hightide("storage", "format", "--cluster-id", cid, *node_flags(3000 + i, tmp_path / f"c{i}", ports))
        assert f.returncode == 0, f.stdout + f.stderr
    nodes = [Serve(node_flags(3000 + i, tmp_path / f"c{i}", ports)) for i in range(3)]
    try:
        controllers = ",".join(f"127.0.0.1:{p}" for p in ports)

        def leader() -> re.Match[str] | None:
            d = hightide("metadata-quorum", "describe", "--status", "--bootstrap-controller", controllers)
            m = re.search(r"LeaderId:\s+(\d+)", d.stdout)
            return m if m and f"ClusterId:              {cid}" in d.stdout else None
        m = wait_until(leader, 30, interval=0.5, what="a leader of the hand-started quorum")
        assert int(m.group(1)) in (3000, 3001, 3002)
        assert not any("not formatted" in line for n in nodes for line in n.lines)
    finally:
        codes = [n.stop() for n in nodes]
    assert codes == [0, 0, 0], [n.lines[-5:] for n in nodes]


def test_serve_refuses_an_unformatted_quorum_voter(tmp_path: Path) -> None:
    ports = free_ports(3)
    d = tmp_path / "c0"
    t0 = time.monotonic()
    r = hightide("serve", *node_flags(3000, d, ports), timeout=30)
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("hightide: ") and "not formatted" in line and "hightide storage format" in line, r.stderr
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 30
    assert not (d / "meta.properties").exists()  # no random cluster id of its own


def test_a_voter_with_only_meta_properties_says_it_will_not_vote(tmp_path: Path) -> None:
    ports = free_ports(3)
    d = tmp_path / "c0"
    write_meta_properties(str(d), "k5oQb1cTQ7yL8rPZ2JXw3A", 3000)  # a wiped voter: the cluster's meta.properties only
    node = Serve(node_flags(3000, d, ports))
    try:
        line = wait_until(lambda: next((x for x in node.lines if "not formatted for voters" in x), None), 30,
                          what="the unformatted-voter warning")
        assert "WARNING" in line and str(d) in line and "3000,3001,3002" in line and "will not vote" in line
        assert "hightide storage format" in line
    finally:
        assert node.stop() == 0


def test_a_controller_without_static_voters_starts_again_on_its_dir(tmp_path: Path) -> None:
    """It runs alone (no Raft): its dir records itself as its voter set; the next start
    used to be refused ("configured voters are : refusing to start")."""
    port = free_ports(1)[0]
    flags = ["--node-id", "3000", "--data-dir", str(tmp_path / "c"), "--set", "process.roles=controller",
             "--set", f"listeners=CONTROLLER://127.0.0.1:{port}", "--set", "controller.listener.names=CONTROLLER"]
    metadata = tmp_path / "c" / "__cluster_metadata-0"
    for must_have_log in (True, False):
        node = Serve(flags)
        try:
            def ready() -> bool:
                listening = any("listening on" in x for x in node.lines)
                written = not must_have_log or any(f.stat().st_size for f in metadata.glob("*.log"))
                return node.proc.poll() is not None or listening and written
            wait_until(ready, 30, what="the controller listening, its metadata log written")
        finally:
            code = node.stop()
        assert code == 0, node.lines[-3:]
