"""The ``hightide`` Spark sink: ``df.write`` and ``df.writeStream`` ``.format("hightide")``.

Columns, as Spark's Kafka sink takes them: ``value`` (required; binary or string),
``key``, ``topic`` (unless the ``topic`` option is set, which overrides it),
``partition`` (int; otherwise Kafka's default partitioner: murmur2 of the key, and for
null keys a round-robin that is deterministic per task), ``headers``
(``array<struct<key: string, value: binary>>``). A target topic that does not exist is
asked for as a Kafka producer asks (Metadata allowing auto-creation), so the cluster
creates it when its ``auto.create.topics.enable`` is true (the default); otherwise the
write fails with one line naming the topic. Every task writes with its own
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

Transactional mode (option ``transactional``, or a ``transactionalIdPrefix`` /
``kafka.transactional.id`` prefix)
-----------------------------------------------------------------------------------
``transactional=true``: one transaction per micro-batch (or batch job), so it is atomic
for read_committed readers; it must be written by one task (the query coalesces to one
partition: a Python data source cannot ask Spark for a distribution). If several tasks
wrote, the driver's ``commit`` aborts them all and raises. ``transactional=per-task``:
the same per task, committed one after another: NOT atomic across tasks.
Each task writes in a Kafka transaction of the id ``<prefix>-<task>``: InitProducerId
first (fencing an earlier attempt of the task and aborting its open transaction),
AddPartitionsToTxn, transactional batches; the transaction is left open and reported in
:class:`SinkCommit` ``txn``. The driver's ``commit`` ends every task's transaction with
EndTxn COMMIT (before the commit marker), its ``abort`` with ABORT; a failing task aborts
its own. read_committed readers thus never see records of a failed job or attempt.
A replay's tag scan counts only tags whose transaction committed.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..client import ProducerId, TopicPartition
from ..protocol.records import decode_records, iter_headers
from .columnar import scan_batches_for_records
from .encode import Bytes, Segment, encode_batch, encode_headers, murmur2_array, tag_header
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
    txn: tuple[str, int, int] | None = None
    """Transactional mode: (transactional id, producer id, epoch) of the task's open
    transaction, for the driver to commit (or abort)."""


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


@dataclass
class _Rows:
    """One task's rows as columns: keys and values (Arrow binary), the user headers
    already encoded (count and bytes per row; None without a ``headers`` column), the
    topic and the explicit partition (-1: none) of each row."""

    keys: pa.Array
    values: pa.Array
    header_count: np.ndarray | None
    header_bytes: pa.Array | None
    topics: pa.Array
    partitions: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def _columns(b: pa.RecordBatch) -> Any:
    """``col(name)``: the batch's column of that (case-insensitive) name, or None."""
    names = {name.lower(): i for i, name in enumerate(b.schema.names)}
    return lambda name: b.column(names[name]) if name in names else None


def _binary(col: pa.Array | None, n: int) -> pa.Array:
    if col is None:
        return pa.nulls(n, pa.binary())
    return col.cast(pa.binary()) if not pa.types.is_binary(col.type) else col


def _collect(batches: Iterator[pa.RecordBatch], opts: SinkOptions) -> _Rows:
    """Concatenate the task's input batches into :class:`_Rows` (no per-row Python work
    except encoding user headers, when there is a ``headers`` column)."""
    parts = [b for b in batches if b.num_rows]
    if not parts:
        return _Rows(pa.array([], pa.binary()), pa.array([], pa.binary()), None, None, pa.array([], pa.string()),
                     np.zeros(0, np.int64))
    keys, values, topics, partitions, hcounts, hbytes = [], [], [], [], [], []
    has_headers = _columns(parts[0])("headers") is not None
    for b in parts:
        n = b.num_rows
        col = _columns(b)
        keys.append(_binary(col("key"), n))
        values.append(_binary(col("value"), n))
        if opts.topic is not None:
            topics.append(pa.array([opts.topic], pa.string()).take(np.zeros(n, np.int64)))
        else:
            t = col("topic")
            if t.null_count:
                raise OptionError("null topic present in the data. Use the topic option for setting a topic.")
            topics.append(t.cast(pa.string()))
        p = col("partition")
        partitions.append(np.full(n, -1, np.int64) if p is None else
                          np.asarray(p.fill_null(-1).to_numpy(zero_copy_only=False), np.int64))
        if has_headers:
            lists = [[(x["key"], x["value"]) for x in (hs or [])] for hs in col("headers").to_pylist()]
            c, hb = encode_headers(lists)
            hcounts.append(c)
            hbytes.append(hb)
    return _Rows(pa.concat_arrays(keys), pa.concat_arrays(values),
                 np.concatenate(hcounts) if has_headers else None,
                 pa.concat_arrays(hbytes) if has_headers else None,
                 pa.concat_arrays(topics), np.concatenate(partitions))


