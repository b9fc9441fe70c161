"""Embedding (`hightide.Broker` as an async context manager), `python -m hightide`,
and ordered shutdown: in-flight requests are answered and the log is closed cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from hightide import Broker, BrokerConfig

from ..rawkafka import RawClient
from ..waiting import wait_until
from .clients import Rec, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


def test_embedded_broker_with_aiokafka(tmp_path):
    async def run():
        cfg = BrokerConfig.load(overrides={"num.partitions": 2})
        async with Broker(cfg, data_dir=str(tmp_path / "d"), listen=("127.0.0.1", 0)) as broker:
            from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
            bootstrap = f"127.0.0.1:{broker.port}"
            p = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await p.start()
            md = [await p.send_and_wait("embedded", f"v{i}".encode(), partition=i % 2) for i in range(10)]
            await p.stop()
            assert {m.partition for m in md} == {0, 1}
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
            await c.start()
            c.assign([TopicPartition("embedded", 0), TopicPartition("embedded", 1)])
            got = []
            while len(got) < 10:
                for msgs in (await c.getmany(timeout_ms=1000)).values():
                    got += [m.value for m in msgs]
            await c.stop()
            assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))
        assert os.path.exists(tmp_path / "d" / ".hightide_cleanshutdown")

    asyncio.run(run())


def test_python_dash_m_and_config_file(tmp_path):
    cfg = tmp_path / "h.toml"
    cfg.write_text('"num.partitions" = 4\n[log]\n"retention.hours" = 1\n')
    out = subprocess.run([sys.executable, "-m", "hightide", "serve", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--advertised-listener" in out.stdout
    from ..conftest import ServerProcess
    srv = ServerProcess(tmp_path / "data", args=("--config", str(cfg), "--node-id", "7",
                                                  "--advertised-listener", "localhost:0")).start()
    try:
        with RawClient(srv.bootstrap) as c:
            r = c.request(3, 12, {"topics": [{"name": "cfgd", "topic_id": None}], "allow_auto_topic_creation": True,
                                  "include_topic_authorized_operations": False})
            assert len(r.topics[0].partitions) == 4
            # A configured advertised host is used as given (issue 20); port 0 = the bound port.
            assert (r.brokers[0].node_id, r.brokers[0].host, r.brokers[0].port) == (7, "localhost", srv.port)
            d = c.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "7",
                                                 "configuration_keys": ["log.retention.ms"]}],
                                  "include_synonyms": False, "include_documentation": False})
            assert d.results[0].configs[0].value == "3600000"
    finally:
        assert srv.stop() == 0


def test_bad_config_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hightide", "serve", "--data-dir", str(tmp_path),
                          "--set", "num.partitions=zero"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "num.partitions" in out.stderr


def test_sigterm_answers_inflight_long_poll(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    confluent_produce(srv.bootstrap, topic_name, [Rec(0, None, b"x", (), 1)])
    c = RawClient(srv.bootstrap)
    # A fetch at the end of the log that would wait 10 s for data.
    c.request(1, 12, {"replica_id": -1, "max_wait": 10000, "min_bytes": 1, "max_bytes": 1 << 20,
                      "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                          {"topic": topic_name, "partitions": [{"partition": 0, "fetch_offset": 1,
                                                                "partition_max_bytes": 1 << 20}]}],
                      "forgotten_topics_data": [], "rack_id": ""}, expect_response=False)
    time.sleep(0.3)  # fixed: the broker parking the fetch has no observable event (nothing answers yet)
    t0 = time.monotonic()
    result = {}
    threading.Thread(target=lambda: result.setdefault("frame", c.recv_frame())).start()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(10) == 0
    wait_until(lambda: "frame" in result, timeout=5, what="the in-flight fetch's answer (sent before the broker exits)")
    assert struct.unpack_from(">i", result["frame"], 0)[0] == c.corr
    assert time.monotonic() - t0 < 6
    c.close()
    assert "stopped cleanly" in srv.output()
