"""Wire details Kafka's clients depend on (issue 20).

A consumer whose committed offset fell off the log start (DeleteRecords or retention)
gets OFFSET_OUT_OF_RANGE and resets per ``auto.offset.reset``: librdkafka only sees the
error when the partition's records field is an empty array, as Kafka sends it (a null
there made it reject the whole response: "invalid MessageSetSize -1").
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from ..waiting import wait_until
from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration

OLD_TS = 1_700_000_000_000


def _topic_with_committed_offset(bootstrap: str, topic: str, group: str, config: dict | None = None) -> None:
    """A one-partition topic of 10 records (values b"0".."9") in 5 batches, and ``group``'s
    committed offset at 2."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(10)
    recs = [Rec(0, None, str(i).encode(), (), OLD_TS + i) for i in range(10)]
    for i in range(0, 10, 2):
        confluent_produce(bootstrap, topic, recs[i:i + 2], extra={"linger.ms": 0})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        c.close()


def _delete_records(bootstrap: str, topic: str, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0, before)
    assert admin.delete_records([tp])[tp].result(10).low_watermark == before


def _confluent(bootstrap: str, topic: str, group: str, reset: str, nudge) -> tuple[list[int], list]:
    """Consume from the committed offset: (offsets seen, errors seen)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": reset})
    seen: list[int] = []
    errors: list = []
    tp = TopicPartition(topic, 0)
    try:
        c.assign([tp])

        def settled():
            for m in c.consume(10, 0.2):
                if m.error():
                    errors.append(m.error())
                else:
                    seen.append(m.offset())
            return _done(seen, errors, reset, nudge)
        wait_until(settled, 20, what=f"confluent consumer reset ({reset})")
        return seen, errors
    finally:
        c.close()


def _kafka_python(bootstrap: str, topic: str, group: str, reset: str, nudge) -> tuple[list[int], list]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="none" if reset == "error" else reset)
    seen: list[int] = []
    errors: list = []
    tp = KTP(topic, 0)
    try:
        c.assign([tp])

        def settled():
            try:
                for recs in c.poll(200).values():
                    seen.extend(r.offset for r in recs)
            except OffsetOutOfRangeError as exc:
                errors.append(exc)
            return _done(seen, errors, reset, nudge)
        wait_until(settled, 20, what=f"kafka-python consumer reset ({reset})")
        return seen, errors
    finally:
        c.close()


def _aiokafka(bootstrap: str, topic: str, group: str, reset: str, nudge) -> tuple[list[int], list]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP
    from aiokafka.errors import OffsetOutOfRangeError

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="none" if reset == "error" else reset)
        await c.start()
        seen: list[int] = []
        errors: list = []
        tp = ATP(topic, 0)
        try:
            c.assign([tp])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while loop.time() < deadline:
                try:
                    for recs in (await c.getmany(timeout_ms=200)).values():
                        seen.extend(r.offset for r in recs)
                except OffsetOutOfRangeError as exc:
                    errors.append(exc)
                if _done(seen, errors, reset, nudge):
                    return seen, errors
            raise AssertionError(f"aiokafka consumer did not reset ({reset}): seen {seen}, errors {errors}")
        finally:
            await c.stop()
    return asyncio.run(run())


def _done(seen: list[int], errors: list, reset: str, nudge) -> bool:
    """True once the consumer has shown how it reset. ``latest`` (or ``earliest`` on an
    emptied log) cannot be seen until a record arrives after the reset, so each poll that
    saw nothing produces one more with ``nudge`` (when given)."""
    if reset == "error":
        return bool(errors)
    if nudge is not None and not seen:
        nudge()
    return bool(seen)


class _Nudger:
    """Produces one record per call (offsets 10, 11, ...)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def __call__(self) -> None:
        self.producer.produce(self.topic, value=b"new", partition=0)
        assert self.producer.flush(10) == 0