def route(rows: _Rows, counts: dict[str, int], task: int) -> dict[TopicPartition, np.ndarray]:
    """The row indices going to each topic-partition, in input order. A row's partition
    is its ``partition`` column, else ``murmur2(key)`` (Kafka's default partitioner),
    else for null keys round-robin over the task's null-key rows starting at ``task``
    (deterministic, so a replay routes every row the same way)."""
    uniq = pc.unique(rows.topics).to_pylist()
    missing = sorted(set(uniq) - set(counts))
    if missing:
        raise OptionError(f"topics {missing} do not exist and the cluster did not create them "
                          f"(auto.create.topics.enable=false): create them first, e.g. "
                          f"`hightide topics create {missing[0]}`")
    topic_idx = np.asarray(pc.index_in(rows.topics, pa.array(uniq, pa.string())).to_numpy(), np.int64)
    nparts = np.array([counts[t] for t in uniq], np.int64)[topic_idx]
    part = rows.partitions.copy()
    bad = np.flatnonzero((part >= 0) & (part >= nparts))
    if bad.size:
        i = int(bad[0])
        t = uniq[topic_idx[i]]
        raise OptionError(f"partition {part[i]} of topic {t} does not exist ({counts[t]} partitions)")
    free = part < 0
    keyed = free & rows.keys.is_valid().to_numpy(zero_copy_only=False)
    if keyed.any():
        h = murmur2_array(rows.keys).astype(np.int64) & 0x7FFFFFFF
        part[keyed] = h[keyed] % nparts[keyed]
    unkeyed = free & ~keyed
    if unkeyed.any():
        rank = np.cumsum(unkeyed) - 1
        part[unkeyed] = (task + rank[unkeyed]) % nparts[unkeyed]
    order = np.lexsort((np.arange(len(part)), part, topic_idx))
    key = topic_idx[order] * (1 << 32) + part[order]
    cuts = np.flatnonzero(np.diff(key)) + 1
    return {TopicPartition(uniq[int(topic_idx[g[0]])], int(part[g[0]])): g for g in np.split(order, cuts)}


def write_task(opts: SinkOptions, batches: Iterator[pa.RecordBatch], *, task: int, retry: bool,
               batch_id: int | None = None, query_id: str | None = None, run: str | None = None,
               txn_prefix: str | None = None) -> SinkCommit:
    """Write one Spark task's rows (see the module docstring). ``batch_id`` is None for a
    batch (non-streaming) write, which skips the exactly-once machinery; ``run`` is the
    query's run id; ``retry`` says an earlier attempt of this task may have written.
    ``txn_prefix`` (transactional mode): the task writes in a transaction of the id
    ``<txn_prefix>-<task>``, left open for the driver to commit (``msg.txn``)."""
    rows = _collect(batches, opts)
    n = len(rows)
    exactly_once = batch_id is not None and opts.exactly_once
    group = (opts.sink_group_id or f"spark-hightide-sink-{query_id}") if batch_id is not None else None
    msg = SinkCommit(sink_group=group, query_id=query_id, run=run)
    if n == 0:
        return msg
    with KafkaIO(opts.bootstrap_servers, client_id="hightide-spark-sink",
                 request_timeout_s=opts.request_timeout_s, security=opts.security) as io:
        txn = None
        if txn_prefix is not None:
            # first: fences an earlier attempt of this task, whose open transaction is aborted
            txn_id = f"{txn_prefix}-{task}"
            txn = (txn_id, io.init_transactional(txn_id, opts.transaction_timeout_ms))
        topics = pc.unique(rows.topics).to_pylist()
        # as a Kafka producer asks: the cluster creates missing topics if auto.create.topics.enable
        counts = {t: len(ps) for t, ps in io.partitions(sorted(topics), auto_create=True).items()}
        per_tp = route(rows, counts, task)
        # positions: each row's place in the task's sequence for its partition (the tag)
        plan = {tp: (idx, np.arange(len(idx))) for tp, idx in per_tp.items()}
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
                present, ends = _tags_present(io, {tp: marker.get(tp, (None, ""))[0] for tp in plan}, prefix,
                                              committed_only=txn is not None)
                # the marker moves past what the earlier attempt wrote even if nothing is left to write
                msg.ends.update({(tp.topic, tp.partition): end for tp, end in ends.items()})
                for tp, done in present.items():
                    idx, pos = plan[tp]
                    keep = ~np.isin(pos, np.fromiter(done, np.int64, len(done)))
                    plan[tp] = (idx[keep], pos[keep])
                    msg.skipped_rows += int((~keep).sum())
        if txn is None:
            _produce(io, opts, rows, plan, prefix, msg)
            return msg
        txn_id, producer = txn
        plan = {tp: p for tp, p in plan.items() if len(p[0])}
        if not plan:
            return msg
        try:
            io.add_partitions_to_txn(txn_id, producer, sorted(plan))
            _produce(io, opts, rows, plan, prefix, msg, txn)
        except BaseException:
            _abort_quietly(io, txn_id, producer)
            raise
        msg.txn = (txn_id, producer[0], producer[1])
    return msg


