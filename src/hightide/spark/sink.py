"""The ``hightide`` Spark sink: ``df.write`` and ``df.writeStream`` ``.format("hightide")``.

Columns, as Spark's Kafka sink takes them: ``value`` (required; binary or string),
``key``, ``topic`` (unless the ``topic`` option is set, which overrides it),
``partition`` (int; otherwise Kafka's default partitioner: murmur2 of the key, and for
null keys a round-robin that is deterministic per task), ``headers``
(``array<struct<key: string, value: binary>>``). Every task writes with its own
idempotent producer (InitProducerId; batches carry producer id, epoch and sequence), so
a Produce retried after a lost answer is deduplicated by the broker.

Exactly once per micro-batch (streaming, option ``exactlyOnce``, default true)
-----------------------------------------------------------------------------
Spark replays a micro-batch after a failure: a task is retried, or a restarted query
re-runs the last batch whose offsets were logged but whose commit was not. Spark's Kafka
sink then writes the records again. This sink does not, using two records kept in Kafka:

1. **Commit marker.** After every task of batch ``B`` succeeded, the driver-side
   ``commit(messages, B)`` commits to the *sink group* (option ``sinkGroupId``, default
   ``spark-hightide-sink-<query id>``) each written partition's end offset, with
   metadata ``{"batch": B, "run": <run id>, "query": <id>}`` (plain OffsetCommit, so
   ``hightide groups describe`` shows it too).
2. **Record tags.** Each record of batch ``B`` written by Spark task (partition) ``t``
   carries the header ``hightide.sink = <sink>/<B>/<t>/<i>``, ``i`` its position among
   that task's records for that topic-partition, ``<sink>`` a short hash of the sink
   group.

A task of batch ``B`` first reads the marker. If its batch is ``>= B``, batch ``B`` was
written and committed already: the task writes nothing. Otherwise, if the task may be
re-running (a retried task attempt, or the marker was not written by this run of the
query: the first batch after a restart),
it reads each target partition from the marker's offset (the end of the last committed
batch; the log start for a partition the marker does not have) to the end, collects the
tags ``<sink>/<B>/<t>/*`` already there, and writes only the records whose tag is
missing. Replays must see the same input in the same order — true for deterministic
queries over replayable sources such as ``hightide`` itself, and what Spark requires
of any exactly-once pipeline. Not covered: speculative task attempts, and whole-stage
retries (PySpark exposes no stage attempt number). Batch writes (``df.write``) are
at-least-once if a task is retried, like Spark's Kafka sink.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..client import TopicPartition
from .columnar import encode_batch, scan_batches_for_records
from .kafkaio import KafkaIO
from .options import OptionError, SinkOptions

__all__ = ["SINK_HEADER", "HightideBatchWriter", "HightideStreamWriter", "SinkCommit", "murmur2", "sink_tag"]

SINK_HEADER = "hightide.sink"


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the default partitioner's hash), as a signed int32."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length & 3
    base = n4 * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def default_partition(key: bytes, num_partitions: int) -> int:
    """Kafka's default partition for a non-null key: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def sink_tag(sink_group: str, batch_id: int, task: int) -> str:
    """The tag prefix of the records task ``task`` writes in batch ``batch_id``."""
    short = hashlib.sha1(sink_group.encode()).hexdigest()[:8]
    return f"{short}/{batch_id}/{task}/"


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one write task reports to the driver."""

    rows: int = 0
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    skipped_rows: int = 0
    sink_group: str | None = None
    query_id: str | None = None
    run: str | None = None


def _check_schema(schema: StructType, opts: SinkOptions) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    if "value" not in names:
        raise OptionError("required attribute 'value' not found")
    for col, ok in (("value", ("binary", "string")), ("key", ("binary", "string")), ("topic", ("string",)),
                    ("partition", ("int",))):
        f = names.get(col)
        if f is not None and f.dataType.simpleString() not in ok:
            raise OptionError(f"{col} attribute type must be {' or '.join(ok)}, got {f.dataType.simpleString()}")
    if "headers" in names and names["headers"].dataType.simpleString() != "array<struct<key:string,value:binary>>":
        raise OptionError("headers attribute type must be array<struct<key:string,value:binary>>")
    if opts.topic is None and "topic" not in names:
        raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option "
                          "for setting a topic.")


def _as_bytes(col: pa.Array | None, n: int) -> list[bytes | None]:
    if col is None:
        return [None] * n
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    return col.to_pylist()


@dataclass
class _Rows:
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]
    topics: list[str]
    partitions: list[int | None]


def _columns(b: pa.RecordBatch) -> Any:
    """``col(name)``: the batch's column of that (case-insensitive) name, or None."""
    names = {name.lower(): i for i, name in enumerate(b.schema.names)}
    return lambda name: b.column(names[name]) if name in names else None


