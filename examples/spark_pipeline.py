"""A streaming pipeline on hightide, end to end, watched by hightide's lag tools.

    events (JSON clicks) ──produce──▶ hightide topic "clicks"
        ──PySpark structured streaming (format "hightide")──▶ clicks per page per 10 s window
        ──hightide sink──▶ topic "page-counts"

while ``hightide groups describe``, the Prometheus exporter and, at the end, the
``lag-history`` Spark job show the streaming job's consumer-group lag over time (the
source commits each micro-batch's progress to the group ``page-counts``).

Load: a steady rate, then a burst several times what the query admits per trigger
(``maxOffsetsPerTrigger``), then steady again: the lag climbs during the burst and drains
afterwards. At the end the script reads the results back from ``page-counts`` and checks
that the windowed counts add up to exactly the number of events produced (exit status 1
if not).

Run from a clone: ``examples/spark_pipeline.sh`` (creates .venv with ``make venv``), or
``.venv/bin/python examples/spark_pipeline.py [--seconds 30] [--remote sc://host:15002]``.
Everything runs on this machine: a ``hightide serve`` and an exporter on free ports, a
``local[2]`` Spark session (or the Spark Connect server given by ``--remote``), all
stopped at the end. Outputs (charts, summary) go to ``--out`` (default
``./spark-pipeline-out``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

GROUP = "page-counts"
TICK = "__tick__"
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login", "/about", "/careers"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.3):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not start within {timeout}s")


def hightide(*args: str) -> list[str]:
    return [sys.executable, "-m", "hightide", *args]


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Load(threading.Thread):
    """Produces click events: ``steady`` events/s, ``burst`` events/s during the middle
    third of ``seconds``. Counts what was acknowledged."""

    def __init__(self, bootstrap: str, seconds: float, steady: int, burst: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.seconds, self.steady, self.burst = bootstrap, seconds, steady, burst
        self.acked = 0
        self.errors: list = []

    def _producer(self):
        from confluent_kafka import Producer
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "enable.idempotence": True})

    def _done(self, err, _msg) -> None:  # noqa: ANN001
        if err is None:
            self.acked += 1
        else:
            self.errors.append(err)

    def warm_up(self, n: int) -> None:
        """Produce ``n`` events now (before the timed profile), so the query's first,
        slowest micro-batch is behind us when the profile starts."""
        p = self._producer()
        for i in range(n):
            p.produce("clicks", json.dumps({"user": f"w{i}", "page": PAGES[i % len(PAGES)],
                                            "ts": int(time.time() * 1000)}).encode(), on_delivery=self._done)
        p.flush(60)

    def run(self) -> None:
        p = self._producer()
        done = self._done
        rnd = random.Random(7)
        t0 = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - t0) < self.seconds:
            third = self.seconds / 3
            rate = self.burst if third <= elapsed < 2 * third else self.steady
            due = sent + int(rate * 0.05)
            while sent < due:
                user = f"u{rnd.randrange(500)}"
                event = {"user": user, "page": rnd.choice(PAGES), "ts": int(time.time() * 1000)}
                while True:
                    try:
                        p.produce("clicks", json.dumps(event).encode(), user.encode(), on_delivery=done)
                        break
                    except BufferError:
                        p.poll(0.01)
                sent += 1
            p.poll(0)
            time.sleep(0.05)
        p.flush(60)
        # a tick per partition, 30 s in the future: moves the watermark past the last
        # real window so the query emits it (append mode emits a window once it closes);
        # the ticks' own window never closes, so they are never counted in page-counts
        tick = json.dumps({"user": "-", "page": TICK, "ts": int(time.time() * 1000) + 30_000}).encode()
        for part in range(3):
            p.produce("clicks", tick, partition=part)
        p.flush(60)


class Sampler(threading.Thread):
    """Samples the end offsets of ``clicks`` every second (input of lag-history)."""

    def __init__(self, bootstrap: str, out: Path) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.out = bootstrap, out
        self.stop_event = threading.Event()

    def run(self) -> None:
        from hightide.spark.kafkaio import KafkaIO
        from hightide.spark.laghistory import sample_end_offsets
        with KafkaIO(self.bootstrap, client_id="example-sampler") as io:
            while not self.stop_event.is_set():
                sample_end_offsets(self.bootstrap, self.out, topics=["clicks"], io=io)
                self.stop_event.wait(1.0)


def scrape_lag(port: int) -> int | None:
    """The exporter's ``kafka_consumergroup_lag_sum`` of the group (None if absent)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("kafka_consumergroup_lag_sum{") and f'consumergroup="{GROUP}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def group_lag(bootstrap: str) -> int | None:
    out = subprocess.run(hightide("groups", "describe", GROUP, "-b", bootstrap, "-o", "json"),
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    rows = json.loads(out.stdout)
    return sum(r["lag"] for r in rows if r["lag"] is not None) if rows else None


def session(remote: str | None):
    from pyspark.sql import SparkSession
    if remote:
        return SparkSession.builder.remote(remote).appName("hightide-example").getOrCreate()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("hightide-example")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_query(spark, bootstrap: str, ckpt: str, per_trigger: int):
    """clicks → count per page per 10-second event-time window → page-counts. Append
    mode (Python data source sinks take append only): a window's count is written once,
    when the watermark (latest event time seen - 10 s) passes the window's end."""
    from pyspark.sql import functions as F
    clicks = (spark.readStream.format("hightide").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "clicks").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", per_trigger).option("groupId", GROUP).load())
    events = (clicks.select(F.from_json(F.col("value").cast("string"), "user string, page string, ts long").alias("e"))
              .select("e.page", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")))
    counts = (events.withWatermark("event_time", "10 seconds")
              .groupBy(F.window("event_time", "10 seconds"), "page").count())
    # no filter for the ticks: Spark would push it below the watermark, which then never
    # sees them; their own window is never closed (no later events), so never written
    out = counts.select(
        F.concat_ws("|", "page", F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss")).alias("key"),
        F.to_json(F.struct(F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss").alias("window"), "page",
                           "count")).alias("value"))
    return (out.writeStream.format("hightide").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", "page-counts").option("checkpointLocation", ckpt).outputMode("append")
            .queryName("page-counts").trigger(processingTime="2 seconds").start())


def final_counts(spark, bootstrap: str) -> dict[tuple[str, str], int]:
    """Read ``page-counts`` back (batch): one final count per (window, page); a key
    written twice would be a duplicate (raises)."""
    rows = (spark.read.format("hightide").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "page-counts").load().select("value").collect())
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        v = json.loads(r.value)
        if (v["window"], v["page"]) in counts:
            raise SystemExit(f"duplicate window count in page-counts: {v}")
        counts[(v["window"], v["page"])] = v["count"]
    return counts


def run(args: argparse.Namespace, work: Path) -> int:
    from hightide.client import NewTopic
    from hightide.spark import register, unregister
    from hightide.spark.kafkaio import KafkaIO
    from hightide.spark.laghistory import lag_history

    port, exporter_port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    spark = q = None
    try:
        broker = subprocess.Popen(hightide("serve", "--data-dir", str(work / "data"), "--listen", bootstrap),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(broker)
        wait_port(port, broker, "hightide serve")
        exporter = subprocess.Popen(hightide("exporter", "-b", bootstrap, "--listen", "127.0.0.1", "--port",
                                             str(exporter_port), "--group", GROUP),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(exporter)
        wait_port(exporter_port, exporter, "hightide exporter")
        with KafkaIO(bootstrap) as io:
            io.run(io.admin.create_topics([NewTopic("clicks", 3, 1), NewTopic("page-counts", 2, 1)]))
        say(f"hightide on {bootstrap}, exporter on :{exporter_port}; topics clicks (3) and page-counts (2)")

        spark = session(args.remote)
        reg = register(spark)
        if reg.unavailable:
            say(f"warning: {reg.unavailable}")
        q = start_query(spark, bootstrap, str(work / "ckpt"), args.per_trigger)
        say(f"streaming query {q.id} started: group '{GROUP}' receives its progress")

        load = Load(bootstrap, args.seconds, args.steady, args.burst)
        sampler = Sampler(bootstrap, work / "samples")
        sampler.start()
        load.warm_up(args.steady)
        say(f"warm-up: {args.steady} events; waiting for the query's first micro-batch to commit")
        deadline = time.monotonic() + args.drain_timeout
        while group_lag(bootstrap) != 0:
            if time.monotonic() > deadline or q.exception() is not None:
                raise SystemExit(f"the query's first micro-batch did not complete: {q.exception()}")
            time.sleep(1)
        load.start()
        say(f"producing for {args.seconds:.0f}s: {args.steady}/s, a burst of {args.burst}/s in the middle third, "
            f"then {args.steady}/s (the query admits {args.per_trigger} per 2 s trigger)")
        peak = 0
        while load.is_alive():
            time.sleep(3)
            lag, scraped = group_lag(bootstrap), scrape_lag(exporter_port)
            peak = max(peak, lag or 0)
            say(f"  produced {load.acked:>6}  groups describe: lag {'(no commit yet)' if lag is None else lag}  "
                f"exporter kafka_consumergroup_lag_sum {'-' if scraped is None else scraped}")
        if load.errors:
            raise SystemExit(f"produce failed: {load.errors[:3]}")
        say(f"produced {load.acked} events; waiting for the query to catch up")
        deadline = time.monotonic() + args.drain_timeout
        while (lag := group_lag(bootstrap)) != 0:
            if time.monotonic() > deadline or q.exception() is not None:
                raise SystemExit(f"the query did not catch up (lag {lag}): {q.exception()}")
            peak = max(peak, lag or 0)
            say(f"  lag {'(no commit yet)' if lag is None else lag}")
            time.sleep(2)
        # the last windows are written by the micro-batch after the one that read the ticks
        deadline = time.monotonic() + 60
        while (total := sum((counts := final_counts(spark, bootstrap)).values())) < load.acked:
            if time.monotonic() > deadline:
                break
            time.sleep(2)
        sampler.stop_event.set()
        sampler.join()
        last = q.lastProgress
        if last is not None:
            ops = last.stateOperators
            say(f"query: batch {last.batchId}, watermark {last.eventTime.get('watermark')}, rows dropped as late "
                f"{sum(o.numRowsDroppedByWatermark for o in ops)}, state rows {sum(o.numRowsTotal for o in ops)}")
        q.stop()
        print(subprocess.run(hightide("groups", "describe", GROUP, "-b", bootstrap), capture_output=True,
                             text=True).stdout, flush=True)
        per_page: dict[str, int] = {}
        for (_, page), n in counts.items():
            per_page[page] = per_page.get(page, 0) + n
        say(f"page-counts: {len(counts)} (window, page) counts, top pages: "
            + ", ".join(f"{p} {n}" for p, n in sorted(per_page.items(), key=lambda kv: -kv[1])[:4]))

        out = Path(args.out)
        res = lag_history(spark, bootstrap, work / "samples", out, groups=[GROUP])
        print(res.summary, flush=True)
        say(f"lag history: {res.rows} rows; charts {out / 'offset_lag.png'} and {out / 'time_lag.png'}; "
            f"peak lag seen live {peak}")
        if total != load.acked:
            say(f"MISMATCH: the windowed counts add up to {total}, {load.acked} events were produced")
            return 1
        say(f"ok: the windowed counts add up to exactly the {total} events produced")
        return 0
    finally:
        if q is not None and q.isActive:
            q.stop()
        if spark is not None:
            unregister(spark)  # ends a Connect session's listener stream cleanly
            spark.stop()
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="how long to produce")
    ap.add_argument("--steady", type=int, default=300, help="events/s outside the burst")
    ap.add_argument("--burst", type=int, default=3000, help="events/s during the burst")
    ap.add_argument("--per-trigger", type=int, default=3000, help="maxOffsetsPerTrigger of the query")
    ap.add_argument("--drain-timeout", type=float, default=180.0)
    ap.add_argument("--remote", default=None, help="Spark Connect URL (sc://host:port) instead of local[2]")
    ap.add_argument("--out", default="spark-pipeline-out", help="where lag-history writes charts and summary")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hightide-example-"))
    try:
        code = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
