"""``hightide spark ...``: the Spark lag-history job and the end-offset sampler feeding it.

Needs the ``spark`` extra (``make spark``, or ``pip install 'hightide[spark]'``); pyspark is imported only
when a command runs.
"""

from __future__ import annotations

import json
import time

import click

from . import main
from ._common import (DEFAULT_BOOTSTRAP, assume_reset_option, client_options, command_config_option, extra_missing,
                      kafka_error_line, spark_security_options)


def _bootstrap_option(f):  # type: ignore[no-untyped-def]
    f = command_config_option(f)
    return click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=DEFAULT_BOOTSTRAP,
                        show_default=True, help="HOST:PORT[,HOST:PORT...] of hightide or any Kafka cluster.")(f)


@main.group("spark")
def spark_group() -> None:
    """Spark jobs over hightide (or any Kafka-compatible cluster)."""


@spark_group.command("sample-offsets")
@_bootstrap_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory of end-offset samples (Parquet, one file per sample).")
@click.option("--topic", "topics", multiple=True, help="Topic to sample (repeatable; default: all topics).")
@click.option("--interval", type=float, default=10.0, show_default=True, help="Seconds between samples.")
@click.option("--count", type=int, default=0, help="Stop after this many samples (0: until Ctrl-C).")
def sample_offsets(bootstrap_server: str, out_dir: str, topics: tuple[str, ...], interval: float, count: int) -> None:
    """Append samples of the partitions' end offsets to OUT, for ``spark lag-history``."""
    from ..client import KafkaError
    from ..spark.kafkaio import KafkaIO
    try:
        from ..spark.laghistory import sample_end_offsets
    except ImportError as exc:
        raise extra_missing("hightide spark sample-offsets", "spark", exc) from None
    n = 0
    try:
        with KafkaIO(bootstrap_server, client_id="hightide-spark-sampler",
                     security=client_options().get("security")) as io:
            while True:
                started = time.monotonic()
                parts = sample_end_offsets(bootstrap_server, out_dir, topics=list(topics) or None, io=io)
                n += 1
                click.echo(json.dumps({"sample": n, "partitions": parts, "time_ms": int(time.time() * 1000)}))
                if count and n >= count:
                    return
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KafkaError as exc:
        raise click.ClickException(kafka_error_line(exc)) from None
    except KeyboardInterrupt:
        pass


@spark_group.command("lag-history")
@_bootstrap_option
@click.option("--samples", "samples", required=True, type=click.Path(file_okay=False),
              help="Directory of end-offset samples (from `hightide spark sample-offsets`).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory: lag/ (Parquet), summary.txt, offset_lag.png, time_lag.png.")
@click.option("--group", "groups", multiple=True, help="Only these groups (repeatable; default: all).")
@click.option("--slo-lag", type=int, default=None, help="Offset-lag SLO in records: report breaches.")
@click.option("--slo-time-lag", type=float, default=None, help="Time-lag SLO in seconds: report breaches.")
@click.option("--top", type=int, default=10, show_default=True, help="Groups in the rankings and charts.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option("--remote", default=None, help="Spark Connect URL (sc://host:port) to run on instead of --master.")
@click.option("--no-sample-now", is_flag=True, help="Do not add a sample of the end offsets at job start.")
@assume_reset_option
def lag_history_cmd(bootstrap_server: str, samples: str, out_dir: str, groups: tuple[str, ...], slo_lag: int | None,
                    slo_time_lag: float | None, top: int, master: str, remote: str | None,
                    no_sample_now: bool, assume_reset: str) -> None:
    """Spark batch job: lag per group/partition over time from __consumer_offsets and
    end-offset samples, as Parquet plus a text summary and PNG charts."""
    try:
        from pyspark.sql import SparkSession

        from ..spark.laghistory import lag_history
    except ImportError as exc:
        raise extra_missing("hightide spark lag-history", "spark", exc) from None
    security = client_options().get("security")
    if security is not None:  # the job's own end-offset sample (a KafkaIO here) uses it too
        from ..spark.kafkaio import remember_security
        remember_security(bootstrap_server, security)
    existing = None if remote else SparkSession.getActiveSession()
    if remote:
        spark = SparkSession.builder.remote(remote).appName("hightide-lag-history").getOrCreate()
    else:
        spark = existing or (SparkSession.builder.master(master).appName("hightide-lag-history")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    if existing is None and not remote:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        result = lag_history(spark, bootstrap_server, samples, out_dir, groups=list(groups) or None,
                             slo_lag=slo_lag, top=top, sample_now=not no_sample_now,
                             kafka_options=spark_security_options(), reset=assume_reset,
                             slo_time_lag_ms=None if slo_time_lag is None else int(slo_time_lag * 1000))
    finally:
        if existing is None:
            spark.stop()
    click.echo(result.summary, nl=False)
    click.echo(f"wrote {result.rows} rows for {result.groups} groups to {result.out_dir}")
