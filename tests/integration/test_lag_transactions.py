"""Lag that is true around transactions, against a real ``hightide serve``: the "stuck at 1"
pitfall (a commit that only transaction markers separate from the end is lag 0), open
transactions (lag to the LSO for read_committed, the records beyond it as PENDING) and an
aborted transaction at the end, in ``hightide groups describe``, ``hightide lag watch``
(JSON and table) and the exporter."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import AdminClient, TopicPartition

from ..conftest import free_port
from .clients import confluent_create_topic
from .test_exporter import scrape, value

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")


def _txn(bootstrap: str, topic: str, n: int, *, commit: bool | None, tid: str | None = None) -> "ck.Producer":
    """A transaction of ``n`` records to partition 0: committed, aborted, or (None) left open."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid or f"lag-{uuid.uuid4().hex[:8]}",
                     "linger.ms": 1})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, f"r{i}".encode(), partition=0)
    assert p.flush(15) == 0
    if commit is True:
        p.commit_transaction(15)
    elif commit is False:
        p.abort_transaction(15)
    return p


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    async def go() -> None:
        async with AdminClient(bootstrap) as a:
            await a.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): offset})
    asyncio.run(go())


def _describe(bootstrap: str, group: str, isolation: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["groups", "describe", group, "--isolation", isolation, "-b", bootstrap,
                                  "-o", "json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.output)
    return row


def test_committed_transaction_at_the_end_is_lag_0(server, topic_name):
    """0-2 data, 3 COMMIT marker, HW 4: a commit at 3 (after the last record, before the
    marker: what librdkafka and kafka-python commit) and at 4 are both caught up."""
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    _txn(server.bootstrap, topic_name, 3, commit=True)
    g = f"g-{uuid.uuid4().hex[:8]}"
    _commit(server.bootstrap, g, topic_name, 3)
    for isolation in ("read_committed", "read_uncommitted"):
        row = _describe(server.bootstrap, g, isolation)
        assert (row["lag"], row["invisible_tail"], row["log_end_offset"], row["pending"]) == (0, 1, 4, 0), row
        assert row["status"] == "OK" and "caught up: 1 marker" in row["note"]
    _commit(server.bootstrap, g, topic_name, 2)
    row = _describe(server.bootstrap, g, "read_committed")
    assert (row["lag"], row["invisible_tail"]) == (2, 0)  # a record left: the raw lag, marker counted
    _commit(server.bootstrap, g, topic_name, 4)
    assert _describe(server.bootstrap, g, "read_committed")["lag"] == 0


def test_a_real_consumer_that_read_everything_is_lag_0(server, topic_name):
    """A read_committed librdkafka consumer that commits each message it processed
    (``commit(message=m)``: last offset + 1, the usual at-least-once pattern) leaves its
    commit at the marker, 3; the group shows lag 0 all the same. (``commit()`` of the
    position after fetching the marker commits 4, which is lag 0 anyway.)"""
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    _txn(server.bootstrap, topic_name, 3, commit=True)
    g = f"g-{uuid.uuid4().hex[:8]}"
    c = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": g, "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic_name, 0, ck.OFFSET_BEGINNING)])
        got = []
        while len(got) < 3:
            m = c.poll(10)
            assert m is not None and not m.error(), m and m.error()
            got.append(m.value())
            c.commit(message=m, asynchronous=False)
        committed = c.committed([ck.TopicPartition(topic_name, 0)], 10)[0].offset
    finally:
        c.close()
    assert committed == 3
    row = _describe(server.bootstrap, g, "read_committed")
    assert (row["current_offset"], row["lag"], row["invisible_tail"]) == (3, 0, 1), row


