"""Shipping hightide to the executors: on workers whose Python lacks hightide, batch
reads work once ``ship_to_executors`` added the package (``addPyFile`` on classic); on
Connect the zip reaches the workers' ``sys.path`` (``addArtifacts(pyfile=True)``);
``register`` installs the progress listener in every mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hightide
import hightide.spark
from hightide.spark.deploy import package_zip

from .conftest import create_topic, produce

pytestmark = pytest.mark.integration


def test_register_installs_the_listener_in_every_mode(spark_mode):
    mode, spark = spark_mode
    reg = hightide.spark.register(spark)  # again: idempotent, the same listener
    assert reg.connect == (mode == "connect") and reg.unavailable == []
    assert reg.progress_listener is not None
    assert hightide.spark.register(spark).progress_listener is reg.progress_listener


def test_package_zip_holds_the_installed_package(tmp_path):
    z = package_zip(str(tmp_path))
    root = Path(hightide.__file__).parent
    with zipfile.ZipFile(z) as zf:
        names = set(zf.namelist())
        assert zf.read("hightide/spark/source.py") == (root / "spark" / "source.py").read_bytes()
    want = {f"hightide/{p.relative_to(root)}" for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    assert want <= names and not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert package_zip(str(tmp_path)) == z  # content-addressed name: the same zip again


def test_shipping_makes_batch_reads_work_on_workers_without_hightide(bootstrap, topic_name, tmp_path):
    """A fresh local[2] Spark in a subprocess whose workers' Python cannot import the
    installed hightide (``ship_probe.py``): batch reads fail until the package is shipped,
    then work; streaming still needs hightide installed (Spark starts the streaming
    source's Python process without the shipped files), as docs/spark.md says."""
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [(None, b"v%d" % i, [], i % 2) for i in range(30)])
    probe = Path(__file__).with_name("ship_probe.py")
    env = {k: v for k, v in os.environ.items()  # a classic session, even while Connect mode runs here
           if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")}
    res = subprocess.run([sys.executable, str(probe), bootstrap, topic_name, str(tmp_path)],
                         capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got == {"batch before shipping": "no hightide", "batch after shipping": "ok 30",
                   "streaming after shipping": "no hightide"}, got


@pytest.mark.spark_modes("connect")
def test_shipped_zip_reaches_the_python_workers(spark, bootstrap, topic_name, tmp_path):
    shipped = Path(hightide.spark.ship_to_executors(spark, str(tmp_path))).name

    def paths(batches):
        import sys

        import pyarrow as pa
        for _ in batches:
            pass
        found = [p for p in sys.path if p.endswith(shipped)]
        yield pa.RecordBatch.from_pylist([{"path": p} for p in found] or [{"path": None}],
                                         schema=pa.schema([("path", pa.string())]))

    got = {r.path for r in spark.range(2, numPartitions=2).mapInArrow(paths, "path string").collect()}
    assert got != {None} and all(p is not None and p.endswith(shipped) for p in got), got
    # and the source still reads (the zip's hightide is the installed one)
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [(None, b"v%d" % i, [], 0) for i in range(5)])
    df = spark.read.format("hightide").option("kafka.bootstrap.servers", bootstrap) \
        .option("subscribe", topic_name).load()
    assert sorted(r.value for r in df.collect()) == [b"v%d" % i for i in range(5)]
