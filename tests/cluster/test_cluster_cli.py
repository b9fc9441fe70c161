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
