"""``hightide storage random-uuid`` and ``hightide storage format`` (Kafka's
``kafka-storage.sh``): a data dir formatted with the flags that start its node, a
controller's with its voter set; a formatted dir is refused (one line, exit 1), or with
``--ignore-formatted`` left as it is when it is the same cluster's; a bad config is one
line and a non-zero exit, nothing written."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hightide.cli import main
from hightide.log.data_dir import check_identity, read_meta_properties, recorded_voters

VOTERS = "3000@127.0.0.1:9095,3001@127.0.0.1:9096,3002@127.0.0.1:9097"
CONTROLLER = ["--set", "process.roles=controller", "--set", "listeners=CONTROLLER://127.0.0.1:9095",
              "--set", "controller.listener.names=CONTROLLER", "--set", f"controller.quorum.voters={VOTERS}"]
BROKER = ["--set", "process.roles=broker", "--set", "listeners=PLAINTEXT://127.0.0.1:9092",
          "--set", "controller.listener.names=CONTROLLER", "--set", f"controller.quorum.voters={VOTERS}"]
CID = "k5oQb1cTQ7yL8rPZ2JXw3A"
OTHER = "Ha7dVXr6Qm2bZ5aJ0f9N1w"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["storage", *args])


def fmt(data_dir: Path, *args: str, cluster_id: str = CID, node_id: int = 3000) -> Result:
    return run("format", "--cluster-id", cluster_id, "--data-dir", str(data_dir), "--node-id", str(node_id), *args)


def one_line(r: Result) -> str:
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def test_random_uuid_prints_a_kafka_uuid() -> None:
    a, b = run("random-uuid"), run("random-uuid")
    assert a.exit_code == 0 and b.exit_code == 0
    ida, idb = one_line(a), one_line(b)
    assert len(ida) == 22 and ida != idb
    assert len(base64.urlsafe_b64decode(ida + "==")) == 16


def test_format_a_controller_records_the_cluster_and_its_voters(tmp_path: Path) -> None:
    d = tmp_path / "c0"
    r = fmt(d, *CONTROLLER)
    assert r.exit_code == 0, r.output
    line = one_line(r)
    assert str(d) in line and CID in line and "3000,3001,3002" in line
    props = read_meta_properties(str(d))
    assert props["cluster.id"] == CID and props["node.id"] == "3000" and props["version"] == "1"
    assert len(props["directory.id"]) == 22
    assert recorded_voters(str(d), 3000) == ((3000, 3001, 3002), CID)
    state = json.loads((d / "__cluster_metadata-0" / "quorum-state").read_text())
    assert state["leaderEpoch"] == 0 and state["votedId"] == -1
    check_identity(str(d), node_id=3000, cluster_id=CID, voters=[3000, 3001, 3002])  # what serve checks: passes


def test_format_a_broker_writes_only_meta_properties(tmp_path: Path) -> None:
    d = tmp_path / "b0"
    r = fmt(d, *BROKER, node_id=0)
    assert r.exit_code == 0, r.output
    assert read_meta_properties(str(d))["cluster.id"] == CID
    assert read_meta_properties(str(d))["node.id"] == "0"
    assert not (d / "__cluster_metadata-0").exists()


def test_a_controller_without_static_voters_is_formatted_as_a_lone_voter(tmp_path: Path) -> None:
    d = tmp_path / "c0"
    r = fmt(d, "--set", "process.roles=controller", "--set", "listeners=CONTROLLER://127.0.0.1:9095",
            "--set", "controller.listener.names=CONTROLLER")
    assert r.exit_code == 0, r.output
    assert recorded_voters(str(d), 3000) == ((3000,), CID)  # it runs alone: its voter set is itself


def test_format_reads_the_toml_config_serve_reads(tmp_path: Path) -> None:
    conf = tmp_path / "c1.toml"
    conf.write_text(f'"node.id" = 3001\n"process.roles" = "controller"\n'
                    f'"listeners" = "CONTROLLER://127.0.0.1:9096"\n"controller.listener.names" = "CONTROLLER"\n'
                    f'"controller.quorum.voters" = "{VOTERS}"\n')
    d = tmp_path / "c1"
    r = run("format", "-t", CID, "--data-dir", str(d), "--config", str(conf))
    assert r.exit_code == 0, r.output
    assert read_meta_properties(str(d))["node.id"] == "3001"
    assert recorded_voters(str(d), 3001) == ((3000, 3001, 3002), CID)


def test_a_formatted_dir_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "c0"
    assert fmt(d, *CONTROLLER).exit_code == 0
    before = (d / "meta.properties").read_text()
    r = fmt(d, *CONTROLLER)
    assert r.exit_code == 1
    line = one_line(r)
    assert "already formatted" in line and CID in line and "--ignore-formatted" in line
    assert (d / "meta.properties").read_text() == before


def test_ignore_formatted_accepts_the_same_cluster_only(tmp_path: Path) -> None:
    d = tmp_path / "c0"
    assert fmt(d, *CONTROLLER).exit_code == 0
    before = (d / "meta.properties").read_text(), (d / "__cluster_metadata-0" / "quorum-state").read_text()
    same = fmt(d, *CONTROLLER, "--ignore-formatted")
    assert same.exit_code == 0, same.output
    assert "already formatted" in one_line(same)
    other = fmt(d, *CONTROLLER, "--ignore-formatted", cluster_id=OTHER)
    assert other.exit_code == 1
    line = one_line(other)
    assert CID in line and OTHER in line
    voters = fmt(d, "--ignore-formatted", *CONTROLLER, "--set", "controller.quorum.voters=3000@127.0.0.1:9095")
    assert voters.exit_code == 1 and "3000,3001,3002" in one_line(voters)  # another voter set: refused too
    assert ((d / "meta.properties").read_text(), (d / "__cluster_metadata-0" / "quorum-state").read_text()) == before


def test_a_dir_with_a_metadata_log_but_no_meta_properties_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "c0"
    (d / "__cluster_metadata-0").mkdir(parents=True)
    (d / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(b"x" * 100)
    r = fmt(d, *CONTROLLER, "--ignore-formatted")
    assert r.exit_code == 1 and "metadata log" in one_line(r)
    assert not (d / "meta.properties").exists()


def test_a_bad_config_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    d = tmp_path / "c0"
    for bad in (["--set", "process.roles=controller,banana"],
                [*CONTROLLER, "--set", "no.such.config=1"],
                [*CONTROLLER, "--set", "controller.quorum.voters=3001@127.0.0.1:9096"]):  # not among the voters
        r = fmt(d, *bad)
        assert r.exit_code != 0, (bad, r.output)
        assert one_line(r).startswith("Error: "), r.output
        assert not d.exists()
    r = run("format", "--cluster-id", "has space", "--data-dir", str(d), *CONTROLLER, "--node-id", "3000")
    assert r.exit_code != 0 and "cluster" in one_line(r) and not d.exists()


def test_random_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    from hightide.log import data_dir
    draws = iter([uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(bytes=bytes(16))])  # "-w..." first, then "AAAA..."
    monkeypatch.setattr(data_dir.uuid, "uuid4", lambda: next(draws))
    assert data_dir.new_id() == "A" * 22


def test_a_dir_in_use_by_a_node_is_refused(tmp_path: Path) -> None:
    from hightide.log.dirlock import DirLock
    d = tmp_path / "c0"
    lock = DirLock.acquire(str(d))  # as a running node holds it
    try:
        r = fmt(d, *CONTROLLER)
    finally:
        lock.release()
    assert r.exit_code == 1 and "in use" in one_line(r)
    assert not (d / "meta.properties").exists()
