"""`hightide exporter` against a real `hightide serve`: scraped over HTTP, parsed with
prometheus-client's parser, values checked against what the test produced and committed."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hightide.client import AdminClient, NewTopic, TopicPartition

from ..conftest import free_port
from ..waiting import wait_until
from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration


def scrape(port: int, timeout: float = 10.0) -> dict[str, list]:
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert r.status == 200
            return r.read().decode()
    text = wait_until(get, timeout=timeout, interval=0.1, what=f"the exporter's /metrics on port {port}")
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(fams, name, **labels):
    hits = [s.value for s in fams[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, fams.get(name))
    return hits[0]


@pytest.fixture
def exporter(server):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", server.bootstrap, "--port", str(port),
                             "--listen", "127.0.0.1", "--min-interval", "0", "--window", "2", "--min-samples", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield port
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()


def test_exporter_metrics_match_oracle(server, topic_name, exporter):
    group = f"g-{topic_name}"
    ts = int(time.time() * 1000) - 10_000

    async def setup():
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(topic_name, 2, 1)])
            await asyncio.to_thread(confluent_produce, server.bootstrap, topic_name,
                                    [Rec(p, None, b"x", (), ts) for p in (0, 1) for _ in range(6 + p)])
            await a.alter_consumer_group_offsets(group, {TopicPartition(topic_name, 0): 2,
                                                         TopicPartition(topic_name, 1): 7})
            await a.delete_records({TopicPartition(topic_name, 0): 3})
    asyncio.run(setup())
    fams = scrape(exporter)
    t, cg = topic_name, group
    assert value(fams, "kafka_consumergroup_lag", consumergroup=cg, topic=t, partition="0") == 4
    assert value(fams, "kafka_consumergroup_lag", consumergroup=cg, topic=t, partition="1") == 0
    assert value(fams, "kafka_consumergroup_current_offset", consumergroup=cg, topic=t, partition="0") == 2
    assert value(fams, "kafka_consumergroup_lag_sum", consumergroup=cg, topic=t) == 4
    assert value(fams, "kafka_topic_partition_current_offset", topic=t, partition="1") == 7
    assert value(fams, "kafka_topic_partition_oldest_offset", topic=t, partition="0") == 3
    assert value(fams, "kafka_partition_earliest_offset", topic=t, partition="0", cluster_name="default") == 3
    assert value(fams, "kafka_consumergroup_group_lag", group=cg, topic=t, partition="0") == 4
    assert value(fams, "kafka_consumergroup_group_max_lag", group=cg) == 4
    assert value(fams, "kafka_topic_partitions", topic=t) == 2
    lag_s = value(fams, "kafka_consumergroup_group_lag_seconds", group=cg, topic=t, partition="0")
    assert 9 < lag_s < 60  # records stamped 10 s ago (read at the log start: a lower bound)
    assert value(fams, "hightide_topic_partition_max_timestamp_seconds", topic=t, partition="0") == ts / 1000
    assert value(fams, "hightide_consumergroup_lag_anomaly", consumergroup=cg, topic=t, partition="0",
                 anomaly="committed_before_log_start") == 1
    assert value(fams, "hightide_consumergroup_lost_records", consumergroup=cg, topic=t, partition="0") == 1
    assert value(fams, "hightide_consumergroup_status", consumergroup=cg, status="ERR") == 1
    assert value(fams, "hightide_consumergroup_partition_status", consumergroup=cg, topic=t, partition="1",
                 status="OK") == 1
    assert value(fams, "hightide_exporter_up") == 1
    assert value(fams, "hightide_exporter_scrape_duration_seconds") < 2
    assert value(fams, "kafka_brokers") == 1
    # a second scrape sees a commit made in between
    asyncio.run(_commit(server.bootstrap, group, topic_name))
    fams = scrape(exporter)
    assert value(fams, "kafka_consumergroup_lag", consumergroup=cg, topic=t, partition="0") == 0


async def _commit(bootstrap, group, topic):
    async with AdminClient(bootstrap) as a:
        await a.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 6})


def _scrape_timed(port: int, headers: dict[str, str] | None = None) -> tuple[float, dict[str, list]]:
    t0 = time.monotonic()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    return time.monotonic() - t0, {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_broker_down_answers_in_time_with_up_0_and_no_stale_series(fresh_server, topic_name):
    """Issue 12 item 5: a hung broker (SIGSTOP: connections accepted, never answered) and a
    dead one (killed: refused). Each scrape answers within the scrape timeout with
    ``hightide_exporter_up 0`` and none of the last good snapshot's series, as
    kafka_exporter does; when the broker is back, so are the series."""
    srv = fresh_server()
    group = f"g-{topic_name}"

    async def setup():
        async with AdminClient(srv.bootstrap) as a:
            await a.create_topics([NewTopic(topic_name, 1, 1)])
            await a.alter_consumer_group_offsets(group, {TopicPartition(topic_name, 0): 0})
    asyncio.run(setup())
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", srv.bootstrap, "--port", str(port),
                             "--listen", "127.0.0.1", "--min-interval", "0", "--scrape-timeout", "4"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        fams = scrape(port)
        assert value(fams, "hightide_exporter_up") == 1
        assert value(fams, "kafka_consumergroup_lag", consumergroup=group, topic=topic_name, partition="0") == 0
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            took, fams = _scrape_timed(port)
            assert took < 4 + 2, took
            assert value(fams, "hightide_exporter_up") == 0
            assert set(fams) == {"hightide_exporter_up"}, sorted(fams)  # nothing stale
            took, fams = _scrape_timed(port, {"X-Prometheus-Scrape-Timeout-Seconds": "2"})
            assert took < 2 + 1, took
            assert set(fams) == {"hightide_exporter_up"} and value(fams, "hightide_exporter_up") == 0
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        fams = scrape(port)
        assert value(fams, "hightide_exporter_up") == 1
        assert value(fams, "kafka_consumergroup_lag", consumergroup=group, topic=topic_name, partition="0") == 0
        srv.kill9()
        took, fams = _scrape_timed(port)
        assert took < 4 + 2, took
        assert set(fams) == {"hightide_exporter_up"} and value(fams, "hightide_exporter_up") == 0
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()