CONSUMERS = {"confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
@pytest.mark.parametrize("library", list(CONSUMERS))
def test_committed_offset_below_log_start_resets(server, topic_name, library, reset):
    group = f"g-{uuid.uuid4().hex[:8]}"
    _topic_with_committed_offset(server.bootstrap, topic_name, group)
    _delete_records(server.bootstrap, topic_name, 6)
    nudge = _Nudger(server.bootstrap, topic_name) if reset == "latest" else None
    seen, errors = CONSUMERS[library](server.bootstrap, topic_name, group, reset, nudge)
    if reset == "earliest":
        assert seen == [6, 7, 8, 9] and not errors
    elif reset == "latest":  # none of the records there at the reset, then the new ones
        assert seen and min(seen) >= 10 and not errors
    else:
        assert not seen and errors
        if library == "confluent":
            assert errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors


def test_committed_offset_deleted_by_retention_resets(fresh_server, topic_name):
    srv = fresh_server("--set", "log.retention.check.interval.ms=100")
    group = f"g-{uuid.uuid4().hex[:8]}"
    _topic_with_committed_offset(srv.bootstrap, topic_name, group, {"segment.bytes": "100"})
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    tp = TopicPartition(topic_name, 0)

    def log_start():
        lo, _hi = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "probe"}).get_watermark_offsets(tp, 5)
        return lo if lo > 2 else None
    start = wait_until(log_start, 20, what="retention to delete the old segments")
    # Every record may be gone (each batch rolled a segment): new ones show where it reset.
    seen, errors = _confluent(srv.bootstrap, topic_name, group, "earliest", _Nudger(srv.bootstrap, topic_name))
    assert seen[0] == start and not errors


# -- per-record Produce errors (KIP-467) ------------------------------------------------
def test_keyless_records_to_compacted_topic_fail_alone(server, topic_name):
    """Kafka rejects the whole batch (nothing is appended) and lists every bad record in
    RecordErrors; librdkafka fails those records with INVALID_RECORD and the batch's
    valid records with _INVALID_DIFFERENT_RECORD (it does not retry them), so the
    application knows exactly which ones to send again."""
    from confluent_kafka import Producer
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})])[topic_name].result(10)
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 200, "acks": "all"})
    keys = [b"a", None, b"b", None, b"c"]
    reports: dict[int, tuple] = {}
    for i, key in enumerate(keys):
        p.produce(topic_name, value=b"v%d" % i, key=key, partition=0,
                  on_delivery=lambda err, msg, i=i: reports.__setitem__(i, (err, msg.offset())))
    assert p.flush(20) == 0
    codes = {i: (err.code() if err else None) for i, (err, _off) in reports.items()}
    assert codes == {0: KafkaError._INVALID_DIFFERENT_RECORD, 1: KafkaError.INVALID_RECORD,
                     2: KafkaError._INVALID_DIFFERENT_RECORD, 3: KafkaError.INVALID_RECORD,
                     4: KafkaError._INVALID_DIFFERENT_RECORD}, reports
    # The valid ones, sent again, are delivered; the rejected batch left nothing behind.
    again = {}
    for i in (0, 2, 4):
        p.produce(topic_name, value=b"v%d" % i, key=keys[i], partition=0,
                  on_delivery=lambda err, msg, i=i: again.__setitem__(i, (err, msg.offset())))
    assert p.flush(20) == 0
    assert again == {0: (None, 0), 2: (None, 1), 4: (None, 2)}


def test_record_errors_list_every_bad_index(server, topic_name):
    """The wire answer itself (Produce v8+): partition error INVALID_RECORD with Kafka's
    summary message, one RecordError per keyless record, base offset -1."""
    from hightide.protocol.records import build_batch

    from ..rawkafka import RawClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})])[topic_name].result(10)
    batch = build_batch([(k, b"v", [], OLD_TS) for k in (None, b"k", None, None)])
    with RawClient(server.bootstrap) as c:
        r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(batch)}]}]})
    part = r.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (87, -1)
    assert [e.batch_index for e in part.record_errors] == [0, 2, 3]
    assert part.record_errors[0].batch_index_error_message == (
        f"Compacted topic cannot accept message without key in topic partition {topic_name}-0")
    assert part.error_message.startswith("One or more records have been rejected due to 3 record errors")


