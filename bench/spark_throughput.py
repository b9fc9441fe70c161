"""Spark read throughput of the ``hightide`` source, and micro-batch overhead.

Set-up: a real ``hightide serve``; one topic of P partitions holding N records of
100-byte values (confluent-kafka producer, lz4 off), a Spark session ``local[2]``.

Measures:

* **batch**: ``spark.read.format("hightide")`` of the whole topic into the ``noop``
  sink (every column materialised in the JVM), R runs after one warm-up run;
* **streaming**: ``readStream`` with ``Trigger.AvailableNow`` from earliest into
  ``noop``, once with no limit and once with ``maxOffsetsPerTrigger = N/10``;
* **batch write**: ``df.write.format("hightide")`` of up to 1,000,000 keyed rows from a
  cached DataFrame (per-record encoding in Python: not a target, reported for scale);
* **micro-batch overhead**: a stream over a topic of 1 partition with a backlog of 20
  tiny records read 2 per trigger (10 micro-batches): the median ``triggerExecution``
  time per batch, broken into Spark's phases (latestOffset, queryPlanning,
  addBatch, walCommit, commitOffsets).
* **batch read per deploy mode** (``--modes``, default ``local,standalone,connect``): the
  same batch read in each of the test suite's modes, one after the other in this run:
  ``local[2]``; a standalone master + one worker (2 cores) started from pip's pyspark
  (executor JVM and Python workers apart from the driver); a Spark Connect server on
  ``local[2]`` with a Connect client session. The rows go to the ``noop`` sink on the
  server side in every mode (nothing is collected to the client).

Target: >= 200,000 rows/s of 100-byte records in the batch read on local[2]. Prints one
JSON document (progress on stderr) with the same-run physical limits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
from produce_consume import Broker  # noqa: E402

TARGET_ROWS_PER_S = 200_000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fill(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
    value = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    return time.perf_counter() - t0


def batch_read(spark, bootstrap: str, topic: str, n: int, runs: int) -> dict:
    df = spark.read.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        dt = time.perf_counter() - t0
        log(f"batch run {i}: {dt:.2f}s {n / dt:,.0f} rows/s{' (warm-up)' if i == 0 else ''}")
        if i:
            times.append(dt)
    return {"runs_s": [round(t, 3) for t in times], "median_s": round(statistics.median(times), 3),
            "rows_per_s_median": round(n / statistics.median(times)), "rows_per_s_best": round(n / min(times))}


def stream_read(spark, bootstrap: str, topic: str, n: int, ckpt: str, max_per_trigger: int | None) -> dict:
    r = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    if max_per_trigger:
        r = r.option("maxOffsetsPerTrigger", max_per_trigger)
    t0 = time.perf_counter()
    q = r.load().writeStream.format("noop").option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    q.awaitTermination()
    dt = time.perf_counter() - t0
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    assert rows == n, (rows, n)
    log(f"stream (maxOffsetsPerTrigger={max_per_trigger}): {dt:.2f}s {n / dt:,.0f} rows/s, {len(batches)} batches")
    return {"seconds": round(dt, 3), "rows_per_s": round(n / dt), "micro_batches": len(batches),
            "max_offsets_per_trigger": max_per_trigger}


def batch_write(spark, bootstrap: str, topic: str, n: int, size: int, runs: int) -> dict:
    """``df.write.format("hightide")`` of ``n`` rows (string key, ``size``-byte value)
    from a cached DataFrame of 4 partitions: rows/s, keyed (murmur2 partitioner)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    df = spark.range(n, numPartitions=4).selectExpr("cast(id as string) as key",
                                                    f"repeat('x', {size}) as value").cache()
    df.count()
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        df.write.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
            .mode("append").save()
        dt = time.perf_counter() - t0
        log(f"batch write {i}: {dt:.2f}s {n / dt:,.0f} rows/s{' (warm-up)' if i == 0 else ''}")
        if i:
            times.append(dt)
    df.unpersist()
    return {"rows": n, "median_s": round(statistics.median(times), 3),
            "rows_per_s_median": round(n / statistics.median(times))}