def _collect(batches: Iterator[pa.RecordBatch], opts: SinkOptions) -> _Rows:
    rows = _Rows([], [], [], [], [])
    for b in batches:
        n = b.num_rows
        if n == 0:
            continue
        col = _columns(b)
        rows.keys += _as_bytes(col("key"), n)
        rows.values += _as_bytes(col("value"), n)
        h = col("headers")
        rows.headers += ([[] for _ in range(n)] if h is None else
                         [[(x["key"], x["value"]) for x in (hs or [])] for hs in h.to_pylist()])
        if opts.topic is not None:
            rows.topics += [opts.topic] * n
        else:
            topics = col("topic").to_pylist()  # type: ignore[union-attr]
            if any(t is None for t in topics):
                raise OptionError("null topic present in the data. Use the topic option for setting a topic.")
            rows.topics += topics
        p = col("partition")
        rows.partitions += [None] * n if p is None else p.to_pylist()
    return rows


def write_task(opts: SinkOptions, batches: Iterator[pa.RecordBatch], *, task: int, retry: bool,
               batch_id: int | None = None, query_id: str | None = None, run: str | None = None) -> SinkCommit:
    """Write one Spark task's rows (see the module docstring). ``batch_id`` is None for a
    batch (non-streaming) write, which skips the exactly-once machinery; ``run`` is the
    query's run id; ``retry`` says an earlier attempt of this task may have written."""
    rows = _collect(batches, opts)
    n = len(rows.values)
    exactly_once = batch_id is not None and opts.exactly_once
    group = (opts.sink_group_id or f"spark-hightide-sink-{query_id}") if batch_id is not None else None
    msg = SinkCommit(sink_group=group, query_id=query_id, run=run)
    if n == 0:
        return msg
    with KafkaIO(opts.bootstrap_servers, client_id="hightide-spark-sink",
                 request_timeout_s=opts.request_timeout_s) as io:
        counts = {t: len(ps) for t, ps in io.partitions(sorted(set(rows.topics))).items()}
        missing = sorted(set(rows.topics) - set(counts))
        if missing:
            raise OptionError(f"topics {missing} do not exist")
        per_tp: dict[TopicPartition, list[tuple[int, int]]] = {}  # (position, row)
        rr = task
        for i in range(n):
            t = rows.topics[i]
            p = rows.partitions[i]
            if p is None:
                k = rows.keys[i]
                if k is None:
                    p, rr = rr % counts[t], rr + 1
                else:
                    p = default_partition(k, counts[t])
            elif not 0 <= p < counts[t]:
                raise OptionError(f"partition {p} of topic {t} does not exist ({counts[t]} partitions)")
            seq = per_tp.setdefault(TopicPartition(t, p), [])
            seq.append((len(seq), i))
        prefix = None
        if exactly_once:
            assert group is not None and batch_id is not None
            marker = io.committed(group)
            last_batch, last_run = _marker_state(marker)
            if last_batch is not None and last_batch >= batch_id:
                msg.skipped_rows = n
                return msg
            prefix = sink_tag(group, batch_id, task)
            if retry or run is None or last_run != run:
                present, ends = _tags_present(io, {tp: marker.get(tp, (None, ""))[0] for tp in per_tp}, prefix)
                # the marker moves past what the earlier attempt wrote even if nothing is left to write
                msg.ends.update({(tp.topic, tp.partition): end for tp, end in ends.items()})
                for tp, done in present.items():
                    before = len(per_tp[tp])
                    per_tp[tp] = [(j, i) for j, i in per_tp[tp] if j not in done]
                    msg.skipped_rows += before - len(per_tp[tp])
        _produce(io, opts, rows, per_tp, prefix, msg)
    return msg


def _chunk_len(rows: _Rows, seq: list[tuple[int, int]], start: int, opts: SinkOptions) -> int:
    """How many records from ``seq[start]`` on go into one batch: at most
    ``max_batch_records``, and no more than ``max_batch_bytes`` of keys, values and
    headers (at least one record, so an oversized record gets the broker's
    MESSAGE_TOO_LARGE)."""
    size = n = 0
    for _, i in seq[start:start + opts.max_batch_records]:
        k, v = rows.keys[i], rows.values[i]
        size += 24 + (len(k) if k else 0) + (len(v) if v else 0) + sum(len(hk) + len(hv or b"") + 8
                                                                       for hk, hv in rows.headers[i])
        if n and size > opts.max_batch_bytes:
            break
        n += 1
    return n


