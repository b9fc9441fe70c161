"""Three controller-only processes form a KRaft quorum: they elect a leader, metadata
writes commit through the leader and are applied by every voter, the other voters
refuse controller-bound requests (NOT_CONTROLLER, NOT_LEADER_OR_FOLLOWER with the
leader hint), and after the leader is killed (-9) a new one is elected and writes go on.
The broker-side failover and the long scenarios live in the other test_quorum_* files."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request
from hightide.protocol.envelope_response import decode_envelope_response

from tests.waiting import wait_until

from .harness import ClusterHarness
from .test_controller import Controller

VOTERS = 3


@pytest.fixture
def quorum(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClusterHarness]:
    """Three controllers and no broker (NoOps off: the log grows only by the test's
    writes), stopped at teardown; a failed test's report carries their logs."""
    h = ClusterHarness(tmp_path / "quorum", 0, n_controllers=VOTERS, settings={"metadata.max.idle.interval.ms": 0})
    request.node._clusters = [h]
    try:
        h.start(wait_unfenced=False, timeout=60)
        yield h
    finally:
        h.close()


def describe_quorum(address: str, cluster_id: str) -> Any:
    with Controller(address, cluster_id) as conn:
        return conn.request(55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                "partitions": [{"partition_index": 0}]}]})


def leader_of(h: ClusterHarness, alive: list[int]) -> int | None:
    """The leader every live voter names in DescribeQuorum (the leader answers with the
    quorum, the others NOT_LEADER_OR_FOLLOWER naming it); None while they disagree."""
    named = set()
    for node_id in alive:
        try:
            part = describe_quorum(h.address(node_id), h.cluster_id or "").topics[0].partitions[0]
        except OSError:
            return None
        named.add(int(part.leader_id))
    leader = named.pop() if len(named) == 1 else -1
    return leader if leader in alive else None


def topic_on(h: ClusterHarness, node_id: int, topic: str) -> bool:
    """True if controller ``node_id``'s own image has ``topic`` (DescribeConfigs is
    answered from the image of whichever controller is asked)."""
    with Controller(h.address(node_id), h.cluster_id or "") as conn:
        res = conn.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                  "configuration_keys": None}],
                                   "include_synonyms": False, "include_documentation": False}).results[0]
    return res.error_code == ErrorCode.none


def test_three_controllers_elect_commit_on_all_and_fail_over(quorum: ClusterHarness) -> None:
    h = quorum
    ids = [n.spec.node_id for n in h.controllers]
    wait_until(lambda: leader_of(h, ids) is not None, 30, what="a leader every voter names")
    leader = leader_of(h, ids)
    assert leader is not None
    others = [i for i in ids if i != leader]

    with Controller(h.address(leader), h.cluster_id or "") as conn:
        info = conn.request(55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                "partitions": [{"partition_index": 0}]}]})
        part = info.topics[0].partitions[0]
        assert part.error_code == ErrorCode.none and part.leader_epoch >= 1
        assert sorted(v.replica_id for v in part.current_voters) == ids
        assert sorted(n.node_id for n in info.nodes) == ids
        epoch = conn.up(0)  # a broker registers and is unfenced: two writes through the quorum
        assert epoch > 0
        created = conn.create_topic("before-failover")
        assert created.error_code == ErrorCode.none, created
    for node_id in ids:
        wait_until(lambda: topic_on(h, node_id, "before-failover"), 15, what=f"the topic on controller {node_id}")

    # a non-leader refuses writes and observers' fetches, naming the leader
    with Controller(h.address(others[0]), h.cluster_id or "") as conn:
        refused = conn.create_topic("refused")
        assert refused.error_code == ErrorCode.not_controller, refused
        fetched = conn.fetch(0, replica_id=0).responses[0].partitions[0]
        assert fetched.error_code == ErrorCode.not_leader_or_follower
        assert fetched.current_leader.leader_id == leader
        leader_port = int(h.address(leader).rsplit(":", 1)[1])
        assert [(e.node_id, e.port) for e in conn.fetch(0, replica_id=0).node_endpoints] == [(leader, leader_port)]
        # a forwarded write: NOT_CONTROLLER at the Envelope level, nothing run
        inner = materialize(load_request_schema(19, 7), {
            "topics": [{"name": "forwarded-refused", "num_partitions": 1, "replication_factor": -1,
                        "assignments": [], "configs": []}], "timeout": 30000, "validate_only": False})
        frame = conn.raw(58, 0, {"request_data": encode_request(19, 7, 1, "c", inner)[4:], "request_principal": b"",
                                 "client_host_address": b"\x7f\0\0\1"})
        _, env = decode_envelope_response(frame)
        assert env.error_code == ErrorCode.not_controller and env.response_data is None
        # KIP-919: every voter listed, the leader as ControllerId
        cluster = conn.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert cluster.controller_id == leader and sorted(b.broker_id for b in cluster.brokers) == ids
        # Raft RPCs of another cluster are refused
        vote = conn.request(52, 2, {"cluster_id": "another-cluster", "voter_id": others[0], "topics": [
            {"topic_name": "__cluster_metadata", "partitions": [
                {"partition_index": 0, "replica_epoch": 99, "replica_id": leader, "replica_directory_id": None,
                 "voter_directory_id": None, "last_offset_epoch": 99, "last_offset": 99, "pre_vote": False}]}]})
        assert vote.error_code == ErrorCode.inconsistent_cluster_id
    assert not topic_on(h, leader, "refused") and not topic_on(h, leader, "forwarded-refused")

    killed_at = time.monotonic()
    h.kill(leader)
    wait_until(lambda: leader_of(h, others) is not None, 30, what="a new leader among the survivors")
    elected_s = time.monotonic() - killed_at
    new_leader = leader_of(h, others)
    assert new_leader is not None and new_leader != leader
    with Controller(h.address(new_leader), h.cluster_id or "") as conn:
        part = conn.request(55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                "partitions": [{"partition_index": 0}]}]}).topics[0].partitions[0]
        assert part.leader_epoch > epoch_of(info)
        created = conn.create_topic("after-failover")
        assert created.error_code == ErrorCode.none, created
    for node_id in others:
        wait_until(lambda: topic_on(h, node_id, "after-failover") and topic_on(h, node_id, "before-failover"), 15,
                   what=f"both topics on controller {node_id}")

    # the killed voter comes back as a follower and catches up from the new leader
    h.node(leader).start().wait_listening(30)
    wait_until(lambda: topic_on(h, leader, "after-failover"), 30, what="the restarted voter catching up")
    print(f"new leader elected {elapsed(elected_s)} after kill -9 of the leader")


