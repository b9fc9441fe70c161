"""`hightide` operator commands against a real `hightide serve` (click's runner, real
network). Table output is snapshot-tested after normalising names and volatile columns."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import AdminClient, TopicPartition

from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration


def run(server, *args, ok=True):
    r = CliRunner().invoke(main, [*args, "-b", server.bootstrap], catch_exceptions=False)
    if ok:
        assert r.exit_code == 0, r.output
    return r


def norm(text: str, **names: str) -> list[str]:
    out = []
    for line in text.strip().splitlines():
        if set(line.strip()) <= {"─", " "}:
            continue
        for label, value in names.items():
            line = line.replace(value, label)
        line = re.sub(r"\d+\.\d{3}s", "<secs>", line)
        line = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", line)
        out.append(" | ".join(re.split(r"\s{2,}", line.strip())))
    return out


@pytest.fixture
def loaded(server, topic_name):
    """A topic with 3 partitions (10/5/0 records, timestamp 1 h ago) and a group committed at 4/5/-."""
    group = f"g-{topic_name}"
    run(server, "topics", "create", topic_name, "--partitions", "3")
    ts = int(time.time() * 1000) - 3_600_000
    confluent_produce(server.bootstrap, topic_name,
                      [Rec(p, None, b"x", (), ts + i) for p, n in ((0, 10), (1, 5)) for i in range(n)])

    async def commit():
        async with AdminClient(server.bootstrap) as a:
            await a.alter_consumer_group_offsets(group, {TopicPartition(topic_name, 0): 4,
                                                         TopicPartition(topic_name, 1): 5})
    asyncio.run(commit())
    return topic_name, group, ts


def test_groups_describe_table_snapshot(server, loaded):
    topic, group, _ = loaded
    r = run(server, "groups", "describe", group)
    assert norm(r.output, GROUP=group, TOPIC=topic) == [
        "GROUP | TOPIC | PARTITION | CURRENT-OFFSET | LOG-END-OFFSET | LAG | CONSUMER-ID | HOST | CLIENT-ID | TIME-LAG | STATUS | NOTE",
        "GROUP | TOPIC | 0 | 4 | 10 | 6 | - | - | - | <secs> | STOP | -",
        "GROUP | TOPIC | 1 | 5 | 5 | 0 | - | - | - | <secs> | OK | -",
    ]
    state = run(server, "groups", "describe", group, "--state")
    assert norm(state.output, GROUP=group)[1] == "GROUP | 1 | - | Empty | 0 | STOP | 6 | <secs>"


def test_groups_describe_json_and_time_lag(server, loaded):
    topic, group, ts = loaded
    rows = json.loads(run(server, "groups", "describe", group, "-o", "json").stdout)
    p0 = rows[0]
    assert (p0["current_offset"], p0["log_end_offset"], p0["lag"], p0["consumer_id"]) == (4, 10, 6, None)
    assert p0["time_lag_method"] == "record_timestamp"
    assert abs(p0["time_lag_ms"] - (time.time() * 1000 - (ts + 4))) < 5_000
    assert p0["time_lags"]["max_timestamp_anchor"]["certainty"] == "lower_bound"


def test_topics_and_offsets(server, loaded):
    topic, _, ts = loaded
    assert topic in run(server, "topics", "list").output
    desc = norm(run(server, "topics", "describe", topic).output, TOPIC=topic)
    assert desc == ["TOPIC | PARTITION | LEADER | REPLICAS | ISR | LOG-START-OFFSET | LOG-END-OFFSET",
                    "TOPIC | 0 | 1 | 1 | 1 | 0 | 10", "TOPIC | 1 | 1 | 1 | 1 | 0 | 5",
                    "TOPIC | 2 | 1 | 1 | 1 | 0 | 0"]
    mx = json.loads(run(server, "offsets", topic, "--spec", "max-timestamp", "-o", "json").stdout)
    assert [(r["offset"], r["timestamp"]) for r in mx] == [(9, ts + 9), (4, ts + 4), (None, None)]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((ts + 3) / 1000)) + f".{(ts + 3) % 1000:03d}Z"
    at = json.loads(run(server, "offsets", topic, "--spec", iso, "-o", "json").stdout)
    assert [r["offset"] for r in at] == [3, 3, None]
    live = json.loads(run(server, "topics", "liveness", topic, "--idle-after", "60", "-o", "json").stdout)
    assert [r["status"] for r in live] == ["IDLE", "IDLE", "EMPTY"]
    assert live[0]["last_write_ms"] == ts + 9


def test_reset_and_delete_offsets(server, loaded):
    topic, group, _ = loaded
    dry = json.loads(run(server, "groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-earliest",
                         "-o", "json").stdout)
    assert [(r["current_offset"], r["new_offset"], r["applied"]) for r in dry] == [(4, 0, False)]
    rows = json.loads(run(server, "groups", "describe", group, "-o", "json").stdout)
    assert rows[0]["current_offset"] == 4  # dry run changed nothing
    run(server, "groups", "reset-offsets", group, "--all-topics", "--to-offset", "7", "--execute")
    rows = json.loads(run(server, "groups", "describe", group, "-o", "json").stdout)
    assert [r["current_offset"] for r in rows] == [7, 5]  # clamped to the log end of partition 1
    run(server, "groups", "delete-offsets", group, "--topic", f"{topic}:1")
    rows = json.loads(run(server, "groups", "describe", group, "-o", "json").stdout)
    assert [r["partition"] for r in rows] == [0]
    assert group in run(server, "groups", "list").output


def test_lag_watch_bounded(server, loaded):
    _, group, _ = loaded
    r = run(server, "lag", "watch", group, "--iterations", "3", "--interval", "0.1", "-o", "json")
    docs = [json.loads(line) for line in r.output.strip().splitlines()]
    assert len(docs) == 3
    assert docs[-1]["groups"][group]["total_lag"] == 6
    table = run(server, "lag", "watch", group, "--iterations", "2", "--interval", "0.1")
    assert "refresh 2" in table.output and "LOG-END-OFFSET" in table.output


def test_errors_are_clean(server):
    r = run(server, "topics", "describe", "no-such-topic-xyz", ok=False)
    assert r.exit_code == 1 and "UnknownTopicOrPartition" in r.output
