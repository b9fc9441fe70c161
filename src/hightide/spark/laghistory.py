"""Lag history: per group and partition, offset lag and time lag over time, from the
commits in ``__consumer_offsets`` and samples of the partitions' end offsets.

Inputs
------
* ``__consumer_offsets``, read through the ``hightide`` source (batch, earliest to
  latest) and decoded with :mod:`hightide.group.records`: one row per offset commit
  (group, topic, partition, committed offset, commit timestamp); a tombstone (offset
  deleted) ends the group's commit on that partition. Group-metadata records are skipped.
* end-offset samples ``(topic, partition, time_ms, end_offset, log_start_offset)`` as
  Parquet, written by :func:`sample_end_offsets` (``hightide spark sample-offsets``) on a
  schedule; the job adds one sample of every committed partition at its own start, so the
  history always reaches "now". ``log_start_offset`` is null in samples written before
  it was sampled (no estimate from those, see below).

Output (:func:`lag_history`)
----------------------------
For every sample ``(topic, partition, t, end)`` and every group whose latest commit on
that partition at or before ``t`` is ``c``:

* ``offset_lag = end - c`` (raw: negative or huge values are anomalies worth seeing);
* ``time_lag_ms``: how long record ``c`` had been waiting at ``t`` — 0 when
  ``c >= end``; otherwise ``t - time(c)``, where ``time(c)``, when the end offset passed
  ``c + 1``, is interpolated between the last sample at or before ``t`` with
  ``end <= c`` and the first with ``end > c``. Before the first sample, the first
  sample's time is used and the value is a lower bound (``certainty = lower_bound``).
  This is exactly :func:`hightide.lag.time_lag_interpolated` over the samples up to
  ``t`` (the tests use it as the oracle), computed as a Spark join.

**Partitions without a commit yet** (docs/lag.md, "Partitions without a commit in the
totals"): a partition the group commits to at some point, at the samples from the group's
first commit on that topic up to (not including) its first commit on the partition — the
consumer had not got to it yet, its records were waiting — gets a row with ``committed``
and ``offset_lag`` null and ``estimated_lag`` the CLI's, exporter's and console's
:func:`hightide.lag.offsets.uncommitted_estimate`: ``end - log start`` for ``reset="earliest"``
(the default assumption), 0 for ``"latest"``; its time lag is measured from where that
reset starts the group (the log start, or the end: 0), ``certainty`` ``estimate`` (or
``lower_bound``). Group totals count it, flagged as an estimate. A partition the group
never commits to is not known to be the group's (there is no membership in the history):
it is left out. Other rows have ``estimated_lag`` null.

Written to ``<out>/lag`` (Parquet), ``<out>/summary.txt`` (worst groups by offset and
time lag, SLO breaches) and ``<out>/offset_lag.png`` / ``<out>/time_lag.png``
(matplotlib, Agg backend). The summary and the time-lag chart say which values are lower
bounds or estimates (see :func:`group_series`, :func:`chart`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..client import TopicPartition
from ..group.records import OFFSETS_TOPIC, OffsetKey, RecordFormatError, decode_key, decode_offset_value
from .kafkaio import KafkaIO

__all__ = ["COMMITS_SCHEMA", "SAMPLES_SCHEMA", "LagHistoryResult", "decode_commits", "lag_history",
           "read_commits", "sample_end_offsets"]

SAMPLES_SCHEMA = pa.schema([pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
                            pa.field("time_ms", pa.int64()), pa.field("end_offset", pa.int64()),
                            pa.field("log_start_offset", pa.int64(), nullable=True)])
SAMPLES_DDL = "topic string, partition int, time_ms long, end_offset long, log_start_offset long"
"""How the job reads the samples: files written before ``log_start_offset`` was sampled
read it as null."""
RESETS = ("earliest", "latest")
"""The ``auto.offset.reset`` assumptions of ``--assume-reset``."""
COMMITS_SCHEMA = pa.schema([pa.field("group", pa.string()), pa.field("topic", pa.string()),
                            pa.field("partition", pa.int32()), pa.field("committed", pa.int64()),
                            pa.field("commit_ms", pa.int64()), pa.field("log_offset", pa.int64()),
                            pa.field("metadata", pa.string())])


def decode_commits(rows: Iterator[Any]) -> Iterator[tuple]:
    """``__consumer_offsets`` rows (key, value, offset, timestamp) → one
    :data:`COMMITS_SCHEMA` tuple per offset commit, or per deletion (``committed``
    None, ``commit_ms`` the record's timestamp). Other record types are skipped."""
    for r in rows:
        k, v = r["key"], r["value"]
        try:
            key = decode_key(bytes(k)) if k else None
            if not isinstance(key, OffsetKey):
                continue
            if v is None:
                yield (key.group, key.topic, key.partition, None, _ms(r["timestamp"]), r["offset"], None)
            else:
                val = decode_offset_value(bytes(v))
                yield (key.group, key.topic, key.partition, val.offset, val.commit_timestamp, r["offset"],
                       val.metadata)
        except RecordFormatError:
            continue


def _ms(ts: Any) -> int:
    return round(ts.timestamp() * 1000)


def decode_commit_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: Arrow batches of ``__consumer_offsets`` rows (key, value,
    offset, timestamp) → :data:`COMMITS_SCHEMA` batches (:func:`decode_commits`)."""
    for batch in batches:
        rows = list(decode_commits(iter(batch.to_pylist())))
        if rows:
            cols = list(zip(*rows))
            yield pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, COMMITS_SCHEMA)],
                                             schema=COMMITS_SCHEMA)


def read_commits(spark: Any, bootstrap_servers: str, kafka_options: dict[str, str] | None = None) -> Any:
    """The commits DataFrame (:data:`COMMITS_SCHEMA`) read through the ``hightide``
    source. ``__consumer_offsets`` is compacted and small, so its records are decoded
    row by row in ``mapInArrow`` (DataFrame API only, no RDD: works on Spark Connect).
    ``kafka_options``: more source options (``kafka.security.protocol``, ``kafka.sasl.*``...)."""
    raw = (spark.read.format("hightide").options(**(kafka_options or {}))
           .option("kafka.bootstrap.servers", bootstrap_servers)
           .option("subscribe", OFFSETS_TOPIC).option("startingOffsets", "earliest")
           .option("failOnDataLoss", "false").load())
    ddl = "group string, topic string, partition int, committed long, commit_ms long, log_offset long, metadata string"
    return raw.select("key", "value", "offset", "timestamp").mapInArrow(decode_commit_batches, ddl)


def sample_end_offsets(bootstrap_servers: str, out_dir: str | os.PathLike[str], *,
                       topics: list[str] | None = None, io: KafkaIO | None = None,
                       now_ms: int | None = None) -> int:
    """Take one sample of the end offsets (high watermarks) and log start offsets of
    ``topics`` (None: every non-internal topic) and append it to ``out_dir`` as a Parquet
    file. Returns the number of partitions sampled."""
    own = io is None
    io = io or KafkaIO(bootstrap_servers, client_id="hightide-spark-sampler")
    try:
        parts = io.partitions(topics)
        tps = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
        ends = io.offsets({tp: "latest" for tp in tps})
        stamp = int(time.time() * 1000) if now_ms is None else now_ms
        starts = io.offsets({tp: "earliest" for tp in tps})
    finally:
        if own:
            io.close()
    write_samples(out_dir, [(tp.topic, tp.partition, stamp, ends[tp], starts[tp]) for tp in tps])
    return len(tps)


def write_samples(out_dir: str | os.PathLike[str], rows: list[tuple[str, int, int, int, int | None]]) -> None:
    """Append ``(topic, partition, time_ms, end_offset, log_start_offset)`` rows as one
    Parquet file."""
    if not rows:
        return
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cols = list(zip(*rows))
    table = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, SAMPLES_SCHEMA)], schema=SAMPLES_SCHEMA)
    stamp = max(r[2] for r in rows)
    pq.write_table(table, out / f"samples-{stamp:015d}-{os.getpid()}-{time.monotonic_ns()}.parquet")


@dataclass(frozen=True)
class LagHistoryResult:
    rows: int
    groups: int
    out_dir: Path
    summary: str


def lag_rows(commits: Any, samples: Any, reset: str | None = "earliest") -> Any:
    """The lag DataFrame (see the module docstring) from a commits and a samples
    DataFrame. ``reset``: the ``auto.offset.reset`` assumed for partitions without a
    commit yet (:data:`RESETS`; None: no estimates, those partitions are left out)."""
    from pyspark.sql import functions as F
    if reset not in (*RESETS, None):
        raise ValueError(f"reset must be one of {', '.join(RESETS)} or None, not {reset!r}")
    if "log_start_offset" not in samples.columns:
        samples = samples.withColumn("log_start_offset", F.lit(None).cast("long"))
    s = samples.select("topic", "partition", "time_ms", "end_offset", "log_start_offset").dropDuplicates(
        ["topic", "partition", "time_ms", "end_offset"])
    c = commits.select("group", "topic", "partition", "committed", "commit_ms", "log_offset")
    # latest commit (or deletion) at or before each sample time, per group and partition;
    # ``position`` is where the group reads next (its commit, or for an estimate where
    # ``reset`` starts it) and what the time lag is measured from
    asof = (s.alias("s").join(c.alias("c"), ["topic", "partition"])
            .where(F.col("c.commit_ms") <= F.col("s.time_ms"))
            .groupBy("group", "topic", "partition", F.col("s.time_ms").alias("time_ms"),
                     F.col("s.end_offset").alias("end_offset"))
            .agg(F.max(F.struct("c.commit_ms", "c.log_offset", "c.committed")).alias("last"))
            .select("group", "topic", "partition", "time_ms", "end_offset",
                    F.col("last.committed").alias("committed"), F.col("last.committed").alias("position"))
            .where(F.col("committed").isNotNull()))
    if reset is not None:
        asof = asof.unionByName(_estimate_rows(s, c, reset))
    h = s.select("topic", "partition", F.col("time_ms").alias("h_t"), F.col("end_offset").alias("h_e"))
    bounds = (asof.join(h, ["topic", "partition"]).where(F.col("h_t") <= F.col("time_ms"))
              .groupBy("group", "topic", "partition", "time_ms", "end_offset", "committed", "position")
              .agg(F.max(F.when(F.col("h_e") <= F.col("position"), F.struct("h_t", "h_e"))).alias("lo"),
                   F.min(F.when(F.col("h_e") > F.col("position"), F.struct("h_t", "h_e"))).alias("hi")))
    caught_up = F.col("position") >= F.col("end_offset")
    estimated = F.col("committed").isNull()
    interp = (F.col("lo.h_t") + ((F.col("position") + 1 - F.col("lo.h_e")) * (F.col("hi.h_t") - F.col("lo.h_t")))
              / (F.col("hi.h_e") - F.col("lo.h_e")))
    time_of = F.when(F.col("lo").isNull(), F.col("hi.h_t").cast("double")).otherwise(interp)
    return (bounds.select(
        "group", "topic", "partition", "time_ms", "committed", "end_offset",
        (F.col("end_offset") - F.col("committed")).alias("offset_lag"),
        F.when(estimated, F.col("end_offset") - F.col("position")).alias("estimated_lag"),
        F.when(caught_up, F.lit(0)).otherwise(
            F.greatest(F.lit(0), F.bround(F.col("time_ms") - time_of, 0).cast("long"))).alias("time_lag_ms"),
        F.when(caught_up & ~estimated, F.lit("exact")).when(~caught_up & F.col("lo").isNull(), F.lit("lower_bound"))
        .otherwise(F.lit("estimate")).alias("certainty"))
        .orderBy("group", "topic", "partition", "time_ms"))


def _estimate_rows(s: Any, c: Any, reset: str) -> Any:
    """The rows of partitions without a commit yet (module docstring): per group and
    partition it commits to at some point, the samples from the group's first commit on
    the topic up to (not including) the partition's first commit, ``committed`` null and
    ``position`` where ``reset`` starts the group — the log start for earliest (never past
    the end: ``end - position`` is :func:`hightide.lag.offsets.uncommitted_estimate`), the end
    for latest. Samples without a log start give no row for earliest."""
    from pyspark.sql import functions as F
    first = (c.where(F.col("committed").isNotNull()).groupBy("group", "topic", "partition")
             .agg(F.min("commit_ms").alias("first_ms")))
    since = first.groupBy("group", "topic").agg(F.min("first_ms").alias("since_ms"))
    position = (F.col("end_offset") if reset == "latest"  # (least() would skip a null log start)
                else F.when(F.col("log_start_offset").isNotNull(), F.least("log_start_offset", "end_offset")))
    return (s.join(first, ["topic", "partition"]).join(since, ["group", "topic"])
            .where((F.col("time_ms") >= F.col("since_ms")) & (F.col("time_ms") < F.col("first_ms")))
            .select("group", "topic", "partition", "time_ms", "end_offset", F.lit(None).cast("long").alias("committed"),
                    position.alias("position"))
            .where(F.col("position").isNotNull()))


def lag_history(spark: Any, bootstrap_servers: str, samples_path: str | os.PathLike[str],
                out_dir: str | os.PathLike[str], *, groups: list[str] | None = None,
                slo_lag: int | None = None, slo_time_lag_ms: int | None = None, top: int = 10,
                sample_now: bool = True, kafka_options: dict[str, str] | None = None,
                reset: str | None = "earliest") -> LagHistoryResult:
    """Run the lag-history job and write its outputs to ``out_dir`` (see the module
    docstring). ``groups`` restricts the report to those groups; ``slo_lag`` (records)
    and ``slo_time_lag_ms`` set the SLOs counted as breaches; ``kafka_options`` are passed
    to the source (the connection's security: ``kafka.security.protocol``, ``kafka.sasl.*``,
    ``kafka.ssl.*``); ``reset``: the ``auto.offset.reset`` assumed for partitions without a
    commit yet (``--assume-reset``; None: left out)."""
    from pyspark.sql import functions as F
    from . import register
    register(spark, commit_progress=False)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    commits = read_commits(spark, bootstrap_servers, kafka_options)
    if groups:
        commits = commits.where(F.col("group").isin(list(groups)))
    commits = commits.cache()
    if sample_now:
        topics = sorted({r["topic"] for r in commits.select("topic").distinct().collect()})
        if topics:
            sample_end_offsets(bootstrap_servers, samples_path, topics=topics)
    samples = spark.read.schema(SAMPLES_DDL).parquet(str(samples_path))
    lag = lag_rows(commits, samples, reset).cache()
    lag.write.mode("overwrite").parquet(str(out / "lag"))
    rows = lag.collect()
    commits.unpersist()
    lag.unpersist()
    summary = _summary([r.asDict() for r in rows], slo_lag, slo_time_lag_ms, top)
    (out / "summary.txt").write_text(summary)
    _charts([r.asDict() for r in rows], out, top)
    return LagHistoryResult(len(rows), len({r["group"] for r in rows}), out, summary)


_RANK = {"exact": 0, "estimate": 1, "lower_bound": 2}


Point = tuple[int, int, int, str, bool]
"""A group's point in time: ``(time_ms, total offset lag, max time lag, certainty,
lag_estimated)`` (see :func:`group_series`)."""


def group_series(rows: list[dict[str, Any]]) -> dict[str, list[Point]]:
    """Per group, ``(time_ms, total offset lag, max time lag, certainty, lag_estimated)``
    at each sample time (the sum and the max over the group's partitions sampled at that
    time).

    The total counts a partition without a commit yet by its ``estimated_lag`` (module
    docstring), as the CLI's, exporter's and console's totals do; ``lag_estimated`` is
    True when the total includes such an estimate. ``certainty`` is the weakest of the
    partitions': if any partition's time lag is only a lower bound, so is the group's
    maximum (that partition may really be the worst), so it is ``lower_bound``; else
    ``estimate`` if any is interpolated or estimated; else ``exact``."""
    acc: dict[tuple[str, int], list[Any]] = {}
    for r in rows:
        a = acc.setdefault((r["group"], r["time_ms"]), [0, 0, "exact", False])
        if r["offset_lag"] is not None:
            a[0] += r["offset_lag"]
        elif r.get("estimated_lag") is not None:
            a[0] += r["estimated_lag"]
            a[3] = True
        a[1] = max(a[1], r["time_lag_ms"])
        c = r.get("certainty") or "exact"
        if _RANK.get(c, 0) > _RANK[a[2]]:
            a[2] = c
    out: dict[str, list[Point]] = {}
    for (g, t), (lag, tl, cert, est) in sorted(acc.items()):
        out.setdefault(g, []).append((t, lag, tl, cert, est))
    return out


def _lag_text(p: Point) -> str:
    """A group's total lag, ``~N (estimate)`` when it includes estimated partitions."""
    return f"~{p[1]} (estimate)" if p[4] else str(p[1])