def _abort_quietly(io: KafkaIO, txn_id: str, producer: ProducerId) -> None:
    """Best effort: abort the task's transaction after a failure (else it stays open,
    holding back the LSO, until the next attempt fences it or its timeout passes)."""
    try:
        io.end_txn(txn_id, producer[0], producer[1], commit=False)
    except Exception:  # noqa: BLE001 - the original error is what matters
        pass


def _chunks(rows: _Rows, idx: np.ndarray, opts: SinkOptions) -> list[tuple[int, int]]:
    """Cut a partition's rows ``idx`` into batches: at most ``max_batch_records`` each
    and no more than ``max_batch_bytes`` of keys, values and headers (at least one
    record, so an oversized record gets the broker's MESSAGE_TOO_LARGE)."""
    size = 24 + _lengths(rows.keys, idx) + _lengths(rows.values, idx) + 40
    if rows.header_bytes is not None:
        size += _lengths(rows.header_bytes, idx)
    cum = np.cumsum(size)
    out, start = [], 0
    while start < len(idx):
        base = cum[start - 1] if start else 0
        end = int(np.searchsorted(cum, base + opts.max_batch_bytes, side="right"))
        end = max(start + 1, min(end, start + opts.max_batch_records))
        out.append((start, end))
        start = end
    return out


def _lengths(arr: pa.Array, idx: np.ndarray) -> np.ndarray:
    return np.asarray(pc.binary_length(arr.take(idx)).fill_null(0).to_numpy(zero_copy_only=False), np.int64)


def _produce(io: KafkaIO, opts: SinkOptions, rows: _Rows, plan: dict[TopicPartition, tuple[np.ndarray, np.ndarray]],
             prefix: str | None, msg: SinkCommit, txn: tuple[str, ProducerId] | None = None) -> None:
    """Write the rows with one idempotent producer (``txn``: the task's transactional
    one), one batch per partition per round (one Produce request per leader per round),
    recording end offsets in ``msg``."""
    txn_id = None
    if txn is None:
        pid, epoch = io.init_producer_id()
    else:
        txn_id, (pid, epoch) = txn
    now = int(time.time() * 1000)
    chunks = {tp: _chunks(rows, idx, opts) for tp, (idx, _) in plan.items()}
    sent = {tp: 0 for tp in plan}  # records sent to tp so far = the next sequence number
    for r in range(max((len(c) for c in chunks.values()), default=0)):
        batches: dict[TopicPartition, bytes] = {}
        sizes: dict[TopicPartition, int] = {}
        for tp, (idx, pos) in plan.items():
            if r >= len(chunks[tp]):
                continue
            a, b = chunks[tp][r]
            sel = idx[a:b]
            count = None if rows.header_count is None else rows.header_count[sel]
            headers: list[Segment] = [] if rows.header_bytes is None else [Bytes(rows.header_bytes.take(sel))]
            if prefix is not None:
                count = (np.zeros(len(sel), np.int64) if count is None else count) + 1
                headers += tag_header(SINK_HEADER, prefix, pos[a:b])
            batches[tp] = encode_batch(rows.keys.take(sel), rows.values.take(sel), timestamp=now, producer_id=pid,
                                       producer_epoch=epoch, base_sequence=sent[tp], header_count=count,
                                       headers=headers, compression=opts.compression,
                                       transactional=txn_id is not None)
            sizes[tp] = len(sel)
        bases = io.produce(batches, timeout_ms=int(opts.request_timeout_s * 1000), transactional_id=txn_id)
        for tp, k in sizes.items():
            sent[tp] += k
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


def _tags_present(io: KafkaIO, starts: dict[TopicPartition, int | None], prefix: str,
                  committed_only: bool = False) -> tuple[dict[TopicPartition, set[int]], dict[TopicPartition, int]]:
    """Per partition, the positions ``i`` of the tags ``prefix + i`` already in the log
    between ``starts[tp]`` (None: the log start) and the end; and those end offsets.
    ``committed_only`` (transactional mode): a tag in a transaction counts only once its
    COMMIT marker follows it (aborted and still open transactions do not count; the
    caller fenced its own earlier attempts first, so theirs are all closed)."""
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
        if committed_only:
            found[tp] = _committed_tags(io, tp, start, end, want)
            continue
        for chunk in io.fetch_range(tp, start, end):
            recs, _ = scan_batches_for_records(chunk.records, chunk.offset, end)
            for _, headers in recs:
                found.setdefault(tp, set()).update(_tag_positions(headers, want))
    return found, latest


