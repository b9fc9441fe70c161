"""The Spark tests run in three modes, one shared session per mode (the ``spark`` fixture
is parametrised at session scope, so pytest runs every test of one mode, stops that
mode's processes, then starts the next):

* ``local``: a classic ``local[2]`` session in this process's JVM;
* ``standalone``: a standalone master and one worker started here from pip's pyspark
  (``bin/spark-class ...Master`` / ``...Worker``), a classic session against it, so
  reads and writes run in executor JVMs and their own Python workers;
* ``connect``: a Spark Connect server (``SparkConnectServer``, ``local[2]``) started here,
  and a Connect client session (``SparkSession.builder.remote``): no JVM in this process,
  the progress listener runs client-side.

``HIGHTIDE_SPARK_MODES=local,connect`` limits the modes (default: all three). A test
marked ``@pytest.mark.spark_modes("local")`` runs only in those modes. Every process
started here (:class:`hightide.spark.localcluster.LocalCluster`) runs in its own process
group and is stopped (TERM, then KILL) when its mode ends, also when a test or the
start-up fails.

Also: helpers to put records into a real ``hightide serve`` (the shared ``server``
fixture)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

MODES = ("local", "standalone", "connect")
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


def enabled_modes() -> list[str]:
    raw = os.environ.get("HIGHTIDE_SPARK_MODES", ",".join(MODES))
    modes = [m.strip() for m in raw.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise pytest.UsageError(f"HIGHTIDE_SPARK_MODES: unknown modes {unknown}; known: {', '.join(MODES)}")
    return modes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark_modes(*modes): run this Spark test only in these modes")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spark_mode" not in metafunc.fixturenames:  # also when requested through ``spark``
        return
    marker = metafunc.definition.get_closest_marker("spark_modes")
    wanted = marker.args if marker else MODES
    modes = [m for m in enabled_modes() if m in wanted]
    # indirect, session-scoped: one session per mode, tests grouped by mode
    metafunc.parametrize("spark_mode", modes, indirect=True, scope="session")


def classic_session(master: str, **conf: str) -> Any:
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable
    b = SparkSession.builder.master(master).appName("hightide-tests")
    for k, v in {**SESSION_CONF, "spark.driver.memory": "1g", "spark.driver.host": "127.0.0.1",
                 "spark.driver.bindAddress": "127.0.0.1", **conf}.items():
        b = b.config(k, v)
    session = b.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def connect_session(url: str) -> Any:
    from pyspark.sql import SparkSession
    return SparkSession.builder.remote(url).getOrCreate()


def stop_connect_client(session: Any) -> None:
    """Stop a Connect client session and leave this process usable for classic
    sessions again (Connect mode is a process-wide environment flag in PySpark)."""
    try:
        session.stop()
    finally:
        for var in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
            os.environ.pop(var, None)


@pytest.fixture(scope="session")
def spark_mode(request, tmp_path_factory) -> Iterator[tuple[str, Any]]:
    """``(mode, session)``: the mode's processes and session, with ``format("hightide")``
    and the progress listener registered. Stopped when pytest moves on to another mode."""
    import hightide.spark
    from hightide.spark.localcluster import LocalCluster
    mode = request.param
    session = None
    with LocalCluster(tmp_path_factory.mktemp(f"spark-{mode}")) as cluster:
        try:
            if mode == "local":
                session = classic_session("local[2]")
            elif mode == "standalone":
                session = classic_session(cluster.start_standalone(cores=2, memory="2g"),
                                          **{"spark.executor.memory": "1g", "spark.executor.cores": "2",
                                             "spark.cores.max": "2"})
            else:
                session = connect_session(cluster.start_connect_server(
                    "local[2]", {**SESSION_CONF, "spark.driver.memory": "1g"}))
            hightide.spark.register(session)  # what it returns: test_deploy.py
            yield mode, session
        finally:
            if session is not None:
                try:
                    hightide.spark.unregister(session)
                finally:
                    stop_connect_client(session) if mode == "connect" else session.stop()


@pytest.fixture
def spark(spark_mode):
    return spark_mode[1]


@pytest.fixture
def bootstrap(server) -> str:
    return server.bootstrap


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from hightide.client import NewTopic
    from hightide.spark.kafkaio import KafkaIO
    with KafkaIO(bootstrap) as io:
        io.run(io.admin.create_topics([NewTopic(topic, partitions, 1)]))


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list, int | None]],
            **conf: Any) -> list[tuple[int, int, bytes | None, bytes | None, tuple, int]]:
    """Produce ``(key, value, headers, partition or None)`` with confluent-kafka; return
    what was acknowledged as ``(partition, offset, key, value, headers, timestamp)``."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})
    acked: list = []
    errors: list = []

    def cb(headers, err, msg):  # noqa: ANN001 - headers as sent (delivery reports lack them)
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                          tuple((k, v) for k, v in (headers or [])), msg.timestamp()[1]))
    for key, value, headers, partition in records:
        kw = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, value, key, headers=headers or None, on_delivery=functools.partial(cb, headers),
                          **kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(30)
    assert not errors, errors
    assert len(acked) == len(records)
    return acked
