"""Topic policies enforced on produce: min.insync.replicas, timestamp bounds,
LogAppendTime, max.message.bytes; and configs hightide refuses rather than ignores."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .clients import CONSUME

pytestmark = pytest.mark.integration


def _create(server, name, **configs):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={k.replace("_", "."): str(v) for k, v in configs.items()})])[
        name].result(10)


def _produce_one(server, topic, value=b"v", timestamp=0, **conf):
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0, "retries": 0,
                  "message.timeout.ms": 5000, **conf})
    out = {}
    p.produce(topic, value, timestamp=timestamp, on_delivery=lambda err, msg: out.update(err=err, msg=msg))
    p.flush(10)
    return out["err"], out["msg"]


def test_min_insync_replicas(server, topic_name):
    _create(server, topic_name, min_insync_replicas=2)
    err, _ = _produce_one(server, topic_name, acks="all")
    assert err is not None and err.code() == 19  # NOT_ENOUGH_REPLICAS
    err, msg = _produce_one(server, topic_name, acks=1)
    assert err is None and msg.offset() == 0


def test_timestamp_bounds(server, topic_name):
    _create(server, topic_name, message_timestamp_after_max_ms=60_000, message_timestamp_before_max_ms=3_600_000)
    now = int(time.time() * 1000)
    err, _ = _produce_one(server, topic_name, timestamp=now + 3_600_000)
    assert err is not None and err.code() == 32  # INVALID_TIMESTAMP
    err, _ = _produce_one(server, topic_name, timestamp=now - 86_400_000)
    assert err is not None and err.code() == 32
    err, msg = _produce_one(server, topic_name, timestamp=now)
    assert err is None and msg.offset() == 0


def test_log_append_time(server, topic_name):
    _create(server, topic_name, message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    err, msg = _produce_one(server, topic_name, timestamp=1_000)
    after = int(time.time() * 1000)
    assert err is None
    tstype, ts = msg.timestamp()
    assert tstype == 2 and before - 5 <= ts <= after + 5  # TIMESTAMP_LOG_APPEND_TIME
    got = CONSUME["confluent"](server.bootstrap, topic_name, 1, 1)
    assert got[0].timestamp == ts


def test_max_message_bytes(server, topic_name):
    _create(server, topic_name, max_message_bytes=1000)
    err, _ = _produce_one(server, topic_name, value=b"x" * 5000)
    assert err is not None and err.code() == 10  # MESSAGE_TOO_LARGE


def test_unsupported_configs_are_refused_not_ignored(server, topic_name):
    # (compression.type codecs are supported since issue 20: tests/integration/test_compression_type.py)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    fut = admin.create_topics([NewTopic(topic_name, 1, 1, config={"compression.type": "brotli"})])[topic_name]
    with pytest.raises(KafkaException) as exc:
        fut.result(10)
    assert exc.value.args[0].code() == 40 and "compression.type" in exc.value.args[0].str()