def _produce(io: KafkaIO, opts: SinkOptions, rows: _Rows, per_tp: dict[TopicPartition, list[tuple[int, int]]],
             prefix: str | None, msg: SinkCommit) -> None:
    """Write the rows with one idempotent producer, one batch per partition per round
    (one Produce request per leader per round), recording end offsets in ``msg``."""
    pid, epoch = io.init_producer_id()
    now = int(time.time() * 1000)
    cursor = {tp: 0 for tp in per_tp}
    while True:
        batches: dict[TopicPartition, bytes] = {}
        sizes: dict[TopicPartition, int] = {}
        for tp, seq in per_tp.items():
            c = cursor[tp]
            chunk = seq[c:c + _chunk_len(rows, seq, c, opts)]
            if not chunk:
                continue
            headers = [rows.headers[i] if prefix is None else
                       [*rows.headers[i], (SINK_HEADER, f"{prefix}{j}".encode())] for j, i in chunk]
            batches[tp] = encode_batch([rows.keys[i] for _, i in chunk], [rows.values[i] for _, i in chunk],
                                       headers, [now] * len(chunk), producer_id=pid, producer_epoch=epoch,
                                       base_sequence=c, compression=opts.compression)
            sizes[tp] = len(chunk)
        if not batches:
            return
        bases = io.produce(batches, timeout_ms=int(opts.request_timeout_s * 1000))
        for tp, k in sizes.items():
            cursor[tp] += k
            key = (tp.topic, tp.partition)
            msg.ends[key] = max(msg.ends.get(key, 0), bases[tp] + k)
            msg.rows += k


def _marker_state(marker: dict[TopicPartition, tuple[int, str]]) -> tuple[int | None, str | None]:
    """(last committed batch id, run token that committed it) from the sink group."""
    best: tuple[int | None, str | None] = (None, None)
    for _, meta in marker.values():
        try:
            doc = json.loads(meta)
            b = int(doc["batch"])
        except (ValueError, KeyError, TypeError):
            continue
        if best[0] is None or b > best[0]:
            best = (b, doc.get("run"))
    return best


def _tags_present(io: KafkaIO, starts: dict[TopicPartition, int | None], prefix: str
                  ) -> tuple[dict[TopicPartition, set[int]], dict[TopicPartition, int]]:
    """Per partition, the positions ``i`` of the tags ``prefix + i`` already in the log
    between ``starts[tp]`` (None: the log start) and the end; and those end offsets."""
    need_earliest = [tp for tp, s in starts.items() if s is None]
    earliest = io.offsets({tp: "earliest" for tp in need_earliest})
    latest = io.offsets({tp: "latest" for tp in starts})
    want = prefix.encode()
    found: dict[TopicPartition, set[int]] = {}
    for tp, s in starts.items():
        start = earliest[tp] if s is None else s
        end = latest[tp]
        if start >= end:
            continue
        for chunk in io.fetch_range(tp, start, end):
            recs, _ = scan_batches_for_records(chunk.records, chunk.offset, end)
            for _, headers in recs:
                for k, v in headers:
                    if k == SINK_HEADER and v is not None and v.startswith(want):
                        found.setdefault(tp, set()).add(int(v[len(want):]))
    return found, latest


def _commit_marker(messages: list[Any], batch_id: int, servers: str, timeout_s: float) -> None:
    msgs = [m for m in messages if isinstance(m, SinkCommit)]
    ends: dict[TopicPartition, int] = {}
    for m in msgs:
        for (t, p), end in m.ends.items():
            tp = TopicPartition(t, p)
            ends[tp] = max(end, ends.get(tp, end))
    if not ends:
        return
    group = next(m.sink_group for m in msgs if m.sink_group)
    first = next(m for m in msgs if m.sink_group)
    meta = json.dumps({"batch": batch_id, "run": first.run, "query": first.query_id}, separators=(",", ":"))
    with KafkaIO(servers, client_id="hightide-spark-sink", request_timeout_s=timeout_s) as io:
        io.commit(group, {tp: (end, meta) for tp, end in ends.items()})


@dataclass(frozen=True)
class _Task:
    partition: int = 0
    retry: bool = False
    """A retried task attempt: an earlier attempt may have written records. (PySpark's
    task context has no stage attempt number; see docs/spark.md on stage retries.)"""
    batch_id: int | None = None
    query_id: str | None = None
    run_id: str | None = None


def _task_context() -> _Task:
    """Where this write runs, from Spark's task context. Streaming sets the local
    properties ``streaming.sql.batchId`` and ``sql.streaming.queryId``, and runs each
    micro-batch's jobs in a job group named after the query's run id."""
    from pyspark import TaskContext
    tc = TaskContext.get()
    if tc is None:
        return _Task()
    batch = tc.getLocalProperty("streaming.sql.batchId")
    return _Task(tc.partitionId(), tc.attemptNumber() > 0,
                 None if batch is None else int(batch), tc.getLocalProperty("sql.streaming.queryId"),
                 tc.getLocalProperty("spark.jobGroup.id"))


class HightideBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options)
        _check_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        t = _task_context()
        return write_task(self.opts, iterator, task=t.partition, retry=t.retry)


class HightideStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options)
        _check_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        t = _task_context()
        if t.batch_id is None:
            raise RuntimeError("the hightide stream writer runs outside a streaming micro-batch")
        return write_task(self.opts, iterator, task=t.partition, retry=t.retry, batch_id=t.batch_id,
                          query_id=t.query_id, run=t.run_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.exactly_once:
            _commit_marker(list(messages), batchId, self.opts.bootstrap_servers, self.opts.request_timeout_s)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: the records written stay; a replay of the batch skips them."""
