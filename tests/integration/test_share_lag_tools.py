"""Share-partition lag from DescribeShareGroupOffsets v1, ``hightide share-groups`` and the
exporter, all against one oracle: share state written directly with WriteShareGroupState
(the seed's worked example on partition 0), so every expected number is known."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from ..conftest import free_port
from ..rawkafka import RawClient
from .test_cli import norm, run
from .test_exporter import exporter, scrape, value  # noqa: F401  (fixture)
from .test_share_group_offsets import describe, join_and_leave, produce, seed_oracle
from .test_share_state import topic_id

pytestmark = pytest.mark.integration


@pytest.fixture
def share_oracle(server, topic_name):
    """An empty share group on a 2-partition topic (11 and 4 records) with known state:
    lag 7 (seed example: 6 available in flight + 1 not delivered) and 2."""
    group = f"sg-{uuid.uuid4().hex[:8]}"
    run(server, "topics", "create", topic_name, "--partitions", "2")
    produce(server.bootstrap, topic_name, 0, 11)
    produce(server.bootstrap, topic_name, 1, 4)
    with RawClient(server.bootstrap) as c:
        tid = topic_id(c, topic_name)
        join_and_leave(c, group, topic_name)
        expected = seed_oracle(c, group, tid)
    return topic_name, group, expected


def test_lag_agrees_everywhere(server, share_oracle, exporter):  # noqa: F811
    topic, group, expected = share_oracle
    with RawClient(server.bootstrap) as c:
        parts, _ = describe(c, group)
    wire = {p: parts[(topic, p)].lag for p in (0, 1)}
    assert wire == expected == {0: 7, 1: 2}
    rows = json.loads(run(server, "share-groups", "describe", group, "-o", "json").stdout)
    assert {r["partition"]: r["lag"] for r in rows} == expected
    assert {r["partition"]: r["start_offset"] for r in rows} == {0: 2, 1: 1}
    fams = scrape(exporter)
    for p, lag in expected.items():
        assert value(fams, "hightide_sharegroup_lag", sharegroup=group, topic=topic, partition=str(p)) == lag
    assert value(fams, "hightide_sharegroup_lag_sum", sharegroup=group, topic=topic) == 9
    assert value(fams, "hightide_sharegroup_start_offset", sharegroup=group, topic=topic, partition="0") == 2
    counts = {s: value(fams, "hightide_sharegroup_records", sharegroup=group, topic=topic, partition="0", state=s)
              for s in ("available", "acknowledged", "archived", "not_persisted")}
    # seed: 2,3,4,7,8,9 in flight; 5 acknowledged; 6 archived; 10 past the in-flight window
    assert counts == {"available": 6, "acknowledged": 1, "archived": 1, "not_persisted": 1}
    assert counts["available"] + counts["not_persisted"] == expected[0]
    assert value(fams, "hightide_sharegroup_members", sharegroup=group) == 0
    assert value(fams, "hightide_sharegroup_state", sharegroup=group, state="Empty") == 1


def test_describe_tables(server, share_oracle):
    topic, group, _ = share_oracle
    r = run(server, "share-groups", "describe", group)
    assert norm(r.output, GROUP=group, TOPIC=topic) == [
        "GROUP | TOPIC | PARTITION | START-OFFSET | LAG",
        "GROUP | TOPIC | 0 | 2 | 7",
        "GROUP | TOPIC | 1 | 1 | 2",
    ]
    r = run(server, "share-groups", "describe", group, "--verbose")
    assert norm(r.output, GROUP=group, TOPIC=topic)[:2] == [
        "GROUP | TOPIC | PARTITION | LEADER-EPOCH | START-OFFSET | LAG", "GROUP | TOPIC | 0 | 0 | 2 | 7"]
    r = run(server, "share-groups", "describe", group, "--state")
    assert norm(r.output, GROUP=group)[1:] == ["GROUP | 127.0.0.1:" + server.bootstrap.split(":")[1] + " (1) | Empty | 0",
                                               "Share group 'GROUP' has no active members."]
    listed = norm(run(server, "share-groups", "list").output, GROUP=group)
    assert listed[0] == "GROUP | STATE" and "GROUP | Empty" in listed
    # a live member: --members shows its assignment; an uninitialised partition shows '-'
    other = f"sg-{uuid.uuid4().hex[:8]}"
    with RawClient(server.bootstrap) as c:
        member = str(uuid.uuid4())
        hb = c.request(76, 1, {"group_id": other, "member_id": member, "member_epoch": 0, "rack_id": None,
                               "subscribed_topic_names": [topic]})
        assert hb.error_code == 0
        r = run(server, "share-groups", "describe", other, "--members")
        assert norm(r.output, GROUP=other, TOPIC=topic, MEMBER=member)[1:] == [
            "GROUP | MEMBER | /127.0.0.1 | rawkafka | 2 | TOPIC:0,1"]
        r = run(server, "share-groups", "describe", other)
        assert norm(r.output, GROUP=other, TOPIC=topic)[1:] == ["GROUP | TOPIC | 0 | - | -", "GROUP | TOPIC | 1 | - | -"]
        r = run(server, "share-groups", "reset-offsets", other, "--all-topics", "--to-earliest", "--execute", ok=False)
        assert r.exit_code != 0 and "is not empty" in r.output
        c.request(76, 1, {"group_id": other, "member_id": member, "member_epoch": -1, "rack_id": None,
                          "subscribed_topic_names": None})
    r = run(server, "share-groups", "describe", "no-such-group", ok=False)
    assert r.exit_code == 1 and r.output == "Share group 'no-such-group' does not exist.\n"


def test_reset_and_delete_offsets(server, share_oracle):
    topic, group, _ = share_oracle
    r = run(server, "share-groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-latest")
    assert norm(r.output, GROUP=group, TOPIC=topic)[:2] == [
        "GROUP | TOPIC | PARTITION | START-OFFSET | NEW-OFFSET", "GROUP | TOPIC | 0 | 2 | 11"]
    assert "Dry run" in r.output
    with RawClient(server.bootstrap) as c:
        assert describe(c, group)[0][(topic, 0)].start_offset == 2  # unchanged
    run(server, "share-groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "9", "--execute")
    rows = json.loads(run(server, "share-groups", "describe", group, "-o", "json").stdout)
    assert {r["partition"]: (r["start_offset"], r["lag"]) for r in rows} == {0: (9, 2), 1: (1, 2)}
    r = run(server, "share-groups", "delete-offsets", group, "--topic", topic)
    assert norm(r.output, GROUP=group, TOPIC=topic)[1:] == ["GROUP | TOPIC | Successful"]
    assert json.loads(run(server, "share-groups", "describe", group, "-o", "json").stdout) == []
    r = run(server, "share-groups", "delete-offsets", group, "--topic", topic, ok=False)
    assert r.exit_code == 1 and "no offset information" in r.output.lower()


def test_live_share_consumers_lag_agrees(server, topic_name, exporter):  # noqa: F811
    """Two ShareConsumers accept some records and reject others (archived) and release the
    rest; then more records arrive. Oracle: records neither accepted nor rejected."""
    from .test_share_consumer import (
        AcknowledgeType,
        _consumer,
        _poll_all,
        _produce,
        _setup,
    )
    group, _ = _setup(server.bootstrap, topic_name, 80)
    consumers = [_consumer(server.bootstrap, group, explicit=True) for _ in range(2)]
    done: set[int] = set()
    seen: set[int] = set()

    def ack(i, c, m):
        o = m.offset()
        seen.add(o)
        if o < 30 or o % 7 == 0:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            done.add(o)
        elif o % 5 == 0:
            c.acknowledge(m, AcknowledgeType.REJECT)
            done.add(o)
        else:
            c.acknowledge(m, AcknowledgeType.RELEASE)

    try:
        for c in consumers:
            c.subscribe([topic_name])
        _poll_all(consumers, lambda: len(seen) >= 80, on_message=ack)
        for c in consumers:
            c.commit_sync()
    finally:
        for c in consumers:
            c.close()
    _produce(server.bootstrap, topic_name, 15)
    oracle = sum(1 for o in range(95) if o not in done)
    with RawClient(server.bootstrap) as c:
        parts, _ = describe(c, group)
    assert parts[(topic_name, 0)].lag == oracle
    rows = json.loads(run(server, "share-groups", "describe", group, "-o", "json").stdout)
    assert [r["lag"] for r in rows] == [oracle]
    fams = scrape(exporter)
    assert value(fams, "hightide_sharegroup_lag", sharegroup=group, topic=topic_name, partition="0") == oracle
    counts = {s: value(fams, "hightide_sharegroup_records", sharegroup=group, topic=topic_name, partition="0", state=s)
              for s in ("available", "not_persisted")}
    assert counts["available"] + counts["not_persisted"] == oracle
    assert counts["not_persisted"] >= 15


def test_lag_watch_shows_share_groups(server, share_oracle):
    """Issue 30 item 5: ``lag watch SHARE_GROUP`` shows the share partitions' start offset,
    end and lag (before: ``group=-`` and an empty table); without arguments share groups
    are watched too."""
    topic, group, expected = share_oracle
    doc = json.loads(run(server, "lag", "watch", group, "--iterations", "1", "-o", "json").stdout)
    assert group not in doc["groups"]
    sg = doc["share_groups"][group]
    assert {r["partition"]: r["lag"] for r in sg["partitions"]} == expected and sg["total_lag"] == 9
    assert {r["partition"]: r["current_offset"] for r in sg["partitions"]} == {0: 2, 1: 1}
    table = run(server, "lag", "watch", group, "--iterations", "1").stdout
    assert f"{group}=share:Empty" in table
    lines = [line.split() for line in table.splitlines() if line.startswith(group)]
    assert [(ln[1], ln[2], ln[5]) for ln in lines] == [(topic, "0", "7"), (topic, "1", "2")], table
    everything = json.loads(run(server, "lag", "watch", "--iterations", "1", "-o", "json").stdout)
    assert everything["share_groups"][group]["total_lag"] == 9


def test_scale_hint(server, share_oracle):
    """``--scale-hint TARGET``: desired consumers = ceil(share lag / TARGET) (lag 9 here)."""
    topic, group, _ = share_oracle
    rows = json.loads(run(server, "share-groups", "describe", group, "--scale-hint", "4", "-o", "json").stdout)
    assert rows == [{"group": group, "lag": 9, "target": 4, "members": 0, "desired": 3}]
    r = run(server, "share-groups", "describe", group, "--scale-hint", "9")
    assert norm(r.output, GROUP=group)[:2] == [
        "GROUP | SHARE-LAG | TARGET-PER-CONSUMER | MEMBERS | DESIRED-CONSUMERS", "GROUP | 9 | 9 | 0 | 1"]
    r = run(server, "share-groups", "describe", group, "--scale-hint", "0", ok=False)
    assert r.exit_code == 2 and "Traceback" not in r.output


@pytest.fixture
def scaling_exporter(server):
    """An exporter with two share scale targets (4 and 100 records per consumer)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", server.bootstrap, "--port", str(port),
                             "--listen", "127.0.0.1", "--min-interval", "0", "--share-scale-target", "4",
                             "--share-scale-target", "100"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield port
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()


def test_exporter_desired_consumers(server, share_oracle, scaling_exporter):
    topic, group, _ = share_oracle
    fams = scrape(scaling_exporter)
    assert value(fams, "hightide_sharegroup_desired_consumers", sharegroup=group, target="4") == 3
    assert value(fams, "hightide_sharegroup_desired_consumers", sharegroup=group, target="100") == 1
