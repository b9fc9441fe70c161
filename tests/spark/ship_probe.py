"""Run by ``test_deploy.py`` in a fresh process whose Spark workers' Python cannot import
the installed hightide (``PYSPARK_PYTHON`` is a wrapper; see :func:`hiding_python`):
a ``local[2]`` session, ``format("hightide")`` registered, then a batch read before and
after :func:`hightide.spark.ship_to_executors`, and a streaming read after. Prints one
JSON object ``{step: "ok <rows>" | "no hightide" | "error <message>"}``.

    python ship_probe.py BOOTSTRAP TOPIC WORK_DIR
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

SITECUSTOMIZE = '''\\
import importlib.machinery
import sys


class _HideInstalledHightide:
    """Only a shipped zip on sys.path may provide hightide (the installed one is hidden)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "hightide" and not name.startswith("hightide."):
            return None
        if name == "hightide":
            zips = [p for p in sys.path if p.endswith(".zip")]
            spec = importlib.machinery.PathFinder.find_spec(name, zips)
            if spec is None:
                raise ModuleNotFoundError("No module named 'hightide'", name=name)
            return spec
        return None  # submodules: found through the package's own __path__


sys.meta_path.insert(0, _HideInstalledHightide)
'''


def hiding_python(work: Path) -> str:
    """Write a ``python`` wrapper under ``work`` that runs this interpreter with
    ``sitecustomize`` hiding the installed hightide; return its path."""
    site = work / "hide-hightide"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    wrapper = work / "python-without-hightide"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def _attempt(fn) -> str:
    try:
        return f"ok {fn()}"
    except Exception as exc:  # noqa: BLE001 - reported to the test
        text = str(exc)
        return "no hightide" if "No module named 'hightide'" in text else "error " + text.splitlines()[0][:300]


def main() -> None:
    bootstrap, topic, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    os.environ["PYSPARK_PYTHON"] = hiding_python(work)
    from pyspark.sql import SparkSession

    import hightide.spark
    spark = (SparkSession.builder.master("local[2]").appName("hightide-ship-probe")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("FATAL")
    out = {}
    try:
        hightide.spark.register(spark, commit_progress=False)

        def read():
            return spark.read.format("hightide").option("kafka.bootstrap.servers", bootstrap) \
                .option("subscribe", topic).load().count()

        def stream():
            q = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", str(work / "ckpt"))
                 .trigger(availableNow=True).start())
            q.awaitTermination(120)
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            return sum(p.numInputRows for p in q.recentProgress)
        out["batch before shipping"] = _attempt(read)
        hightide.spark.ship_to_executors(spark, str(work / "ship"))
        out["batch after shipping"] = _attempt(read)
        out["streaming after shipping"] = _attempt(stream)
    finally:
        spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
