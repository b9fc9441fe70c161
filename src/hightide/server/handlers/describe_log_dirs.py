"""DescribeLogDirs (key 35, v1-5): the log directories of the answering broker and the
size of each partition log in them (what ``kafka-log-dirs.sh`` and UIs show as topic
sizes), as Kafka's ``ReplicaManager.describeLogDirs``.

* **Authorization**: DESCRIBE on the cluster; otherwise no results and (v3+) the
  top-level error CLUSTER_AUTHORIZATION_FAILED (v1/v2 have no top-level error: the
  answer is just empty).
* **Log dirs**: hightide has one data directory per node; it is the one log dir,
  answered with its absolute path and (v4+) the total and usable bytes of its volume
  (``statvfs``: blocks and blocks available to unprivileged users, Kafka's
  ``FileStore.getTotalSpace``/``getUsableSpace``; read off the event loop). If that
  fails the dir is answered with KAFKA_STORAGE_ERROR and no topics. v5's
  ``IsCordoned`` is always false (hightide never cordons a dir).
* **Partitions**: every open partition log of this node (leader or follower replica;
  not the metadata log), or with a ``Topics`` list only those partitions among them
  (null: all; a partition not hosted here is simply absent; topics left without
  partitions are not listed). Per partition: ``PartitionSize`` = the bytes of its
  ``.log`` segment files, ``OffsetLag`` = max(high watermark − log end offset, 0) of
  this replica's log — Kafka's definition for a current log; since a replica's high
  watermark never passes its own log end offset it is 0, for a follower too —
  and ``IsFutureKey`` false (no AlterReplicaLogDirs: no future logs).

In a cluster each broker answers for its own logs: admin clients ask every broker.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import authorize_cluster
from ..context import RequestContext
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.describe_log_dirs import DescribeLogDirsRequest
    from ...log.partition_log import PartitionLog

#: How long the volume's size may take to read before the dir is answered without it.
STATVFS_TIMEOUT_S = 5.0


def offset_lag(high_watermark: int, log_end_offset: int) -> int:
    """Kafka's ``getLogEndOffsetLag`` for a current (not future) log."""
    return max(high_watermark - log_end_offset, 0)


def log_dir_topics(logs: Iterable[tuple[tuple[str, int], PartitionLog]],
                   wanted: Collection[tuple[str, int]] | None) -> list[dict[str, Any]]:
    """The ``Topics`` of a log dir holding ``logs``: those in ``wanted`` (None: all),
    grouped by topic, sorted by name and partition; topics without a wanted partition
    are left out."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), plog in sorted(logs, key=lambda x: x[0]):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "partition_size": plog.size_bytes,
            "offset_lag": offset_lag(plog.high_watermark, plog.log_end_offset), "is_future_key": False})
    return [{"name": t, "partitions": parts} for t, parts in by_topic.items()]


async def volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding ``path``, read in a worker thread.
    Raises OSError (TimeoutError included) when it cannot be read in time."""
    async with asyncio.timeout(STATVFS_TIMEOUT_S):
        st = await asyncio.to_thread(os.statvfs, path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handles(35, 1, 5)
async def handle(ctx: RequestContext, req: DescribeLogDirsRequest) -> Any:
    cls = response_schema(35, ctx.version)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return materialize(cls, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                 "results": []})
    wanted = None if req.topics is None else {(t.topic, int(p)) for t in req.topics for p in t.partitions}
    logs = ctx.services.logs
    path = logs.data_dir
    result: dict[str, Any] = {"log_dir": path, "is_cordoned": False}
    try:
        total, usable = await volume_bytes(path)
    except OSError:
        result.update(error_code=ErrorCode.kafka_storage_error, topics=[])
    else:  # the logs as they are after the await
        result.update(error_code=ErrorCode.none, topics=log_dir_topics(logs.hosted_logs(), wanted),
                      total_bytes=total, usable_bytes=usable)
    return materialize(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]})
