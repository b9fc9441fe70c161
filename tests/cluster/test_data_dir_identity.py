"""A data dir belongs to one cluster and one controller voter set (issue 26, item 2).

Starting a layout whose controllers differ from what the data dirs hold (a dev cluster of
one controller restarted with ``--controllers 3``) used to elect one of the two new,
empty voters: the old controller truncated its metadata log to 0 and every broker
deleted its partitions. Now the start is refused in one line and nothing is lost; a
broker whose controller belongs to another cluster stops with one line instead of
following it."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from hightide.client import AdminClient, NewTopic
from hightide.devcluster import NodeFailed, NodeProcess, plan

from .harness import ClusterHarness

pytestmark = pytest.mark.integration

TOPIC = "keep"
N_RECORDS = 50


def produce(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    for i in range(n):
        p.produce(TOPIC, value=b"v%d" % i)
    assert p.flush(60) == 0


def consume(bootstrap: str, n: int, timeout_s: float = 60.0) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{time.monotonic_ns()}", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")
    finally:
        c.close()
    return got


async def topics(bootstrap: str) -> list[str]:
    async with AdminClient(bootstrap, request_timeout_s=15.0) as admin:
        return await admin.list_topics()


def partition_dirs(base: Path) -> list[Path]:
    return sorted(base.glob(f"broker-*/{TOPIC}-0"))


def first_cluster(base: Path) -> ClusterHarness:
    """One controller, three brokers, an RF=3 topic with N_RECORDS records; stopped."""
    h = ClusterHarness(base, 3)
    try:
        h.start(timeout=90)

        async def create() -> None:
            async with AdminClient(h.bootstrap, request_timeout_s=30.0) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1, 3)])
        asyncio.run(create())
        produce(h.bootstrap, N_RECORDS)
        assert len(partition_dirs(base)) == 3
    finally:
        h.close()
    return h


def test_starting_more_controllers_on_an_existing_dir_is_refused_and_loses_nothing(tmp_path: Path) -> None:
    base = tmp_path / "c"
    first_cluster(base)
    refused: str | None = None
    grown = ClusterHarness(base, 3, n_controllers=3)
    try:
        grown.start(timeout=60)  # the old code started it: two empty voters elected one of themselves
        time.sleep(3)  # (and the brokers followed the empty log)
    except NodeFailed as exc:
        refused = str(exc)
    finally:
        grown.close()
    assert len(partition_dirs(base)) == 3, "the brokers deleted the topic's partitions"
    again = ClusterHarness(base, 3)  # the original roles: everything is still there
    try:
        again.start(timeout=90)
        assert TOPIC in asyncio.run(topics(again.bootstrap))
        assert sorted(consume(again.bootstrap, N_RECORDS)) == sorted(b"v%d" % i for i in range(N_RECORDS))
    finally:
        again.close()
    assert refused is not None, "a layout with other controllers was started on the old data dirs"
    line = refused.strip()
    assert "\n" not in line and "3000" in line and "3001" in line and "refusing" in line, line


def test_a_controller_configured_with_other_voters_refuses_to_start(tmp_path: Path) -> None:
    """The node's own check (without dev-cluster's): controller 3000, formatted for the
    voter set {3000}, started with voters 3000,3001,3002 exits 1 with one line naming both."""
    base = tmp_path / "c"
    one = ClusterHarness(base, 0)
    try:
        one.start(wait_unfenced=False, timeout=60)
        cluster_id = one.cluster_id
    finally:
        one.close()
    spec = next(s for s in plan(0, base, n_controllers=3) if s.node_id == 3000)
    node = NodeProcess(spec, base / "logs" / "controller-3000-grown.log")
    try:
        node.start()
        assert node.proc is not None
        code = node.proc.wait(60)
    finally:
        node.kill()
    assert code == 1, node.output()[-2000:]
    line = node.last_line()
    assert "refusing to start" in line and cluster_id in line and "3000,3001,3002" in line, node.output()[-2000:]
    assert "Traceback" not in node.output()


def test_brokers_stop_rather_than_follow_a_controller_of_another_cluster(tmp_path: Path) -> None:
    base = tmp_path / "c"
    h = ClusterHarness(base, 2)
    try:
        h.start(timeout=90)

        async def create() -> None:
            async with AdminClient(h.bootstrap, request_timeout_s=30.0) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1, 2)])
        asyncio.run(create())
        produce(h.bootstrap, 10)
        ctl = h.controller
        ctl.stop()
        shutil.rmtree(ctl.spec.data_dir)  # a controller of another cluster at the same address
        ctl.spec.data_dir.mkdir()
        (ctl.spec.data_dir / "meta.properties").write_text(f"version=1\ncluster.id=OtherClusterAAAAAAAAAAA\n"
                                                           f"node.id={ctl.spec.node_id}\n")
        ctl.start().wait_listening(30)
        for b in h.brokers:
            h.wait_until(lambda: not b.alive, 60, what=f"broker {b.spec.node_id} to stop")
            assert b.returncode == 1, b.output()[-2000:]
            out = b.output()
            assert "OtherClusterAAAAAAAAAAA" in out and h.cluster_id in out, out[-2000:]
            assert "local metadata copy truncated" not in out
        assert len(partition_dirs(base)) == 2, "a broker deleted its partitions"
    finally:
        h.close()