def overhead(spark, bootstrap: str, topic: str, ckpt: str) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        p.produce(topic, b"x%d" % i)
    p.flush(30)
    q = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 2).load()
         .writeStream.format("noop").option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination()
    batches = [b for b in q.recentProgress if b["numInputRows"] > 0][1:]  # the first one warms up
    phases = ["triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets"]
    out = {f"{ph}_ms_median": statistics.median(b["durationMs"].get(ph, 0) for b in batches) for ph in phases}
    out["micro_batches"] = len(batches)
    log(f"micro-batch overhead: {out}")
    return out


def batch_read_in_mode(mode: str, bootstrap: str, topic: str, n: int, runs: int, work: Path) -> dict:
    """:func:`batch_read` in one deploy mode (see the module docstring), with the
    session start-up time; every process started for it is stopped before returning."""
    from pyspark.sql import SparkSession

    import hightide.spark
    from hightide.spark.localcluster import LocalCluster
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1"}
    spark = None
    with LocalCluster(work) as cluster:
        try:
            t0 = time.perf_counter()
            if mode == "connect":
                spark = SparkSession.builder.remote(cluster.start_connect_server("local[2]", conf)).getOrCreate()
            else:
                master = "local[2]" if mode == "local" else cluster.start_standalone(cores=2, memory="2g")
                b = SparkSession.builder.master(master).appName(f"hightide-spark-bench-{mode}")
                for k, v in {**conf, "spark.executor.memory": "1g", "spark.cores.max": "2"}.items():
                    b = b.config(k, v)
                spark = b.getOrCreate()
                spark.sparkContext.setLogLevel("ERROR")
            hightide.spark.register(spark, commit_progress=False)
            start_s = time.perf_counter() - t0
            log(f"mode {mode}: session ready in {start_s:.1f}s")
            out = batch_read(spark, bootstrap, topic, n, runs)
            out["session_start_s"] = round(start_s, 2)
            return out
        finally:
            if spark is not None:
                spark.stop()
            for var in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
                os.environ.pop(var, None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="local,standalone,connect",
                    help="deploy modes for the batch-read comparison (empty: skip it)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors' Python: this one (has hightide)
    from pyspark.sql import SparkSession

    import hightide.spark
    with tempfile.TemporaryDirectory() as tmp:
        limits = _limits.measure(tmp, seconds=0.5)
        broker = Broker(Path(tmp))
        broker.start()
        spark = None
        try:
            fill_s = fill(broker.bootstrap, "spark-bench", args.partitions, args.records, args.size)
            log(f"produced {args.records:,} x {args.size} B in {fill_s:.1f}s")
            t0 = time.perf_counter()
            spark = (SparkSession.builder.master("local[2]").appName("hightide-spark-bench")
                     .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                     .getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            hightide.spark.register(spark, commit_progress=False)
            start_s = time.perf_counter() - t0
            batch = batch_read(spark, broker.bootstrap, "spark-bench", args.records, args.runs)
            stream = stream_read(spark, broker.bootstrap, "spark-bench", args.records, f"{tmp}/ck1", None)
            stream10 = stream_read(spark, broker.bootstrap, "spark-bench", args.records, f"{tmp}/ck2",
                                   args.records // 10)
            over = overhead(spark, broker.bootstrap, "spark-overhead", f"{tmp}/ck3")
            write = batch_write(spark, broker.bootstrap, "spark-sink", min(args.records, 1_000_000), args.size,
                                2)
            spark.stop()
            spark = None
            modes = [m for m in args.modes.split(",") if m]
            per_mode = {m: batch_read_in_mode(m, broker.bootstrap, "spark-bench", args.records, args.runs,
                                              Path(tmp) / f"mode-{m}") for m in modes}
        finally:
            if spark is not None:
                spark.stop()
            broker.stop()
    print(json.dumps({
        "benchmark": "spark_throughput", "records": args.records, "value_bytes": args.size,
        "partitions": args.partitions, "master": "local[2]", "spark_session_start_s": round(start_s, 2),
        "batch_read_noop": batch, "stream_read_noop": stream, "stream_read_noop_10_batches": stream10,
        "micro_batch_overhead": over, "batch_write": write, "batch_read_noop_by_mode": per_mode,
        "targets": {"batch_rows_per_s_min": TARGET_ROWS_PER_S,
                    "met": batch["rows_per_s_median"] >= TARGET_ROWS_PER_S},
        "limits": limits, "machine": _limits.machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
