"""`hightide` operator commands against a real `hightide serve` (click's runner, real
network). Table output is snapshot-tested after normalising names and volatile columns."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
import uuid
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
    assert norm(state.output, GROUP=group)[1] == f"GROUP | {server.bootstrap} (1) | - | Empty | 0 | STOP | 6 | <secs>"


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
    desc = run(server, "topics", "describe", topic).output.replace(topic, "TOPIC").splitlines()
    assert re.fullmatch(r"Topic: TOPIC\tTopicId: [\w-]{22}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: .*",
                        desc[0]), desc[0]
    sizes = [sum(f.stat().st_size for f in (Path(server.data_dir) / f"{topic}-{p}").glob("*.log")) for p in range(3)]
    assert sizes[0] > sizes[1] > sizes[2] == 0  # 10, 5 and 0 records
    assert desc[1:] == [f"\tTopic: TOPIC\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A"
                        f"\tSize: {sizes[p]}" for p in range(3)]
    doc = json.loads(run(server, "topics", "describe", topic, "-o", "json").stdout)[0]
    assert doc["size_bytes"] == sum(sizes) and [r["size_bytes"] for r in doc["partitions"]] == sizes
    rows = doc["partitions"]
    assert [(r["log_start_offset"], r["log_end_offset"]) for r in rows] == [(0, 10), (0, 5), (0, 0)]
    assert run(server, "topics", "describe", topic, "--under-replicated-partitions").output == ""
    assert run(server, "topics", "describe", topic, "--unavailable-partitions").output == ""
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
    # piped (not a terminal): every refresh in full, in order, each ending in a newline
    assert table.stdout.endswith("\n") and "\033" not in table.stdout
    refreshes = table.stdout.split("\n\n")
    assert [r.splitlines()[0].split(" · ")[0] for r in refreshes] == ["refresh 1", "refresh 2"]
    assert all("LOG-END-OFFSET" in r for r in refreshes)


def test_errors_are_clean(server):
    r = run(server, "topics", "describe", "no-such-topic-xyz", ok=False)
    assert r.exit_code == 1 and "UnknownTopicOrPartition" in r.output


@pytest.fixture
def live_group(server):
    """Short names, a live consumer (client.id 'width-test') owning partition 0 and 1 of
    a topic with 3 partitions, a commit on partition 0 only."""
    from confluent_kafka import Consumer

    from ..waiting import wait_until
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"w-{suffix}", f"g-{suffix}"
    run(server, "topics", "create", topic, "--partitions", "2")
    confluent_produce(server.bootstrap, topic, [Rec(p, None, b"x", (), int(time.time() * 1000))
                                                for p, n in ((0, 7), (1, 3)) for _ in range(n)])
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "client.id": "width-test",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        wait_until(lambda: c.poll(0.2) is not None and len(c.assignment()) == 2, 30, what="assignment")
        c.commit(offsets=[TopicPartition_(topic, 0, 5)], asynchronous=False)
        yield topic, group
    finally:
        c.close()


def TopicPartition_(topic, partition, offset):  # noqa: N802 - confluent's class, imported lazily
    from confluent_kafka import TopicPartition as CTP
    return CTP(topic, partition, offset)


def _describe_at(server, width: int, topic: str, group: str, *args: str) -> list[str]:
    """``groups describe`` as a terminal of ``width`` columns shows it: every line fits
    (names here are short enough), cells split on runs of spaces, names and volatile
    values masked; the stderr note last."""
    r = CliRunner().invoke(main, ["groups", "describe", group, *args, "-b", server.bootstrap],
                           env={"HIGHTIDE_WIDTH": str(width)}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.stdout.rstrip("\n").splitlines()
    assert max(len(line) for line in lines) <= width, lines
    out = []
    for line in lines:
        line = re.sub(r"width-test-[0-9a-f-]{36}", "width-test-<uuid>", line)
        line = re.sub(r"\d+\.\d{3}s", "<secs>", line)
        out.append(" | ".join(re.split(r"\s{2,}", line.replace(topic, "TOPIC").replace(group, "GROUP"))))
    return out + [f"stderr: {line}" for line in r.stderr.splitlines()]


def test_describe_key_columns_survive_every_width(server, live_group):
    """Issue 12 item 6: GROUP, TOPIC, PARTITION, offsets, LAG and STATUS are never hidden
    nor cut; CLIENT-ID, HOST, CONSUMER-ID, NOTE and TIME-LAG go first, in that order."""
    topic, group = live_group
    assert _describe_at(server, 80, topic, group) == [
        "GROUP | TOPIC | PARTITION | CURRENT-OFFSET | LOG-END-OFFSET | LAG | STATUS",
        "GROUP | TOPIC | 0 | 5 | 7 | 2 | OK",
        "GROUP | TOPIC | 1 | - | 3 | - | ERR",
        "stderr: hidden columns: CLIENT-ID HOST CONSUMER-ID NOTE TIME-LAG (-o json shows all)",
    ]
    assert _describe_at(server, 120, topic, group) == [
        "GROUP | TOPIC | PARTITION | CURRENT-OFFSET | LOG-END-OFFSET | LAG | TIME-LAG | STATUS | NOTE",
        "GROUP | TOPIC | 0 | 5 | 7 | 2 | <secs> | OK | -",
        "GROUP | TOPIC | 1 | - | 3 | - | <secs> | ERR | no_commit: estimated lag 3",
        "stderr: hidden columns: CLIENT-ID HOST CONSUMER-ID (-o json shows all)",
    ]
    full = [
        "GROUP | TOPIC | PARTITION | CURRENT-OFFSET | LOG-END-OFFSET | LAG | CONSUMER-ID | HOST | CLIENT-ID | "
        "TIME-LAG | STATUS | NOTE",
        "GROUP | TOPIC | 0 | 5 | 7 | 2 | width-test-<uuid> | /127.0.0.1 | width-test | <secs> | OK | -",
        "GROUP | TOPIC | 1 | - | 3 | - | width-test-<uuid> | /127.0.0.1 | width-test | <secs> | ERR | "
        "no_commit: estimated lag 3",
    ]
    assert _describe_at(server, 200, topic, group) == full
    coordinator = f"{server.bootstrap} (1)"  # as share-groups --state and kafka-consumer-groups.sh
    narrow = _describe_at(server, 80, topic, group, "--state")  # (the port's length decides the rest)
    row = dict(zip(narrow[0].split(" | "), narrow[1].split(" | ")))
    assert {k: row[k] for k in ("GROUP", "STATE", "#MEMBERS", "STATUS", "TOTAL-LAG")} == {
        "GROUP": "GROUP", "STATE": "Stable", "#MEMBERS": "1", "STATUS": "ERR", "TOTAL-LAG": "5 (est.)"}
    assert "ASSIGNMENT-STRATEGY" not in row and narrow[-1].startswith("stderr: hidden columns: ASSIGNMENT-STRATEGY")
    assert _describe_at(server, 120, topic, group, "--state") == [
        "GROUP | COORDINATOR (ID) | ASSIGNMENT-STRATEGY | STATE | #MEMBERS | STATUS | TOTAL-LAG | MAX-TIME-LAG",
        f"GROUP | {coordinator} | range | Stable | 1 | ERR | 5 (est.) | <secs>"]


def test_long_names_are_never_cut(server, loaded):
    """Names longer than the terminal: lines overflow (the terminal wraps them, as with
    Kafka's tool); the group and topic names are printed whole."""
    topic, group, _ = loaded
    r = CliRunner().invoke(main, ["groups", "describe", group, "-b", server.bootstrap],
                           env={"HIGHTIDE_WIDTH": "80"}, catch_exceptions=False)
    body = r.stdout.splitlines()[1:]
    assert [line.split()[:6] for line in body] == [[group, topic, "0", "4", "10", "6"],
                                                   [group, topic, "1", "5", "5", "0"]]
    assert [line.split()[-1] for line in body] == ["STOP", "OK"]


def test_piped_output_is_never_squeezed(server, loaded):
    """Not a terminal and no HIGHTIDE_WIDTH: every column, whatever COLUMNS says."""
    _, group, _ = loaded
    r = CliRunner().invoke(main, ["groups", "describe", group, "-b", server.bootstrap],
                           env={"COLUMNS": "40"}, catch_exceptions=False)
    assert "CLIENT-ID" in r.stdout and r.stderr == ""
