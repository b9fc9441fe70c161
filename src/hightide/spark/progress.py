"""Commit a streaming query's progress through the ``hightide`` source as consumer-group
offsets, so ``hightide groups describe``, the exporter and any Kafka lag tool show the
Spark job's lag like any consumer's.

Spark calls a source's ``commit(end)`` only when it plans the *next* micro-batch, one
batch late, and Spark's own Kafka source never commits to Kafka at all. So a
:class:`~pyspark.sql.streaming.StreamingQueryListener` does it: on every progress event
(sent after a micro-batch has completed: its data written and its offsets in the
checkpoint's commit log) it commits each ``hightide`` source's end offsets with
OffsetCommit to the source's group — option ``groupId``, default
``<groupIdPrefix>-<query id>`` (prefix ``spark-hightide``; the query id survives restarts
from the same checkpoint). Each partition's commit metadata is a JSON object naming the
query, run, batch id and checkpoint location, e.g.
``{"query":"…","name":"ingest","run":"…","batch":7,"checkpoint":"file:/ckpt/ingest"}``.

The listener finds which of a query's sources are ``hightide`` ones, and their options,
in the query's logical plan (once per run, when the query starts). Commits are the
"simple" (admin) kind, which brokers accept while the group has no members — Spark's
groups never have any. A failed commit is logged and retried with the next batch; it
never fails the query.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from ..client import TopicPartition
from .kafkaio import KafkaIO
from .options import SourceOptions, from_offsets_dict

__all__ = ["GroupOffsetCommitter", "commit_metadata"]

log = logging.getLogger("hightide.spark")


def commit_metadata(query_id: str, name: str | None, run_id: str, batch_id: int, checkpoint: str | None) -> str:
    """The offset-commit metadata string for one micro-batch."""
    return json.dumps({"query": query_id, "name": name, "run": run_id, "batch": batch_id,
                       "checkpoint": checkpoint}, separators=(",", ":"))


class _Query:
    """What the listener knows about one run of a query."""

    def __init__(self, sources: dict[str, SourceOptions], checkpoint: str | None) -> None:
        self.sources = sources  # source description -> options
        self.checkpoint = checkpoint


def _plan_sources(jquery: Any) -> tuple[dict[str, SourceOptions], str | None]:
    """``hightide`` sources of a running query (by their description in progress
    events) and its checkpoint root, read from the JVM query object."""
    from .source import NAME
    sq = jquery.streamingQuery() if hasattr(jquery, "streamingQuery") else jquery
    found: dict[str, SourceOptions] = {}
    leaves = sq.logicalPlan().collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        try:
            relation = leaf.relation()
            if str(relation.table().name()) != NAME:
                continue
            options = dict(relation.options().asCaseSensitiveMap())
            found[str(leaf.stream().toString())] = SourceOptions.parse(options, streaming=True)
        except Exception:  # noqa: BLE001 - not a V2 streaming scan of a Python source
            continue
    try:
        checkpoint = str(sq.resolvedCheckpointRoot())
    except Exception:  # noqa: BLE001
        checkpoint = None
    return found, checkpoint


class GroupOffsetCommitter(StreamingQueryListener):
    """The listener :func:`hightide.spark.register` installs."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._queries: dict[str, _Query] = {}  # by run id
        self._lock = threading.Lock()
        self.commits = 0
        """Number of successful group commits (for tests and diagnostics)."""
        self.last_error: BaseException | None = None

    def _query(self, query_id: str, run_id: str) -> _Query | None:
        with self._lock:
            q = self._queries.get(run_id)
        if q is not None:
            return q
        active = self._spark.streams.get(query_id)
        if active is None:
            return None
        sources, checkpoint = _plan_sources(active._jsq)
        q = _Query(sources, checkpoint)
        with self._lock:
            self._queries[run_id] = q
        return q

    def onQueryStarted(self, event: Any) -> None:
        try:
            self._query(str(event.id), str(event.runId))
        except Exception as exc:  # noqa: BLE001 - a listener must never fail the query
            log.warning("hightide: cannot inspect query %s: %s", event.id, exc)

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        try:
            q = self._query(str(p.id), str(p.runId))
            if q is None or not q.sources:
                return
            self.commit_progress(str(p.id), p.name, str(p.runId), int(p.batchId), q, p.sources)
        except Exception as exc:  # noqa: BLE001
            self.last_error = exc
            log.warning("hightide: committing the progress of query %s batch %s failed: %s",
                        p.id, p.batchId, exc)

    def commit_progress(self, query_id: str, name: str | None, run_id: str, batch_id: int, q: _Query,
                        sources: Any) -> None:
        """Commit the end offsets of each ``hightide`` source in ``sources``."""
        per_group: dict[tuple[str, str], dict[TopicPartition, int]] = {}
        for s in sources:
            opts = q.sources.get(str(s.description))
            if opts is None or not opts.commit_offsets or not s.endOffset:
                continue
            ends = from_offsets_dict(json.loads(s.endOffset))
            key = (opts.bootstrap_servers, opts.commit_group(query_id))
            merged = per_group.setdefault(key, {})
            for tp, off in ends.items():
                merged[tp] = max(off, merged.get(tp, off))
        meta = commit_metadata(query_id, name, run_id, batch_id, q.checkpoint)
        for (servers, group), ends in per_group.items():
            with KafkaIO(servers, client_id="hightide-spark-progress") as io:
                io.commit(group, {tp: (off, meta) for tp, off in ends.items()})
            self.commits += 1

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            self._queries.pop(str(event.runId), None)
