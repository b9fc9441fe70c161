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
query, run and batch id, e.g.
``{"query":"…","name":"ingest","run":"…","batch":7}``.

The listener needs nothing but the progress event: a ``hightide`` source's end offset
carries, next to the offsets, the cluster and group to commit to (the ``"@hightide"``
entry, :func:`.options.progress_target`). That works the same on classic PySpark (the
listener runs in the driver's Python) and on Spark Connect (it runs in the client, which
has no access to the query's JVM plan). Commits are the "simple" (admin) kind, which
brokers accept while the group has no members — Spark's groups never have any. A failed
commit is logged and retried with the next batch; it never fails the query.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from ..client import TopicPartition
from .kafkaio import KafkaIO
from .options import ProgressTarget, progress_target

__all__ = ["GroupOffsetCommitter", "commit_metadata", "commits_of_progress"]

log = logging.getLogger("hightide.spark")


def commit_metadata(query_id: str, name: str | None, run_id: str, batch_id: int) -> str:
    """The offset-commit metadata string for one micro-batch."""
    return json.dumps({"query": query_id, "name": name, "run": run_id, "batch": batch_id},
                      separators=(",", ":"))


def commits_of_progress(query_id: str, sources: Any) -> dict[tuple[str, str], dict[TopicPartition, int]]:
    """What one progress event asks to commit: ``{(bootstrap servers, group): {tp: end
    offset}}`` over the event's ``sources`` (each with an ``endOffset`` JSON string).
    Sources that are not ``hightide`` sources, or have ``commitOffsets=false``, add
    nothing; two sources committing to the same group merge (the larger offset wins)."""
    per_group: dict[tuple[str, str], dict[TopicPartition, int]] = {}
    for s in sources:
        found = progress_target(_end_offset(s))
        if found is None:
            continue
        target, ends = found
        merged = per_group.setdefault(_key(target, query_id), {})
        for tp, off in ends.items():
            merged[tp] = max(off, merged.get(tp, off))
    return per_group


def _end_offset(source: Any) -> str | None:
    end = source["endOffset"] if isinstance(source, dict) else getattr(source, "endOffset", None)
    return None if end is None else str(end)


def _key(target: ProgressTarget, query_id: str) -> tuple[str, str]:
    return target.bootstrap_servers, target.group_for(query_id)


class GroupOffsetCommitter(StreamingQueryListener):
    """The listener :func:`hightide.spark.register` installs. Holds no Spark objects: it
    works wherever the session delivers listener events (driver or Connect client)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.commits = 0
        """Number of successful group commits (for tests and diagnostics)."""
        self.last_error: BaseException | None = None

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        try:
            self.commit_progress(str(p.id), p.name, str(p.runId), int(p.batchId), p.sources)
        except Exception as exc:  # noqa: BLE001 - a listener must never fail the query
            self.last_error = exc
            log.warning("hightide: committing the progress of query %s batch %s failed: %s",
                        p.id, p.batchId, exc)

    def commit_progress(self, query_id: str, name: str | None, run_id: str, batch_id: int, sources: Any) -> int:
        """Commit the end offsets of each ``hightide`` source in ``sources`` (see
        :func:`commits_of_progress`). Returns the number of groups committed to; raises
        the client's error if a commit fails."""
        meta = commit_metadata(query_id, name, run_id, batch_id)
        done = 0
        for (servers, group), ends in commits_of_progress(query_id, sources).items():
            with KafkaIO(servers, client_id="hightide-spark-progress") as io:
                io.commit(group, {tp: (off, meta) for tp, off in ends.items()})
            with self._lock:
                self.commits += 1
            done += 1
        return done

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