def _time_lag_text(ms: int, certainty: str) -> str:
    """A time lag with its certainty: ``12.000 s``, ``~12.000 s (estimate)``, or
    ``>= 12.000 s (lower bound)``."""
    if certainty == "lower_bound":
        return f">= {ms / 1000:.3f} s (lower bound)"
    if certainty == "estimate":
        return f"~{ms / 1000:.3f} s (estimate)"
    return f"{ms / 1000:.3f} s"


def _summary(rows: list[dict[str, Any]], slo_lag: int | None, slo_time_ms: int | None, top: int) -> str:
    series = group_series(rows)
    lines = [f"lag history: {len(rows)} rows, {len(series)} groups, "
             f"{len({(r['topic'], r['partition']) for r in rows})} partitions"]
    if rows:
        t0, t1 = min(r["time_ms"] for r in rows), max(r["time_ms"] for r in rows)
        lines.append(f"from {_iso(t0)} to {_iso(t1)}")
    lines.append("")
    lines.append("worst groups by offset lag (max over time of the group's total lag):")
    by_lag = sorted(series.items(), key=lambda kv: (-max(x[1] for x in kv[1]), kv[0]))[:top]
    for g, pts in by_lag:
        peak = max(pts, key=lambda x: x[1])
        lines.append(f"  {g}: max lag {_lag_text(peak)} at {_iso(peak[0])}, latest {_lag_text(pts[-1])}")
    if any(p[4] for pts in series.values() for p in pts):
        lines.append("  (estimate: the total counts partitions the group had not committed yet, from where")
        lines.append("   the assumed auto.offset.reset starts it: the log start for earliest, 0 for latest)")
    lines.append("")
    lines.append("worst groups by time lag (max over time):")
    by_time = sorted(series.items(), key=lambda kv: (-max(x[2] for x in kv[1]), kv[0]))[:top]
    for g, pts in by_time:
        peak = max(pts, key=lambda x: (x[2], -_RANK[x[3]]))
        lines.append(f"  {g}: max time lag {_time_lag_text(peak[2], peak[3])} at {_iso(peak[0])}, "
                     f"latest {_time_lag_text(pts[-1][2], pts[-1][3])}")
    if any(p[3] == "lower_bound" for pts in series.values() for p in pts):
        lines.append("  (lower bound: the committed record was written before the first end-offset sample,")
        lines.append("   so its age is only known to be at least this; sample more often or for longer)")
    lines.append("")
    for label, limit, idx, unit in (("offset lag", slo_lag, 1, ""), ("time lag", slo_time_ms, 2, " ms")):
        if limit is None:
            continue
        lines.append(f"SLO breaches, {label} > {limit}{unit}:")
        any_breach = False
        for g, pts in sorted(series.items()):
            bad = [p for p in pts if p[idx] > limit]
            if bad:
                any_breach = True
                bound = idx == 2 and any(p[3] == "lower_bound" for p in bad)
                worst = max(bad, key=lambda p: p[idx])
                est = " (estimate)" if idx == 1 and worst[4] else ""
                lines.append(f"  {g}: {len(bad)} of {len(pts)} samples, first {_iso(bad[0][0])}, "
                             f"last {_iso(bad[-1][0])}, worst {'>= ' if bound else ''}{worst[idx]}{unit}{est}")
        if not any_breach:
            lines.append("  none")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