def test_open_transaction_lag_to_the_lso_pending_apart(server, topic_name):
    """0-2 committed (marker 3), then an open transaction 4-5: LSO 4, HW 6."""
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    _txn(server.bootstrap, topic_name, 3, commit=True)
    open_txn = _txn(server.bootstrap, topic_name, 2, commit=None)
    try:
        g = f"g-{uuid.uuid4().hex[:8]}"
        _commit(server.bootstrap, g, topic_name, 3)
        rc = _describe(server.bootstrap, g, "read_committed")
        assert (rc["lag"], rc["log_end_offset"], rc["last_stable_offset"], rc["high_watermark"], rc["pending"]) == \
            (0, 4, 4, 6, 2), rc
        assert "2 pending in open transaction(s)" in rc["note"]
        assert rc["source"] == "extension"  # HW and LSO came with OffsetFetch (tags 10000, 10002)
        ru = _describe(server.bootstrap, g, "read_uncommitted")
        assert (ru["lag"], ru["pending"], ru["invisible_tail"]) == (3, 2, 0), ru  # the open records are readable
        _commit(server.bootstrap, g, topic_name, 1)
        assert _describe(server.bootstrap, g, "read_committed")["lag"] == 3
        table = CliRunner().invoke(main, ["groups", "describe", g, "--isolation", "read_committed",
                                          "-b", server.bootstrap]).output
        head = table.splitlines()[0].split()
        assert head[head.index("LAG") + 1] == "PENDING"
        r = CliRunner().invoke(main, ["lag", "watch", g, "--iterations", "1", "--isolation", "read_committed",
                                      "-b", server.bootstrap, "-o", "json"], catch_exceptions=False)
        [part] = json.loads(r.output)["groups"][g]["partitions"]
        assert (part["lag"], part["pending"]) == (3, 2)
    finally:
        open_txn.abort_transaction(15)


def test_aborted_transaction_at_the_end(server, topic_name):
    """0-1 committed (marker 2), 3-5 aborted (marker 6), HW 7; a commit at 3: a
    read_committed consumer has nothing left (lag 0), a read_uncommitted one has the
    three aborted records (lag 4, markers counted)."""
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    _txn(server.bootstrap, topic_name, 2, commit=True)
    _txn(server.bootstrap, topic_name, 3, commit=False)
    g = f"g-{uuid.uuid4().hex[:8]}"
    _commit(server.bootstrap, g, topic_name, 3)
    rc = _describe(server.bootstrap, g, "read_committed")
    assert (rc["lag"], rc["invisible_tail"], rc["log_end_offset"]) == (0, 4, 7), rc
    ru = _describe(server.bootstrap, g, "read_uncommitted")
    assert (ru["lag"], ru["invisible_tail"]) == (4, 0), ru
    _commit(server.bootstrap, g, topic_name, 6)  # kafka-python style after reading the aborted records
    assert _describe(server.bootstrap, g, "read_uncommitted")["lag"] == 0


def test_exporter_reports_pending_and_caught_up_at_markers(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    _txn(server.bootstrap, topic_name, 3, commit=True)
    open_txn = _txn(server.bootstrap, topic_name, 2, commit=None)
    g = f"g-{uuid.uuid4().hex[:8]}"
    _commit(server.bootstrap, g, topic_name, 3)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", server.bootstrap, "--port", str(port),
                             "--listen", "127.0.0.1", "--min-interval", "0", "--group", g,
                             "--isolation", "read_committed"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        fams = scrape(port)
        labels = {"consumergroup": g, "topic": topic_name, "partition": "0"}
        assert value(fams, "kafka_consumergroup_lag", **labels) == 0
        assert value(fams, "hightide_consumergroup_pending_records", **labels) == 2
        assert value(fams, "hightide_consumergroup_invisible_tail", **labels) == 1
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
        open_txn.abort_transaction(15)
    assert b"Traceback" not in err, err.decode()


def test_two_call_path_as_against_kafka(server, topic_name):
    """Without hightide's extension (any Kafka broker: OffsetFetch, then ListOffsets) the
    marker look-up still makes a commit on the marker lag 0; pending needs both HW and
    LSO, which a read_committed ListOffsets does not give: unknown (None)."""
    from hightide.monitoring.monitor import LagMonitor
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    _txn(server.bootstrap, topic_name, 3, commit=True)
    g = f"g-{uuid.uuid4().hex[:8]}"
    _commit(server.bootstrap, g, topic_name, 3)

    async def go() -> Any:
        async with AdminClient(server.bootstrap, use_extensions=False) as a:
            snap = await LagMonitor(a, isolation_level="read_committed").snapshot([g])
            return snap.groups[g].partitions[0]
    p = asyncio.run(go())
    assert p.source == "list_offsets"
    assert (p.offsets.lag, p.offsets.invisible_tail, p.offsets.end_offset, p.offsets.pending) == (0, 1, 4, None)
    assert p.status is not None and p.status.status.value == "OK"
