"""``hightide brokers`` against a real single node (click's runner, real network); the
cluster cases are in test_cluster_cli.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import AdminClient, NewTopic

pytestmark = pytest.mark.integration


def test_single_node_lists_itself_unfenced_with_the_partitions_it_leads(fresh_server, topic_name) -> None:
    srv = fresh_server()

    async def setup() -> int:
        async with AdminClient(srv.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 3, 1)])
            md = await admin.metadata()
            return sum(1 for t in md.topics.values() for p in t.partitions.values() if p.leader == 1)
    led = asyncio.run(setup())
    assert led >= 3
    r = CliRunner().invoke(main, ["brokers", "-b", srv.bootstrap], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].split() == ["ID", "ENDPOINT", "RACK", "STATE", "LEADERS"]
    assert lines[1].split() == ["1", srv.bootstrap, "-", "unfenced", str(led)]
    assert len(lines) == 2
    r = CliRunner().invoke(main, ["brokers", "-b", srv.bootstrap, "-o", "json"], catch_exceptions=False)
    assert json.loads(r.output) == [{"id": 1, "role": "broker", "host": "127.0.0.1", "port": srv.port,
                                     "endpoint": srv.bootstrap, "rack": None, "state": "unfenced", "fenced": False,
                                     "leaders": led}]


def test_a_broker_listener_refuses_the_controllers_view_in_one_line(server) -> None:
    r = CliRunner().invoke(main, ["brokers", "--bootstrap-controller", server.bootstrap])
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        "Error: KafkaError: [UNSUPPORTED_ENDPOINT_TYPE] The endpoint type is not supported"]


def test_unreachable_and_conflicting_options_are_one_line_errors(server) -> None:
    r = CliRunner().invoke(main, ["brokers", "-b", "127.0.0.1:1"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "[NETWORK_EXCEPTION] cannot reach 127.0.0.1:1 (connection refused)" in r.output
    r = CliRunner().invoke(main, ["brokers", "-b", server.bootstrap, "--bootstrap-controller", server.bootstrap])
    assert r.exit_code == 2 and "give only one of --bootstrap-server or --bootstrap-controller" in r.output
