"""Issue 30: lag that stays true with transactions and partitions without commits, as an
oracle (what was produced, committed, aborted → expected lag and time lag), checked the
same way in ``hightide groups describe`` / ``lag watch`` (JSON), the exporter and the
console, against a real ``hightide serve``.

* caught up at the markers: offset lag 0 → time lag 0 by every method, with the reason;
* a large aborted batch (600 records, ~125 KB) after the commit, on a partition that is
  not the first of the marker probe's Fetch: lag 0, not 601 and STOP;
* partitions a member owns but the group never committed: in the totals, estimated from
  the log start (the default ``auto.offset.reset`` assumption), flagged as an estimate.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
import warnings
from typing import Any

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.client import AdminClient, TopicPartition

from ..conftest import free_port
from ..waiting import wait_until
from .clients import confluent_create_topic
from .test_exporter import scrape, value

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")


def _txn(bootstrap: str, topic: str, partition: int, n: int, *, commit: bool, size: int = 8,
         batch: bool = False) -> None:
    """A transaction of ``n`` records of ``size`` bytes to ``partition``, committed or aborted;
    ``batch``: all of them in one record batch (one produce, long linger, no compression)."""
    conf = {"bootstrap.servers": bootstrap, "transactional.id": f"truth-{uuid.uuid4().hex[:8]}",
            "linger.ms": 500 if batch else 1, "compression.type": "none", "batch.size": 4 * 1024 * 1024,
            "message.max.bytes": 8 * 1024 * 1024}
    p = ck.Producer(conf)
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, (b"%08d" % i).ljust(size, b"x"), partition=partition)
    assert p.flush(15) == 0
    if commit:
        p.commit_transaction(15)
    else:
        p.abort_transaction(15)


def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    async def go() -> None:
        async with AdminClient(bootstrap) as a:
            await a.alter_consumer_group_offsets(group, offsets)
    asyncio.run(go())


def _cli(bootstrap: str, *args: str) -> Any:
    r = CliRunner().invoke(main, [*args, "-b", bootstrap, "-o", "json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output.splitlines()[-1] if args[0] == "lag" else r.output)


def _rows(bootstrap: str, group: str, isolation: str) -> dict[int, dict[str, Any]]:
    return {r["partition"]: r for r in _cli(bootstrap, "groups", "describe", group, "--isolation", isolation)}


@pytest.fixture
def markers_and_big_abort(server, topic_name):
    """Partition 0: records 0-2 committed, 3 COMMIT marker (HW 4); the group committed 3.
    Partition 1: one aborted batch of 600 records of 200 bytes (0-599), 600 ABORT marker
    (HW 601); the group committed 0. Records are 2 s old when the tools look."""
    confluent_create_topic(server.bootstrap, topic_name, partitions=2)
    _txn(server.bootstrap, topic_name, 0, 3, commit=True)
    _txn(server.bootstrap, topic_name, 1, 600, commit=False, size=200, batch=True)
    g = f"g-{uuid.uuid4().hex[:8]}"
    _commit(server.bootstrap, g, {TopicPartition(topic_name, 0): 3, TopicPartition(topic_name, 1): 0})
    time.sleep(2.0)  # a time lag measured from the records would be >= 2 s now
    return topic_name, g


# (partition, isolation) -> (lag, invisible_tail, log_end_offset)
ORACLE = {(0, "read_committed"): (0, 1, 4), (0, "read_uncommitted"): (0, 1, 4),
          (1, "read_committed"): (0, 601, 601), (1, "read_uncommitted"): (601, 0, 601)}


def _check_time_lag(row: dict[str, Any]) -> None:
    """Offset lag 0 → time lag 0 by every method, the reason given."""
    assert row["time_lag_ms"] == 0, row
    for method, t in row["time_lags"].items():
        assert t["ms"] == 0 and t["reason"] == "caught_up_at_markers", (method, row)
    assert "time-lag 0: caught up at markers" in row["note"], row


def test_caught_up_at_markers_is_time_lag_0_in_the_cli(server, markers_and_big_abort):
    topic, g = markers_and_big_abort
    for isolation in ("read_committed", "read_uncommitted"):
        rows = _rows(server.bootstrap, g, isolation)
        for p in (0, 1):
            lag, tail, end = ORACLE[(p, isolation)]
            r = rows[p]
            assert (r["lag"], r["invisible_tail"], r["log_end_offset"]) == (lag, tail, end), (isolation, r)
            if lag == 0:
                _check_time_lag(r)
            else:
                assert r["time_lag_ms"] >= 2000, r  # 600 aborted records, readable and 2 s old
    doc = _cli(server.bootstrap, "lag", "watch", g, "--iterations", "2", "--interval", "0.5", "--isolation",
               "read_committed")
    grp = doc["groups"][g]
    assert grp["total_lag"] == 0 and grp["max_time_lag_ms"] == 0 and grp["status"] == "OK", grp
    for r in grp["partitions"]:
        _check_time_lag(r)


def test_large_aborted_batch_is_probed_not_reported_as_lag(server, markers_and_big_abort):
    """Partition 1's first batch (~125 KB) is larger than the probe's 64 KiB per partition
    and partition 0 comes first in the Fetch: the broker answers 0 bytes for it (KIP-74);
    the probe asks again for it alone."""
    topic, g = markers_and_big_abort
    rows = _rows(server.bootstrap, g, "read_committed")
    assert "tail_unprobed" not in rows[1]["anomalies"], rows[1]
    state = _cli(server.bootstrap, "groups", "describe", g, "--isolation", "read_committed", "--state",
                 "--samples", "3", "--interval", "0.3")
    assert state[0]["total_lag"] == 0 and state[0]["status"] == "OK", state


def test_exporter_time_lag_0_at_markers(server, markers_and_big_abort):
    topic, g = markers_and_big_abort
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", server.bootstrap, "--port", str(port),
                             "--listen", "127.0.0.1", "--min-interval", "0", "--group", g,
                             "--isolation", "read_committed"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        scrape(port)
        fams = scrape(port)  # a second snapshot: interpolation has its history
        for p in (0, 1):
            lbl = {"consumergroup": g, "topic": topic, "partition": str(p)}
            assert value(fams, "kafka_consumergroup_lag", **lbl) == 0
            assert value(fams, "kafka_consumergroup_group_lag_seconds", group=g, topic=topic, partition=str(p)) == 0
        assert value(fams, "kafka_consumergroup_group_max_lag_seconds", group=g) == 0
        assert value(fams, "kafka_consumergroup_group_sum_lag", group=g) == 0
        assert value(fams, "hightide_consumergroup_status_code", consumergroup=g) == 0
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()


def _console(bootstrap: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from hightide.console.app import ConsoleConfig, create_app
    from hightide.console.sampler import Sampler
    sampler = Sampler(bootstrap, interval_s=0.3, client_options={"request_timeout_s": 3.0})
    return TestClient(create_app(sampler, ConsoleConfig(bootstrap, refresh_s=1)), raise_server_exceptions=False)


def test_console_time_lag_0_at_markers(server, markers_and_big_abort):
    """The console measures read_uncommitted: partition 0 is caught up at its marker
    (time lag 0), partition 1 has its 600 aborted records to read (lag 601)."""
    topic, g = markers_and_big_abort
    with _console(server.bootstrap) as web:
        got = wait_until(lambda: (r := web.get(f"/api/groups/{g}")).status_code == 200 and r.json(), 20,
                         what="the group's JSON")
        rows = {r["partition"]: r for r in got["rows"]}
        _check_time_lag(rows[0])
        assert (rows[1]["lag"], rows[0]["lag"]) == (601, 0)
        assert got["summary"]["total_lag"] == 601


# -- partitions without a commit -----------------------------------------------------------------

@pytest.fixture
def uncommitted(server, topic_name):
    """One member owns 3 partitions; it committed 10 of 23 on partition 0 and nothing on
    1 (100 records) and 2 (110 records); the records are 1.5 s old. (topic, group)."""
    confluent_create_topic(server.bootstrap, topic_name, partitions=3)
    prod = ck.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for p, n in ((0, 23), (1, 100), (2, 110)):
        for i in range(n):
            prod.produce(topic_name, b"v%d" % i, partition=p)
    assert prod.flush(15) == 0
    g = f"g-{uuid.uuid4().hex[:8]}"
    c = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": g, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    try:
        wait_until(lambda: c.poll(0.2) is not None or len(c.assignment()) == 3, 30, what="the assignment")
        c.commit(offsets=[ck.TopicPartition(topic_name, 0, 10)], asynchronous=False)
        time.sleep(1.5)
        yield topic_name, g
    finally:
        c.close()


def test_uncommitted_partitions_count_in_the_totals(server, uncommitted):
    """The total is 13 + 100 + 110 = 223, flagged as an estimate, in the CLI, lag watch,
    the exporter and the console; the partitions without a commit have a time lag from
    their log start record (an estimate), not 0."""
    topic_name, g = uncommitted
    rows = _rows(server.bootstrap, g, "read_uncommitted")
    assert rows[1]["lag"] is None and rows[1]["estimated_lag"] == 100, rows[1]
    assert rows[2]["estimated_lag"] == 110 and rows[0]["estimated_lag"] is None
    assert rows[1]["time_lag_ms"] >= 1500 and rows[1]["time_lag_certainty"] == "estimate", rows[1]
    [state] = _cli(server.bootstrap, "groups", "describe", g, "--state")
    assert (state["total_lag"], state["total_lag_estimated"]) == (223, True), state
    assert state["max_time_lag_ms"] >= 1500
    doc = _cli(server.bootstrap, "lag", "watch", g, "--iterations", "1")
    assert (doc["groups"][g]["total_lag"], doc["groups"][g]["total_lag_estimated"]) == (223, True)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", server.bootstrap, "--port",
                             str(port), "--listen", "127.0.0.1", "--min-interval", "0", "--group", g],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        fams = scrape(port)
        assert value(fams, "kafka_consumergroup_group_sum_lag", group=g) == 223
        assert value(fams, "kafka_consumergroup_lag_sum", consumergroup=g, topic=topic_name) == 223
        assert value(fams, "hightide_consumergroup_estimated_lag", consumergroup=g, topic=topic_name,
                     partition="1") == 100
        assert value(fams, "kafka_consumergroup_group_max_lag_seconds", group=g) >= 1.5
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    with _console(server.bootstrap) as web:
        got = wait_until(lambda: (r := web.get(f"/api/groups/{g}")).status_code == 200 and r.json(), 20,
                         what="the group's JSON")
        assert (got["summary"]["total_lag"], got["summary"]["total_lag_estimated"]) == (223, True)
        hist = web.get(f"/api/groups/{g}/history").json()
        assert hist["lag"][-1] == 223
        assert "estimate" in web.get(f"/groups/{g}").text


def test_assume_reset_latest_in_every_tool(server, uncommitted):
    """``--assume-reset latest`` (a group whose auto.offset.reset is latest starts at the
    end of a partition it has not committed): the estimate is 0 and the time lag 0 in
    ``groups describe``, ``lag watch``, the exporter and the console, still flagged; the
    total is the committed partition's 13. Before the option existed every tool assumed
    earliest (223)."""
    topic_name, g = uncommitted
    rows = {r["partition"]: r for r in _cli(server.bootstrap, "groups", "describe", g, "--assume-reset", "latest")}
    assert [rows[p]["estimated_lag"] for p in (0, 1, 2)] == [None, 0, 0], rows
    assert rows[1]["lag"] is None and rows[1]["time_lag_ms"] == 0, rows[1]
    assert rows[1]["time_lag_certainty"] == "estimate"
    [state] = _cli(server.bootstrap, "groups", "describe", g, "--state", "--assume-reset", "latest")
    assert (state["total_lag"], state["total_lag_estimated"]) == (13, True), state
    doc = _cli(server.bootstrap, "lag", "watch", g, "--iterations", "1", "--assume-reset", "latest")
    assert (doc["groups"][g]["total_lag"], doc["groups"][g]["total_lag_estimated"]) == (13, True)
    [state] = _cli(server.bootstrap, "groups", "describe", g, "--state", "--assume-reset", "earliest")
    assert state["total_lag"] == 223
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", server.bootstrap, "--port",
                             str(port), "--listen", "127.0.0.1", "--min-interval", "0", "--group", g,
                             "--assume-reset", "latest"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        fams = scrape(port)
        assert value(fams, "kafka_consumergroup_group_sum_lag", group=g) == 13
        assert value(fams, "hightide_consumergroup_estimated_lag", consumergroup=g, topic=topic_name,
                     partition="1") == 0
        assert value(fams, "hightide_consumergroup_lag_estimated", consumergroup=g) == 1
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "console", "-b", server.bootstrap, "--listen",
                             f"127.0.0.1:{port}", "--interval", "0.3", "--assume-reset", "latest"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def summary() -> Any:
            import urllib.request
            assert proc.poll() is None
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/groups/{g}", timeout=3) as r:
                    return json.loads(r.read())["summary"]
            except OSError:
                return None
        got = wait_until(summary, 30, what="the console's group JSON")
        assert (got["total_lag"], got["total_lag_estimated"]) == (13, True), got
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert b"Traceback" not in err, err.decode()