_MARKERS = "o^sDv<>px*"


def chart(series: dict[str, list[Point]], idx: int, ylabel: str, scale: float, top: int) -> Any:
    """One matplotlib figure of the ``top`` worst groups over time (``idx`` 1: offset lag,
    2: time lag). Groups whose series are identical (e.g. several groups whose time lag is
    only known as "at least the sampling window") are drawn once and labelled with all
    their names; each line has its own marker. Time-lag points that are lower bounds are
    drawn dashed with hollow markers and a shaded band above them (the true value is
    somewhere up there); exact and interpolated points are solid. Offset-lag points whose
    total includes estimates (partitions without a commit yet) have white-filled markers
    (gid ``estimate``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    worst = sorted(series, key=lambda g: (-max(x[idx] for x in series[g]), g))[:top]
    lines: dict[tuple, list[str]] = {}
    for g in worst:
        key = tuple((p[0], p[idx], p[3] if idx == 2 else ("estimate" if p[4] else "")) for p in series[g])
        lines.setdefault(key, []).append(g)
    fig, ax = plt.subplots(figsize=(12, 4.5), dpi=100)
    t_min = min((p[0] for g in worst for p in series[g]), default=0)
    y_max = max((p[idx] / scale for g in worst for p in series[g]), default=0)
    any_bound = any_estimate = False
    for i, (key, names) in enumerate(lines.items()):
        label = names[0] if len(names) == 1 else f"{', '.join(names)} (identical)"
        xs = [(t - t_min) / 1000 for t, _, _ in key]
        ys = [v / scale for _, v, _ in key]
        bound = [c == "lower_bound" for _, _, c in key]
        color = f"C{i % 10}"
        marker = _MARKERS[i % len(_MARKERS)]
        if not any(bound):
            ax.plot(xs, ys, color=color, marker=marker, linestyle="-", label=label)
            for x, y, (_, _, c) in zip(xs, ys, key):
                if c == "estimate" and idx == 1:
                    any_estimate = True
                    ax.plot([x], [y], color=color, marker=marker, markerfacecolor="white", linestyle="none",
                            gid="estimate", label="_nolegend_")
            continue
        any_bound = True
        ax.plot([], [], color=color, marker=marker, markerfacecolor="none", linestyle="--",
                label=f"{label} (lower bound)" if all(bound) else label)  # the legend entry
        _bound_segments(ax, xs, ys, bound, color, marker, y_max)
    ax.set_xlabel("seconds since " + (_iso(t_min) if worst else "-"))
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} per group" + (" (dashed, hollow, shaded: lower bound)" if any_bound else "")
                 + (" (white markers: includes estimates for partitions without a commit yet)" if any_estimate else ""))
    if worst:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def _bound_segments(ax: Any, xs: list[float], ys: list[float], bound: list[bool], color: str, marker: str,
                    y_max: float) -> None:
    """Draw a series with lower-bound points: segments touching a bound dashed, the others
    solid; bound points hollow, with a shaded band from the bound up to the chart's top."""
    for j in range(len(xs) - 1):
        style = "--" if bound[j] or bound[j + 1] else "-"
        ax.plot(xs[j:j + 2], ys[j:j + 2], color=color, linestyle=style, gid="bound" if style == "--" else None,
                label="_nolegend_")
    for x, y, b in zip(xs, ys, bound):
        ax.plot([x], [y], color=color, marker=marker, markerfacecolor="none" if b else color, linestyle="none",
                label="_nolegend_")
    bx = [x for x, b in zip(xs, bound) if b]
    by = [y for y, b in zip(ys, bound) if b]
    if len(bx) > 1:
        ax.fill_between(bx, by, [max(y_max, max(by)) * 1.05] * len(bx), color=color, alpha=0.08, linewidth=0)


def _charts(rows: list[dict[str, Any]], out: Path, top: int) -> None:
    import matplotlib.pyplot as plt
    series = group_series(rows)
    for name, idx, ylabel, scale in (("offset_lag.png", 1, "offset lag (records)", 1.0),
                                     ("time_lag.png", 2, "time lag (s)", 1000.0)):
        fig = chart(series, idx, ylabel, scale, top)
        fig.savefig(out / name)
        plt.close(fig)