def _tag_positions(headers: list[tuple[str, bytes | None]], want: bytes) -> Iterator[int]:
    for k, v in headers:
        if k == SINK_HEADER and v is not None and v.startswith(want):
            yield int(v[len(want):])


def _committed_tags(io: KafkaIO, tp: TopicPartition, start: int, end: int, want: bytes) -> set[int]:
    """The tag positions of ``want`` in ``[start, end)`` of ``tp`` that are committed:
    in a non-transactional batch, or in a transaction whose marker is a COMMIT."""
    found: set[int] = set()
    pending: dict[int, set[int]] = {}  # producer id -> tags of its transaction so far
    for chunk in io.fetch_range(tp, start, end):
        buf = chunk.records
        for h in iter_headers(buf):
            if h.next_offset <= chunk.offset or h.base_offset >= end:
                continue
            batch = memoryview(buf)[h.position:h.position + h.length + 12]
            if h.is_control:
                done = pending.pop(h.producer_id, set())
                key = decode_records(batch)[0].key or b""
                if key[2:4] == b"\x00\x01":  # COMMIT (type 1); ABORT is type 0
                    found |= done
                continue
            recs, _ = scan_batches_for_records(bytes(batch), chunk.offset, end)
            tags = {i for _, headers in recs for i in _tag_positions(headers, want)}
            if h.is_transactional:
                pending.setdefault(h.producer_id, set()).update(tags)
            else:
                found |= tags
    return found


def _end_transactions(messages: list[Any], opts: SinkOptions, commit: bool) -> int:
    """The driver's half of transactional mode: EndTxn (commit or abort) for the open
    transaction of every task that reported one. Returns how many. ``transactional=true``
    (not ``per-task``): a commit with more than one task transaction aborts them all and
    raises OptionError (the batch is never half visible). Commits raise the
    first error (the batch then fails and is retried: a committed transaction stays
    committed, a replay's tags find its records); aborts are best effort."""
    txns = [m.txn for m in messages if isinstance(m, SinkCommit) and m.txn is not None]
    if not txns:
        return 0
    if commit and len(txns) > 1 and not opts.per_task_transactions:
        # transactional=true promises one transaction per micro-batch (job): several
        # writers cannot share one, so nothing of this batch becomes visible
        _end_transactions(messages, opts, commit=False)
        raise OptionError(f"transactional=true writes each micro-batch (or job) in ONE transaction from ONE "
                          f"task, but {len(txns)} tasks wrote records (their transactions are aborted): "
                          "coalesce the DataFrame to one partition before the write (df.coalesce(1)), or "
                          "use transactional=per-task (a transaction per task, not atomic across tasks)")
    with KafkaIO(opts.bootstrap_servers, client_id="hightide-spark-sink",
                 request_timeout_s=opts.request_timeout_s, security=opts.security) as io:
        for txn_id, pid, epoch in txns:
            try:
                io.end_txn(txn_id, pid, epoch, commit)
            except Exception:
                if commit:
                    raise
    return len(txns)


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
        # transactional ids of this job's tasks: <prefix>-<job>-<task> (made on the driver,
        # shipped to the executors with the writer)
        self.txn_prefix = (f"{self.opts.transactional_id_prefix or 'spark-hightide'}-{uuid.uuid4().hex[:12]}"
                           if self.opts.transactional else None)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        t = _task_context()
        return write_task(self.opts, iterator, task=t.partition, retry=t.retry, txn_prefix=self.txn_prefix)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: commit their transactions (transactional mode)."""
        _end_transactions(list(messages), self.opts, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed: abort the transactions of the tasks that succeeded (a failed
        task aborted its own), so read_committed readers see none of the job's records."""
        _end_transactions(list(messages), self.opts, commit=False)


class HightideStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options)
        _check_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        t = _task_context()
        if t.batch_id is None:
            raise RuntimeError("the hightide stream writer runs outside a streaming micro-batch")
        prefix = None
        if self.opts.transactional:  # stable across restarts: a new run fences the old run's tasks
            prefix = self.opts.transactional_id_prefix or f"spark-hightide-{t.query_id}"
        return write_task(self.opts, iterator, task=t.partition, retry=t.retry, batch_id=t.batch_id,
                          query_id=t.query_id, run=t.run_id, txn_prefix=prefix)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Transactional mode: the tasks' transactions are committed first; then the
        commit marker (exactlyOnce) records the batch as written."""
        _end_transactions(list(messages), self.opts, commit=True)
        if self.opts.exactly_once:
            _commit_marker(list(messages), batchId, self.opts.bootstrap_servers, self.opts.request_timeout_s)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Transactional mode: the transactions of the tasks that succeeded are aborted.
        Otherwise nothing to undo: the records written stay; a replay of the batch skips
        them."""
        _end_transactions(list(messages), self.opts, commit=False)
