"""Client quotas end to end on a real broker process: DescribeClientQuotas /
AlterClientQuotas with Kafka's validation and a restart, the throttled answer and the
muted channel (KIP-219) for Produce and Fetch, the CLI, the exporter's series, and "a
noisy tenant cannot starve the others" with real confluent-kafka producers.

No assertion on how fast anything is: rates are checked against bounds that only a
broken quota could cross (the bytes a quota admits over a run, with its window's initial
allowance), and the one timing check is a lower bound (a muted channel answers no sooner
than its throttle time)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin, NewTopic

from hightide.client import AdminClient, KafkaError, QuotaFilterComponent as F
from hightide.protocol.records import build_batch

from ..conftest import free_port
from ..rawkafka import RawClient

pytestmark = pytest.mark.integration
ALICE = (("user", "alice"),)


def admin_run(bootstrap: str, fn):
    async def go():
        async with AdminClient(bootstrap) as admin:
            return await fn(admin)
    return asyncio.run(go())


def create_topic(bootstrap: str, topic: str) -> None:
    admin = ConfluentAdmin({"bootstrap.servers": bootstrap})  # (kept alive until the result is in)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)


def test_alter_describe_validate_only_and_restart(fresh_server):
    srv = fresh_server()
    b = srv.bootstrap
    admin_run(b, lambda a: a.alter_client_quotas([
        ({"user": "alice"}, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}),
        ({"user": "alice", "client-id": "app"}, {"request_percentage": 12.5}),
        ({"client-id": None}, {"controller_mutation_rate": 3.0})]))
    admin_run(b, lambda a: a.alter_client_quotas([({"user": "bob"}, {"producer_byte_rate": 5.0})], validate_only=True))
    errors = admin_run(b, lambda a: a.alter_client_quotas([
        ({"user": "bob"}, {"producer_byte_rate": -1.0}), ({"user": "carol"}, {"bogus": 1.0}),
        ({"ip": "10.0.0.1"}, {"connection_creation_rate": 5.0})], raise_on_error=False))
    assert {dict(e).popitem()[1]: (err.code, err.message) for e, err in errors.items()} == {
        "bob": (42, "Quota producer_byte_rate must be greater than 0"),
        "carol": (42, "Invalid configuration key bogus"),
        "10.0.0.1": (42, "Unhandled client quota entity type: ip")}
    expected = {ALICE: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
                (("client-id", "app"), ("user", "alice")): {"request_percentage": 12.5},
                (("client-id", None),): {"controller_mutation_rate": 3.0}}
    assert admin_run(b, lambda a: a.describe_client_quotas()) == expected  # bob: validate_only wrote nothing
    assert admin_run(b, lambda a: a.describe_client_quotas([F.of_entity("user", "alice")], strict=True)) == {
        ALICE: expected[ALICE]}
    assert set(admin_run(b, lambda a: a.describe_client_quotas([F.of_entity("user", "alice")]))) == {
        ALICE, (("client-id", "app"), ("user", "alice"))}
    assert admin_run(b, lambda a: a.describe_client_quotas([F.of_default("client-id")], strict=True)) == {
        (("client-id", None),): {"controller_mutation_rate": 3.0}}
    with pytest.raises(KafkaError) as info:
        admin_run(b, lambda a: a.describe_client_quotas([F.of_type("ip")]))
    assert (info.value.code, info.value.message) == (35, "Unsupported entity type ip")
    with RawClient(b) as c:  # v0 on the wire, as older Java admin clients send it
        r = c.request(48, 0, {"components": [{"entity_type": "user", "match_type": 0, "match": "alice"}],
                              "strict": True})
        assert r.error_code == 0 and sorted((v.key, v.value) for v in r.entries[0].values) == [
            ("consumer_byte_rate", 2048.0), ("producer_byte_rate", 1024.0)]
        r = c.request(49, 0, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}], "ops": [
            {"key": "consumer_byte_rate", "value": 0.0, "remove": True}]}], "validate_only": False})
        assert r.entries[0].error_code == 0
    del expected[ALICE]["consumer_byte_rate"]
    srv.stop()
    again = fresh_server(data_dir=srv.data_dir, port=srv.port)
    assert admin_run(again.bootstrap, lambda a: a.describe_client_quotas()) == expected  # replayed from the log


def _produce(c: RawClient, topic: str, records: bytes):
    return c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})


def _fetch(c: RawClient, topic: str, offset: int):
    return c.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                 {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                                  "partition_max_bytes": 1 << 20}]}],
                             "forgotten_topics_data": [], "rack_id": ""})


def test_throttled_produce_and_fetch_answer_at_once_and_mute_the_channel(fresh_server):
    srv = fresh_server()
    b = srv.bootstrap
    create_topic(b, "quota-raw")
    # RawClient's client id is "rawkafka": 10 kB/s each way
    admin_run(b, lambda a: a.alter_client_quotas([({"client-id": "rawkafka"}, {
        "producer_byte_rate": 10_000.0, "consumer_byte_rate": 10_000.0})]))
    big = build_batch([(None, b"x" * 115_000, [], 1_700_000_000_000)])  # 11.5 kB/s over the 10 s minimum window
    with RawClient(b, timeout=30) as c:
        first = _produce(c, "quota-raw", big)
        throttle_ms = first.throttle_time.total_seconds() * 1000
        assert first.responses[0].partition_responses[0].error_code == 0  # appended, and answered
        assert 1000 <= throttle_ms <= 2000  # (11.5 - 10) / 10 x 10 s = 1.5 s
        answered = time.monotonic()
        second = _produce(c, "quota-raw", build_batch([(None, b"y", [], 1_700_000_000_000)]))
        waited = time.monotonic() - answered
        assert waited >= 0.9 * throttle_ms / 1000, "the channel was not muted for the throttle time"
        assert second.throttle_time.total_seconds() > 0  # still over the quota
    admin_run(b, lambda a: a.alter_client_quotas([({"client-id": "rawkafka"}, {"producer_byte_rate": None})]))
    with RawClient(b, timeout=30) as c:
        small = [build_batch([(None, b"z" * 40_000, [], 1_700_000_000_000)]) for _ in range(3)]
        base = [_produce(c, "quota-raw", s).responses[0].partition_responses[0].base_offset for s in small]
        # the fetch quota is its own: the fetches start clean
        assert _fetch_until(c, base[0]).throttle_time.total_seconds() == 0  # 80 kB: two batches fit the window
        throttled = _fetch(c, "quota-raw", base[2])  # 120 kB over 10 s > 10 kB/s
        p = throttled.responses[0].partitions if throttled.responses else []
        assert throttled.throttle_time.total_seconds() > 0
        assert not p or not p[0].records  # a throttled fetch answers no records (Kafka's getThrottledResponse)


def _fetch_until(c: RawClient, offset: int):
    r = _fetch(c, "quota-raw", offset)
    records = r.responses[0].partitions[0].records
    assert records and len(records) >= 80_000, "the first fetch should return two 40 kB batches"
    return r


def _flood(bootstrap: str, topic: str, client_id: str, seconds: float, out: dict) -> None:
    """Produce 1 kB records flat out for ``seconds``; record acked bytes, the time to the
    last acknowledgement and the throttle times the broker reported."""
    throttles: list[float] = []
    acked = [0]

    def delivered(err, msg) -> None:
        if err is None:
            acked[0] += len(msg.value())
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 16384,
                  "queue.buffering.max.kbytes": 1024, "acks": 1,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    value = b"v" * 1000
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
            continue
        p.poll(0)
    p.flush(60)
    out.update(acked=acked[0], elapsed=time.monotonic() - start, throttles=throttles)


def test_a_noisy_tenant_cannot_starve_the_others(fresh_server):
    srv = fresh_server()
    b = srv.bootstrap
    create_topic(b, "quota-tenants")
    quota = 100_000.0
    admin_run(b, lambda a: a.alter_client_quotas([({"client-id": "noisy"}, {"producer_byte_rate": quota})]))
    noisy: dict = {}
    quiet: dict = {}
    threads = [threading.Thread(target=_flood, args=(b, "quota-tenants", "noisy", 12.0, noisy)),
               threading.Thread(target=_flood, args=(b, "quota-tenants", "quiet", 12.0, quiet))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert noisy and quiet, "a producer did not finish"
    noisy_rate, quiet_rate = noisy["acked"] / noisy["elapsed"], quiet["acked"] / quiet["elapsed"]
    print(f"noisy: {noisy_rate / 1000:.1f} kB/s (quota {quota / 1000:.0f} kB/s), max throttle "
          f"{max(noisy['throttles'], default=0):.3f} s; quiet: {quiet_rate / 1000:.1f} kB/s")
    assert noisy["throttles"] and max(noisy["throttles"]) > 0  # throttle_time_ms > 0 reached the client
    assert not any(quiet["throttles"])  # the unquoted client is never throttled
    # a quota admits its rate over the run plus the first window's allowance (10 s worth)
    # and what was in flight when the last throttle ended: never 3x that
    assert noisy["acked"] <= quota * (noisy["elapsed"] + 11) + 1_000_000
    assert quiet_rate > noisy_rate


def test_cli_and_exporter(fresh_server):
    srv = fresh_server()
    b = srv.bootstrap

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hightide", "configs", "-b", b, *args], capture_output=True,
                              text=True, timeout=60)
    done = cli("--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
               "--entity-default", "--add-config", "producer_byte_rate=10000000,request_percentage=12.5")
    assert done.returncode == 0 and done.stdout == "Completed updating config for user alice.\n", done.stderr
    assert cli("--alter", "--client-defaults", "--add-config", "consumer_byte_rate=2048").returncode == 0
    shown = cli("--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients")
    assert shown.stdout == ("Quota configs for user-principal 'alice', the default client-id are "
                            "producer_byte_rate=1.0E7, request_percentage=12.5\n")
    assert cli("--describe", "--entity-type", "clients").stdout == (
        "Quota configs for the default client-id are consumer_byte_rate=2048.0\n")
    for args, message in [(("--add-config", "producer_byte_rate=-1"), "Quota producer_byte_rate must be greater than 0"),
                          (("--add-config", "nope=1"), "Invalid configuration key nope"),
                          (("--add-config", "producer_byte_rate=lots"),
                           "Cannot parse quota configuration value for producer_byte_rate: lots"),
                          (("--delete-config", "consumer_byte_rate"), "Invalid config(s): consumer_byte_rate")]:
        bad = cli("--alter", "--user", "bob", *args)
        assert bad.returncode == 1 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert "Traceback" not in bad.stderr
    port = free_port()
    exporter = subprocess.Popen([sys.executable, "-m", "hightide", "exporter", "-b", b, "--port", str(port),
                                 "--listen", "127.0.0.1", "--min-interval", "0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        text = _scrape(port)
    finally:
        exporter.terminate()
        exporter.wait(15)
    assert 'kafka_client_quota_producer_byte_rate{client_id="<default>",user="alice"} 1e+07' in text
    assert 'kafka_client_quota_consumer_byte_rate{client_id="<default>",user=""} 2048.0' in text


def _scrape(port: int, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                text = resp.read().decode()
            if "kafka_client_quota_" in text:
                return text
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the exporter never served quota series")
        time.sleep(0.3)
