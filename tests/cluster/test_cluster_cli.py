"""The operator commands against a real cluster (a controller and three brokers):
``hightide brokers``, ``hightide metadata-quorum describe`` and the exporter's quorum
series, before and after a broker is killed."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import NewTopic
from hightide.devcluster import CONTROLLER_ID_BASE

from .harness import SESSION_MS

pytestmark = pytest.mark.integration


def _cli(*args: str) -> str:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_brokers_and_the_quorum_of_a_three_broker_cluster(cluster) -> None:
    c = cluster(3)

    async def create() -> None:
        async with c.admin(0) as admin:
            await admin.create_topics([NewTopic("spread", 6, 1)])
    asyncio.run(create())
    rows = json.loads(_cli("brokers", "-b", c.address(1), "-o", "json"))
    assert [(r["id"], r["endpoint"], r["state"]) for r in rows] == [
        (b, c.address(b), "unfenced") for b in (0, 1, 2)]
    assert all(r["leaders"] >= 2 for r in rows)  # six partitions striped over three brokers

    status = _cli("metadata-quorum", "describe", "--status", "--bootstrap-controller", c.bootstrap_controller)
    fields = dict(line.split(":", 1) for line in status.splitlines())
    assert fields["LeaderId"].strip() == str(CONTROLLER_ID_BASE)
    assert fields["CurrentObservers"].strip() == '[{"id": 0}, {"id": 1}, {"id": 2}]'
    assert int(fields["HighWatermark"]) > 0
    assert fields["LowestAckedOffset"].strip() == "-"  # a controller cannot say who is fenced

    rows = json.loads(_cli("metadata-quorum", "describe", "--replication", "--json",
                           "--bootstrap-controller", c.bootstrap_controller))
    assert [(r["node_id"], r["status"]) for r in rows] == [
        (CONTROLLER_ID_BASE, "Leader"), (0, "Observer"), (1, "Observer"), (2, "Observer")]
    assert rows[0]["lag"] == 0
    assert all(r["applied_offset"] is not None and r["applied_offset"] >= 0 for r in rows[1:])

    controllers = json.loads(_cli("brokers", "--bootstrap-controller", c.bootstrap_controller, "-o", "json"))
    assert [(r["id"], r["role"], r["endpoint"]) for r in controllers] == [
        (CONTROLLER_ID_BASE, "controller", c.bootstrap_controller)]

    c.kill(2)
    c.wait_fenced(2, timeout=SESSION_MS / 1000 + 15)
    rows = json.loads(_cli("brokers", "-b", c.address(0), "-o", "json"))
    assert [(r["id"], r["state"]) for r in rows] == [(0, "unfenced"), (1, "unfenced"), (2, "fenced")]
    assert rows[2]["leaders"] == 0  # its partitions are leaderless while it is away


def test_the_exporter_against_a_three_broker_cluster(cluster) -> None:
    """`hightide exporter` bootstrapped to one broker of three: the lag of a group whose
    partitions are led by every broker (the numbers a committed group really has), the
    quorum series, and a killed broker counted as fenced."""
    import subprocess
    import sys

    from confluent_kafka import Consumer, Producer, TopicPartition

    from tests.conftest import free_port
    from tests.integration.test_exporter import scrape, value
    from tests.waiting import wait_until

    c = cluster(3)

    async def create() -> None:
        async with c.admin(0) as admin:
            await admin.create_topics([NewTopic("lagging", 3, 1)])
    asyncio.run(create())
    producer = Producer({"bootstrap.servers": c.bootstrap})
    for p in range(3):
        for i in range(10):
            producer.produce("lagging", b"x%d" % i, partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g-lag", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("lagging", p, 4 + p) for p in range(3)], asynchronous=False)
    consumer.close()

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", c.address(1), "--port", str(port),
                             "--listen", "127.0.0.1", "--min-interval", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        fams = scrape(port, timeout=30)
        for p in range(3):
            assert value(fams, "kafka_consumergroup_lag", consumergroup="g-lag", topic="lagging",
                         partition=str(p)) == 10 - (4 + p)
        assert value(fams, "hightide_metadata_active_brokers") == 3
        assert value(fams, "hightide_metadata_fenced_brokers") == 0
        assert value(fams, "hightide_metadata_high_watermark") > 0
        c.kill(2)
        c.wait_fenced(2, timeout=SESSION_MS / 1000 + 15)
        wait_until(lambda: value(scrape(port), "hightide_metadata_fenced_brokers") == 1, 30,
                   what="the exporter to count the killed broker as fenced")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()
