"""hightide.devcluster and the test harness: the layout, the command lines (checked by
hightide's own config validation), the shared cluster id, and start-up failures that
stop every node and name the cause."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from hightide.config import BrokerConfig
from hightide.devcluster import (
    CONTROLLER_ID_BASE,
    DevCluster,
    NodeFailed,
    NodeProcess,
    format_dirs,
    plan,
    single_node,
)
from tests.waiting import wait_until

from .harness import HEARTBEAT_MS, SESSION_MS, ClusterHarness, kafka_names


def _settings_of(argv: list[str]) -> dict[str, str]:
    out = {}
    for i, arg in enumerate(argv):
        if arg == "--set":
            name, _, value = argv[i + 1].partition("=")
            out[name] = value
    return out


def _serve_config(argv: list[str]) -> BrokerConfig:
    """What ``hightide serve`` would make of ``argv`` (its --set and --node-id)."""
    extra: dict[str, object] = dict(_settings_of(argv))
    extra["node.id"] = int(argv[argv.index("--node-id") + 1])
    return BrokerConfig.load(None, extra)


def test_plan_lays_out_one_controller_and_brokers_on_consecutive_ports(tmp_path: Path) -> None:
    specs = plan(3, tmp_path, base_port=19092)
    assert [(s.node_id, s.roles, s.port) for s in specs] == [
        (CONTROLLER_ID_BASE, ("controller",), 19095), (0, ("broker",), 19092),
        (1, ("broker",), 19093), (2, ("broker",), 19094)]
    assert [s.data_dir for s in specs] == [tmp_path / "controller-3000", tmp_path / "broker-0",
                                           tmp_path / "broker-1", tmp_path / "broker-2"]
    assert len({s.port for s in plan(5, tmp_path)}) == 6  # free ports: all different


def test_commands_are_valid_serve_configs_with_kafka_names(tmp_path: Path) -> None:
    specs = plan(2, tmp_path, base_port=19092, heartbeat_interval_ms=250, session_timeout_ms=3000,
                 read_consistency="local", settings={"num.partitions": 3})
    for spec in specs:
        argv = spec.command("python3")
        assert argv[:4] == ["python3", "-m", "hightide", "serve"]
        assert argv[argv.index("--data-dir") + 1] == str(spec.data_dir)
        settings = _settings_of(argv)
        assert settings["controller.quorum.voters"] == "3000@127.0.0.1:19094"
        assert settings["controller.listener.names"] == "CONTROLLER"
        assert settings["broker.heartbeat.interval.ms"] == "250"
        assert settings["broker.session.timeout.ms"] == "3000"
        assert settings["metadata.read.consistency"] == "local"
        assert settings["num.partitions"] == "3"
        cluster = _serve_config(argv).cluster_settings()  # hightide's own validation accepts it
        assert cluster.node_id == spec.node_id and not cluster.single_node
        assert cluster.heartbeat_interval_ms == 250 and cluster.read_consistency == "local"
        if spec.is_controller:
            assert cluster.roles == {"controller"}
            assert [tuple(x) for x in cluster.controller_listeners] == [("CONTROLLER", "127.0.0.1", 19094)]
            assert "advertised.listeners" not in settings
        else:
            assert cluster.roles == {"broker"}
            assert [tuple(x) for x in cluster.broker_listeners] == [("PLAINTEXT", "127.0.0.1", spec.port)]
            assert settings["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{spec.port}"
            assert cluster.controller_addresses() == [("127.0.0.1", 19094)]


def test_extra_settings_override_the_layout_and_route_via_redirects_one_broker(tmp_path: Path) -> None:
    c = DevCluster(plan(2, tmp_path, base_port=19092, settings={"broker.heartbeat.interval.ms": 100}), tmp_path)
    c.route_via(1, "127.0.0.1", 20000)
    b0, b1 = (_settings_of(n.spec.command()) for n in c.brokers)
    assert b0["broker.heartbeat.interval.ms"] == "100"
    assert b0["controller.quorum.voters"] == "3000@127.0.0.1:19094"
    assert b1["controller.quorum.voters"] == "3000@127.0.0.1:20000"
    assert c.bootstrap == "127.0.0.1:19092,127.0.0.1:19093"
    assert c.bootstrap_controller == "127.0.0.1:19094"


def test_plan_refuses_impossible_layouts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one controller"):
        plan(1, tmp_path, n_controllers=0)
    with pytest.raises(ValueError, match="past 65535"):
        plan(3, tmp_path, base_port=65534)


def test_format_dirs_gives_every_node_one_cluster_id_and_keeps_it(tmp_path: Path) -> None:
    specs = plan(2, tmp_path)
    cid = format_dirs(specs)
    props = [(s.data_dir / "meta.properties").read_text() for s in specs]
    assert all(f"cluster.id={cid}\n" in p for p in props)
    assert [f"node.id={s.node_id}\n" in p for s, p in zip(specs, props)] == [True] * 3
    (specs[1].data_dir / "meta.properties").unlink()  # a node whose dir was wiped
    assert format_dirs(specs) == cid
    assert f"cluster.id={cid}\n" in (specs[1].data_dir / "meta.properties").read_text()


def test_kafka_names_maps_underscores() -> None:
    assert kafka_names({"metadata_read_consistency": "local", "num.partitions": 2}) == {
        "metadata.read.consistency": "local", "num.partitions": 2}


def test_harness_uses_test_timings(tmp_path: Path) -> None:
    h = ClusterHarness(tmp_path, 1)
    try:
        settings = _settings_of(h.brokers[0].spec.command())
        assert settings["broker.heartbeat.interval.ms"] == str(HEARTBEAT_MS)
        assert settings["broker.session.timeout.ms"] == str(SESSION_MS)
    finally:
        h.close()


def test_a_node_failing_at_start_stops_the_others_and_names_the_cause(tmp_path: Path) -> None:
    c = DevCluster.create(2, tmp_path, settings={"broker.session.timeout.ms": 0})
    with pytest.raises(NodeFailed, match=r"controller-3000 exited with 1: .*broker.session.timeout.ms"):
        c.start(timeout=30)
    assert all(n.proc is None or not n.alive for n in c.nodes.values())
    assert "broker.session.timeout.ms" in c.controllers[0].output()


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        c = DevCluster.create(1, tmp_path, base_port=port)
        with pytest.raises(NodeFailed, match=rf"cannot listen on 127.0.0.1:{port} \(broker-0\): address already in use"):
            c.start()
        assert all(n.proc is None for n in c.nodes.values())


def test_single_node_spec_runs_todays_combined_mode(tmp_path: Path) -> None:
    spec = single_node(tmp_path, port=19099, settings={"num.partitions": 2})
    argv = spec.command("python3")
    assert argv[argv.index("--listen") + 1] == "127.0.0.1:19099"
    assert spec.name == "single-1" and spec.data_dir == tmp_path / "single-1"
    assert _settings_of(argv) == {"num.partitions": "2"}
    assert _serve_config(argv).cluster_settings().single_node


def test_node_process_start_pause_resume_kill_restart(tmp_path: Path) -> None:
    """The process controls on a real single node (the cluster roles are exercised by
    the cluster tests)."""
    node = NodeProcess(single_node(tmp_path), tmp_path / "single.log")
    try:
        node.start().wait_listening(30)
        pid = node.pid
        node.pause()
        wait_until(lambda: _proc_state(pid) == "T", what="SIGSTOP took effect")
        node.resume()
        wait_until(lambda: _proc_state(pid) != "T", what="SIGCONT took effect")
        assert node.kill() == -signal.SIGKILL and not node.alive
        node.restart()
        assert node.alive and node.pid != pid and node.starts == 2
        assert node.stop() == 0
        assert node.output().count("--- start ") == 2
    finally:
        node.kill()


def _proc_state(pid: int | None) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# -- the harness against a running cluster ---------------------------------------------
def test_a_cluster_starts_unfenced_and_fences_a_killed_broker_until_it_returns(cluster) -> None:
    c = cluster(2)
    views = c.states()
    assert views == {0: {0: "unfenced", 1: "unfenced"}, 1: {0: "unfenced", 1: "unfenced"}}
    c.kill(1)
    c.wait_fenced(1, timeout=SESSION_MS / 1000 + 15)
    c.restart(1)
    c.wait_unfenced(timeout=60)
    c.restart(CONTROLLER_ID_BASE)  # brokers re-register with the restarted controller
    c.wait_unfenced(timeout=60)


def test_a_broker_cut_off_by_the_proxy_is_fenced_and_comes_back(cluster) -> None:
    c = cluster(2, proxied=[1])
    proxy = c.proxies[1]
    assert proxy.accepted >= 1  # broker 1 reaches the controller through the proxy
    proxy.blackhole(True)
    c.wait_fenced(1, timeout=SESSION_MS / 1000 + 15)
    proxy.blackhole(False)
    proxy.close_connections()  # its requests were swallowed: make it reconnect
    c.wait_unfenced(timeout=60)