def epoch_of(info: Any) -> int:
    return int(info.topics[0].partitions[0].leader_epoch)


def elapsed(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def test_a_voter_remembers_its_epoch_across_a_restart(quorum: ClusterHarness) -> None:
    h = quorum
    ids = [n.spec.node_id for n in h.controllers]
    wait_until(lambda: leader_of(h, ids) is not None, 30, what="a leader every voter names")
    follower = next(i for i in ids if i != leader_of(h, ids))
    state = Path(h.node(follower).spec.data_dir) / "__cluster_metadata-0" / "quorum-state"
    wait_until(state.exists, 10, what="the follower's quorum-state file")
    before = state.read_text()
    assert '"leaderEpoch"' in before and '"currentVoters"' in before
    h.kill(follower)
    h.node(follower).start().wait_listening(30)
    wait_until(lambda: leader_of(h, ids) is not None, 30, what="the quorum with the restarted follower")
    with Controller(h.address(follower), h.cluster_id or "") as conn:
        part = conn.request(55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                "partitions": [{"partition_index": 0}]}]}).topics[0].partitions[0]
    assert part.leader_epoch >= json.loads(before)["leaderEpoch"]


def test_a_voter_back_after_the_leader_trimmed_its_log_installs_the_leaders_snapshot(tmp_path: Path,
                                                                                     request: pytest.FixtureRequest) -> None:
    # a snapshot after every commit: the leader's log start moves past the stopped voter
    h = ClusterHarness(tmp_path / "quorum", 0, n_controllers=VOTERS, settings={
        "metadata.max.idle.interval.ms": 0, "metadata.log.max.record.bytes.between.snapshots": 1})
    request.node._clusters = [h]
    try:
        h.start(wait_unfenced=False, timeout=60)
        ids = [n.spec.node_id for n in h.controllers]
        wait_until(lambda: leader_of(h, ids) is not None, 30, what="a leader every voter names")
        leader = leader_of(h, ids)
        assert leader is not None
        behind = next(i for i in ids if i != leader)
        h.kill(behind)
        with Controller(h.address(leader), h.cluster_id or "") as conn:
            conn.up(0)
            assert conn.create_topic("while-away").error_code == ErrorCode.none
        leader_dir = Path(h.node(leader).spec.data_dir) / "__cluster_metadata-0"
        wait_until(lambda: list(leader_dir.glob("*.checkpoint")), 15, what="a snapshot on the leader")
        h.node(behind).start().wait_listening(30)
        wait_until(lambda: topic_on(h, behind, "while-away"), 30, what="the returning voter catching up")
        behind_dir = Path(h.node(behind).spec.data_dir) / "__cluster_metadata-0"
        assert list(behind_dir.glob("*.checkpoint")), "the returning voter holds a snapshot (installed or its own)"
        assert "installed snapshot" in h.node(behind).log_path.read_text()
    finally:
        h.close()
