"""``hightide dev-cluster``: refusals and start-up failures as one line with a non-zero
exit and no process left behind; the full run (start, states, Ctrl-C) is in
test_dev_cluster_run.py."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from click.testing import CliRunner

from hightide.cli import main


def _processes_using(path: Path) -> list[int]:
    """Pids whose command line mentions ``path`` (children a run may have left)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline:
            out.append(int(pid))
    return out


def test_a_controller_count_out_of_range_is_refused_in_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["dev-cluster", "--controllers", "0", "--data-dir", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == (
        "Error: Invalid value for '--controllers': 0 is not in the range 1<=x<=9.")
    assert not list(tmp_path.iterdir())


def _two_adjacent_listeners() -> tuple[socket.socket, socket.socket]:
    """Listening sockets on ports P and P+1, both held by this test: the layout of one
    broker and one controller from ``--base-port P`` is then wholly taken by us, so which
    port the run names does not depend on what else the machine is doing (a lone P let an
    unrelated process holding P+1 decide the answer)."""
    for _ in range(50):
        first = socket.socket()
        first.bind(("127.0.0.1", 0))
        second = socket.socket()
        try:
            second.bind(("127.0.0.1", first.getsockname()[1] + 1))
        except OSError:
            first.close()
            second.close()
            continue
        first.listen()
        second.listen()
        return first, second
    raise AssertionError("no two adjacent free ports on 127.0.0.1 in 50 tries")


def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    first, second = _two_adjacent_listeners()
    with first, second:
        port = first.getsockname()[1]
        r = CliRunner().invoke(main, ["dev-cluster", "--brokers", "1", "--base-port", str(port),
                                      "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 1
    # Controllers start first, so the first taken port named is the controller's (P+1).
    assert r.output.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port + 1} (controller-3000): address already in use "
        "(choose another --base-port)"]
    assert not _processes_using(tmp_path)


def test_a_taken_broker_port_is_named(tmp_path: Path) -> None:
    first, second = _two_adjacent_listeners()
    second.close()  # the controller's port is free again; only the broker's is taken
    with first:
        port = first.getsockname()[1]
        r = CliRunner().invoke(main, ["dev-cluster", "--brokers", "1", "--base-port", str(port),
                                      "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    # P+1 was free a moment ago; if another process grabbed it since, it is named instead.
    assert lines in ([f"Error: cannot listen on 127.0.0.1:{port} (broker-0): address already in use "
                      "(choose another --base-port)"],
                     [f"Error: cannot listen on 127.0.0.1:{port + 1} (controller-3000): address already "
                      "in use (choose another --base-port)"]), lines
    assert not _processes_using(tmp_path)


def test_a_node_failing_at_start_is_one_line_and_stops_the_rest(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["dev-cluster", "--brokers", "2", "--base-port", "0", "--data-dir",
                                  str(tmp_path / "d"), "--set", "broker.session.timeout.ms=-5"])
    assert r.exit_code == 1
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("Error: controller-3000 exited with 1: ") and "broker.session.timeout.ms" in last
    assert len(last) < 200
    assert not _processes_using(tmp_path)
    assert (tmp_path / "d" / "logs" / "controller-3000.log").exists()


def test_a_bad_set_is_a_usage_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["dev-cluster", "--set", "novalue", "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and "expected NAME=VALUE, got 'novalue'" in r.output


def test_a_data_dir_held_by_another_process_is_one_line(tmp_path: Path) -> None:
    from hightide.log.dirlock import DirLock
    held = tmp_path / "d" / "controller-3000"
    held.mkdir(parents=True)
    lock = DirLock.acquire(str(held))
    try:
        r = CliRunner().invoke(main, ["dev-cluster", "--brokers", "1", "--base-port", "0",
                                      "--data-dir", str(tmp_path / "d")])
    finally:
        lock.release()
    assert r.exit_code == 1
    last = r.output.strip().splitlines()[-1]
    assert last == (f"Error: controller-3000 exited with 1: hightide: data directory {held} is in use by "
                    f"another hightide process (pid {os.getpid()})"), last
    assert not _processes_using(tmp_path)


def test_other_controllers_on_an_existing_data_dir_are_refused_in_one_line(tmp_path: Path) -> None:
    """Issue 26 item 2: the dirs of a 1-controller cluster started with --controllers 3
    (two new empty voters would elect one of themselves and empty the metadata log)."""
    from hightide.devcluster import format_dirs, plan
    cid = format_dirs(plan(2, tmp_path / "d"))
    r = CliRunner().invoke(main, ["dev-cluster", "--brokers", "2", "--controllers", "3", "--base-port", "0",
                                  "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        f"Error: {tmp_path / 'd'} holds cluster {cid} with controllers 3000; asked for controllers "
        "3000,3001,3002: refusing to start (use --controllers 1, or another --data-dir)"]
    assert not (tmp_path / "d" / "controller-3001").exists()
    assert not _processes_using(tmp_path)