# -- advertised listener ----------------------------------------------------------------
def test_advertised_host_is_used_as_given(fresh_server, topic_name):
    """``--advertised-listener localhost:PORT`` is what Metadata, FindCoordinator and
    DescribeCluster answer, verbatim (clients reach brokers through names: containers,
    NAT, TLS host checks); clients then connect through that name."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    from ..conftest import free_port
    from ..rawkafka import RawClient
    port = free_port()
    srv = fresh_server("--advertised-listener", f"localhost:{port}", port=port)
    wait_until(lambda: f"(advertised localhost:{port})" in srv.output(), 10, what="the start-up log line")
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    md = admin.list_topics(timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("localhost", port)]
    cluster = admin.describe_cluster().result(10)
    assert [(n.host, n.port) for n in cluster.nodes] == [("localhost", port)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    with RawClient(srv.bootstrap) as c:
        r = c.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        assert [(x.host, x.port) for x in r.coordinators] == [("localhost", port)]
        r = c.request(10, 2, {"key": group, "key_type": 0})
        assert (r.host, r.port) == ("localhost", port)
    # Real clients follow the name: produce, join a group through its coordinator, commit.
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    confluent_produce(srv.bootstrap, topic_name, [Rec(0, None, b"x", (), OLD_TS)])
    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic_name])
        msg = wait_until(lambda: c.poll(0.5), 30, what="a record through the advertised name")
        assert msg.error() is None
        c.commit(msg, asynchronous=False)
    finally:
        c.close()
    k = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert k.committed(KTP(topic_name, 0)) == 1
    finally:
        k.close()


# -- hightide's own client against librdkafka's mock cluster ----------------------------
@pytest.fixture
def mock_cluster():
    """librdkafka's in-memory mock cluster (ApiVersions up to v2 only), with one topic.
    Yields its bootstrap HOST:PORT; it lives as long as the producer that created it."""
    from confluent_kafka import Producer
    p = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    p.produce("mocktopic", value=b"x", partition=0)
    assert p.flush(10) == 0
    broker = next(iter(p.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    del p


def test_cli_and_client_connect_to_librdkafka_mock_cluster(mock_cluster):
    """The mock answers ApiVersions v3 with an undecodable UNSUPPORTED_VERSION body; the
    client retries with v0 like librdkafka, so the CLI and the admin client work."""
    import subprocess
    import sys

    from hightide.client import AdminClient as HAdmin
    out = subprocess.run([sys.executable, "-m", "hightide", "topics", "list", "-o", "json",
                          "--bootstrap-server", mock_cluster], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "mocktopic" in out.stdout

    async def describe():
        async with HAdmin(mock_cluster) as admin:
            return await admin.describe_topics(["mocktopic"])
    topics = asyncio.run(asyncio.wait_for(describe(), 30))
    assert 0 in topics["mocktopic"].partitions


def test_advertised_host_kafkajs(fresh_server, topic_name):
    """kafkajs, which its admin calls reach only through the advertised name, produces,
    joins a group and commits through ``localhost``."""
    from ..conftest import free_port
    from .kafkajs import run_kafkajs
    port = free_port()
    srv = fresh_server("--advertised-listener", f"localhost:{port}", port=port)
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    got = run_kafkajs({"brokers": [srv.bootstrap], "action": "advertised", "topic": topic_name,
                       "group": f"g-{uuid.uuid4().hex[:8]}"})
    assert got["brokers"] == [{"host": "localhost", "port": port}]
    assert got["value"] == "via-name"
    assert got["offsets"][0]["partitions"] == [{"partition": 0, "offset": "1", "metadata": None}]
