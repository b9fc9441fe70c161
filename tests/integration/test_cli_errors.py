"""What a new user hits in the first hour (issue 12): wrong answers and error paths of the
operator commands, each with its exit code and message, against a real `hightide serve`."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import AdminClient, NewTopic, TopicPartition

from ..waiting import wait_until
from .clients import Rec, confluent_produce
from .test_exporter import exporter, scrape, value  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration


def run(server, *args, env=None):
    return CliRunner().invoke(main, [*args, "-b", server.bootstrap], catch_exceptions=False, env=env)


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    async def go():
        async with AdminClient(bootstrap) as a:
            await a.create_topics([NewTopic(topic, partitions, 1)])
    asyncio.run(go())


@pytest.fixture
def assigned_no_commit(server, topic_name):
    """A live consumer that owns both partitions of a topic (3 and 0 records) but never
    committed: Kafka's tool shows LOG-END-OFFSET 3/0 and CURRENT-OFFSET '-' there."""
    from confluent_kafka import Consumer
    group = f"g-{topic_name}"
    _create(server.bootstrap, topic_name, 2)
    confluent_produce(server.bootstrap, topic_name, [Rec(0, None, b"x", (), int(time.time() * 1000)) for _ in range(3)])
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "latest", "session.timeout.ms": 30000})
    c.subscribe([topic_name])
    try:
        def assigned():
            c.poll(0.2)
            rows = json.loads(run(server, "groups", "describe", group, "-o", "json").stdout or "[]")
            return rows if len([r for r in rows if r["consumer_id"]]) == 2 else None
        wait_until(assigned, 30, what="both partitions assigned to the consumer")
        yield topic_name, group
    finally:
        c.close()


def test_assigned_partition_without_commit_shows_end_offset_and_err(server, assigned_no_commit, exporter):  # noqa: F811
    topic, group = assigned_no_commit
    r = run(server, "groups", "describe", group, "-o", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(x["partition"], x["current_offset"], x["log_end_offset"], x["lag"]) for x in rows] == [
        (0, None, 3, None), (1, None, 0, None)]
    assert [x["anomalies"] for x in rows] == [["no_commit"], ["no_commit"]]
    assert [x["status"] for x in rows] == ["ERR", "ERR"]
    state = json.loads(run(server, "groups", "describe", group, "--state", "-o", "json").stdout)
    assert state[0]["status"] == "ERR"
    fams = scrape(exporter)
    assert value(fams, "hightide_consumergroup_lag_anomaly", consumergroup=group, topic=topic, partition="0",
                 anomaly="no_commit") == 1
    assert not [s for s in fams.get("hightide_consumergroup_lag_anomaly", []) if s.labels["anomaly"] == "end_unknown"
                and s.labels["consumergroup"] == group]
    assert value(fams, "hightide_consumergroup_partition_status", consumergroup=group, topic=topic, partition="0",
                 status="ERR") == 1
    assert value(fams, "hightide_consumergroup_status", consumergroup=group, status="ERR") == 1


# -- unknown groups, share groups, unknown topics (issue 12, item 2) ------------------------------

@pytest.mark.parametrize("view", ["--offsets", "--members", "--state"])
def test_describe_unknown_group_fails_like_kafka(server, view):
    r = run(server, "groups", "describe", "no-such-group-xyz", view)
    assert r.exit_code == 1
    assert "Consumer group 'no-such-group-xyz' does not exist." in r.stderr
    assert "TOTAL-LAG" not in r.stdout and "OK" not in r.stdout


def test_describe_share_group_as_consumer_group_points_to_share_groups(server, topic_name):
    from confluent_kafka import ShareConsumer
    group = f"sg-{topic_name}"
    _create(server.bootstrap, topic_name, 1)
    c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group})
    c.subscribe([topic_name])
    try:
        def listed():
            c.poll(0.2)
            return group in run(server, "share-groups", "list").stdout
        wait_until(listed, 30, what="share group listed")
        r = run(server, "groups", "describe", group)
        assert r.exit_code == 1
        assert f"Group '{group}' is a share group: use 'hightide share-groups describe {group}'." in r.stderr
        assert "OffsetFetch" not in r.output
    finally:
        c.close()


def test_share_groups_describe_unknown_group_message(server):
    r = run(server, "share-groups", "describe", "no-such-share-group")
    assert r.exit_code == 1
    assert "Share group 'no-such-share-group' does not exist." in r.stderr


def test_delete_offsets_of_unknown_topic_is_an_error(server, topic_name):
    group = f"g-{topic_name}"
    _create(server.bootstrap, topic_name, 1)

    async def commit():
        async with AdminClient(server.bootstrap) as a:
            await a.alter_consumer_group_offsets(group, {TopicPartition(topic_name, 0): 0})
    asyncio.run(commit())
    r = run(server, "groups", "delete-offsets", group, "--topic", "no-such-topic-xyz")
    assert r.exit_code == 1
    assert "no-such-topic-xyz" in r.stderr and "does not exist" in r.stderr


# -- reset on an active group (item 3) ---------------------------------------------------------

def test_reset_of_active_group_names_its_state(server, topic_name):
    from confluent_kafka import Consumer
    group = f"g-{topic_name}"
    _create(server.bootstrap, topic_name, 1)
    confluent_produce(server.bootstrap, topic_name, [Rec(0, None, b"x", (), int(time.time() * 1000)) for _ in range(2)])
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    try:
        wait_until(lambda: c.poll(0.2) is not None, 30, what="the consumer read a record")
        c.commit(asynchronous=False)
        dry = run(server, "groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest")
        assert dry.exit_code == 0, dry.output
        assert "has active members" in dry.stderr and "--execute will fail" in dry.stderr
        r = run(server, "groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute")
        assert r.exit_code == 1
        assert "UNKNOWN_MEMBER_ID" not in r.output
        assert (f"Assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is Stable.") in r.stderr
    finally:
        c.close()
