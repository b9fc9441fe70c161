"""Replacing a controller of a dynamic quorum (KIP-853) while the cluster serves: three
controllers formatted with their initial voter set (``--initial-controllers``) and two
brokers, all finding the controllers through ``controller.quorum.bootstrap.servers``.

A fourth controller is formatted with ``--no-initial-controllers`` and started: it
fetches the metadata log as an observer. ``hightide metadata-quorum add-controller``
(AddRaftVoter, sent to the active controller) makes it a voter; ``remove-controller``
(RemoveRaftVoter, sent through a broker, which forwards it) removes the old active
controller itself, which resigns once its removal commits; it is then stopped. The
quorum keeps serving: DescribeQuorum shows the new voter set with directory ids and
endpoints, and topics created through the brokers before and after are on every broker,
which stay unfenced; a remaining original controller restarted reads the new voter set
back from its own log and catches up. Kafka's refusals come back as one-line CLI errors (VOTER_NOT_FOUND,
DUPLICATE_VOTER).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from hightide.client import NewTopic
from hightide.devcluster import CONTROLLER_LISTENER, NodeProcess, NodeSpec, format_dirs, free_ports
from hightide.log.data_dir import read_meta_properties

from .conftest import ClusterFactory
from .harness import ClusterHarness

NEW = 3003


def cli(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hightide", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def create_everywhere(h: ClusterHarness, name: str) -> None:
    async def go() -> None:
        async with h.admin() as admin:
            await admin.create_topics([NewTopic(name, 2)], timeout_s=15.0)
    asyncio.run(go())

    def everywhere() -> bool:
        async def check() -> bool:
            for node in h.brokers:
                async with h.admin(node.spec.node_id) as admin:
                    if name not in await admin.list_topics():
                        return False
            return True
        return asyncio.run(check())
    h.wait_until(everywhere, 30.0, what=f"topic {name} on every broker")


def test_a_controller_is_replaced_while_the_cluster_serves(cluster: ClusterFactory) -> None:
    h = cluster(2, controllers=3, dynamic_voters=True)
    q = h.quorum(timeout_s=15.0)
    assert sorted(v.node_id for v in q.voters) == [3000, 3001, 3002]
    assert all(v.directory_id is not None and v.directory_id.int != 0 for v in q.voters)
    assert sorted(q.nodes) == [3000, 3001, 3002]
    create_everywhere(h, "before")

    # a fourth controller joins as an observer
    first = h.controllers[0].spec
    port = free_ports(1)[0]
    settings = {**first.settings, "listeners": f"{CONTROLLER_LISTENER}://{first.host}:{port}"}
    spec = NodeSpec(NEW, ("controller",), h.base_dir / f"controller-{NEW}", port, first.host, settings)
    format_dirs([spec, *(n.spec for n in h.nodes.values())])
    directory = read_meta_properties(str(spec.data_dir))["directory.id"]
    node = h.nodes[NEW] = NodeProcess(spec, h.base_dir / "logs" / f"{spec.name}.log")
    node.start().wait_listening(60.0)

    def observing() -> bool:
        q = h.quorum(timeout_s=5.0)
        return any(o.node_id == NEW and o.last_caught_up_timestamp > 0 for o in q.observers)
    h.wait_until(observing, 60.0, what=f"controller {NEW} fetching as a caught-up observer")

    flags = ["--data-dir", str(spec.data_dir), "--node-id", str(NEW)]
    for name, value in sorted(settings.items()):
        flags += ["--set", f"{name}={value}"]
    added = cli("metadata-quorum", "--bootstrap-controller", h.bootstrap_controller, "add-controller", *flags)
    assert added.returncode == 0, added.stderr
    assert f"Added controller {NEW} with directory id {directory}" in added.stdout
    q = h.quorum(timeout_s=15.0)
    assert sorted(v.node_id for v in q.voters) == [3000, 3001, 3002, NEW]
    assert q.nodes[NEW] == ((CONTROLLER_LISTENER, first.host, port),)
    again = cli("metadata-quorum", "--bootstrap-controller", h.bootstrap_controller, "add-controller", *flags)
    assert again.returncode == 1 and "DUPLICATE_VOTER" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    # remove the active controller itself, through a broker (forwarded)
    old = h.quorum_leader()
    old_dir = next(v.directory_id for v in q.voters if v.node_id == old)
    from hightide.cli.metadata_quorum import kafka_uuid
    removed = cli("metadata-quorum", "--bootstrap-server", h.bootstrap, "remove-controller",
                  "--controller-id", str(old), "--controller-directory-id", kafka_uuid(old_dir))
    assert removed.returncode == 0, removed.stderr
    new_leader = h.wait_leader(other_than=old, timeout=60.0)
    h.terminate(old)
    q = h.quorum(timeout_s=15.0)
    assert sorted(v.node_id for v in q.voters) == sorted({3000, 3001, 3002, NEW} - {old})
    assert new_leader != old and q.leader_id != old
    missing = cli("metadata-quorum", "--bootstrap-controller", h.bootstrap_controller, "remove-controller",
                  "--controller-id", str(old), "--controller-directory-id", kafka_uuid(old_dir))
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "VOTER_NOT_FOUND" in missing.stderr and "Traceback" not in missing.stderr

    # the quorum keeps serving the brokers
    create_everywhere(h, "after")
    h.wait_unfenced(timeout=30.0)

    # a remaining original voter restarts: its voter set comes back from its own log
    voters = sorted({3000, 3001, 3002, NEW} - {old})
    other = next(v for v in voters if v not in (NEW, h.quorum_leader()))
    h.restart(other)

    def caught_up() -> bool:
        q = h.quorum(timeout_s=5.0)
        mine = next((v for v in q.voters if v.node_id == other), None)
        return sorted(v.node_id for v in q.voters) == voters and mine is not None \
            and mine.log_end_offset >= q.high_watermark - 1
    h.wait_until(caught_up, 60.0, what=f"controller {other} back as a caught-up voter")
    create_everywhere(h, "after-restart")
