"""Per-partition metadata costs (issue 33), the inputs of docs/cluster.md's estimate of a
10-broker cluster with 1,000,000 partitions: topics of ``--per-topic`` partitions with 3
replicas each over ``--brokers`` brokers (and one topic config), ``--partitions`` in all,
in one process:

* ``log_bytes_per_partition``: the metadata log as the controller writes it (one batch
  per CreateTopics of ``--topics-per-request`` topics: TopicRecord, PartitionRecords,
  ConfigRecord);
* ``snapshot_bytes_per_partition`` and ``snapshot_encode_us_per_partition`` (records →
  the snapshot file's bytes);
* ``snapshot_load_us_per_partition``: snapshot bytes → image (what a restarted or new
  controller, or a broker installing a snapshot, does before it serves);
* ``image_bytes_per_partition``: the Python heap the image holds (tracemalloc);
* ``image_copy_us_per_partition``: ``copy_image`` (a snapshot's capture, and the
  speculative image a new active controller makes at its first write);
* ``apply_us_per_record``: applying PartitionChangeRecords (a leader change) to the image.

    python bench/metadata_scale_costs.py [--partitions 200000] [--per-topic 10] [--out FILE]

Prints JSON. One process, wall-clock on this machine (2 shared cores). Not a test.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hightide.cluster.image import MetadataImage  # noqa: E402
from hightide.cluster.metadata_log import MetadataLog  # noqa: E402
from hightide.cluster.raft.messages import OffsetAndEpoch  # noqa: E402
from hightide.cluster.records import (  # noqa: E402
    TOPIC_RESOURCE, ConfigRecord, PartitionChangeRecord, PartitionRecord, TopicRecord)
from hightide.cluster.snapshot import copy_image, encode_snapshot, image_from_snapshot, image_records  # noqa: E402
from hightide.protocol.records import build_batch  # noqa: E402

from _limits import emit, git_revision, machine  # noqa: E402


def _topic_records(i: int, per_topic: int, brokers: int) -> list[Any]:
    tid = str(uuid.UUID(int=i + 1))
    name = f"topic-{i:07d}"
    recs: list[Any] = [TopicRecord(name, tid)]
    for p in range(per_topic):
        first = (i * per_topic + p) % brokers
        replicas = tuple((first + k) % brokers for k in range(3))
        recs.append(PartitionRecord(tid, p, replicas[0], 0, replicas, replicas))
    recs.append(ConfigRecord(TOPIC_RESOURCE, name, "retention.ms", "86400000"))
    return recs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--per-topic", type=int, default=10)
    ap.add_argument("--brokers", type=int, default=10)
    ap.add_argument("--topics-per-request", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n_topics = args.partitions // args.per_topic
    n = n_topics * args.per_topic
    log_bytes = 0
    image = MetadataImage()
    offset = 0
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t_apply = 0.0
    for i in range(0, n_topics, args.topics_per_request):
        recs = [r for t in range(i, min(n_topics, i + args.topics_per_request))
                for r in _topic_records(t, args.per_topic, args.brokers)]
        encoded = MetadataLog.encode_records(recs)
        log_bytes += len(build_batch([(k, v, [], 1_700_000_000_000) for k, v in encoded]))
        t0 = time.perf_counter()
        for r in recs:
            image.apply(r, offset)
            offset += 1
        t_apply += time.perf_counter() - t0
    gc.collect()
    image_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    t0 = time.perf_counter()
    copy_image(image)
    copy_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    records = image_records(image)
    data = encode_snapshot(records, OffsetAndEpoch(offset, 1), 1_700_000_000_000, 1_700_000_000_000)
    encode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = image_from_snapshot(data, OffsetAndEpoch(offset, 1))
    load_s = time.perf_counter() - t0
    assert len(loaded.topics) == n_topics
    changes = [PartitionChangeRecord(str(uuid.UUID(int=(i % n_topics) + 1)), i % args.per_topic, leader=(i % 3))
               for i in range(min(n, 100_000))]
    t0 = time.perf_counter()
    for r in changes:
        image.apply(r, offset)
        offset += 1
    change_s = time.perf_counter() - t0
    change_bytes = len(build_batch([(k, v, [], 1_700_000_000_000) for k, v in MetadataLog.encode_records(changes[:1])]))
    out = {"machine": machine(), "revision": git_revision(), "partitions": n, "per_topic": args.per_topic,
           "replicas": 3, "brokers": args.brokers, "topics_per_request": args.topics_per_request,
           "log_bytes_per_partition": round(log_bytes / n, 1),
           "one_leader_change_batch_bytes": change_bytes,
           "snapshot_bytes": len(data), "snapshot_bytes_per_partition": round(len(data) / n, 1),
           "snapshot_encode_us_per_partition": round(encode_s / n * 1e6, 2),
           "snapshot_load_s": round(load_s, 3), "snapshot_load_us_per_partition": round(load_s / n * 1e6, 2),
           "image_bytes_per_partition": round(image_bytes / n, 1),
           "image_copy_s": round(copy_s, 3), "image_copy_us_per_partition": round(copy_s / n * 1e6, 3),
           "apply_create_us_per_partition": round(t_apply / n * 1e6, 2),
           "apply_us_per_partition_change": round(change_s / len(changes) * 1e6, 2)}
    emit(out, args.out)


if __name__ == "__main__":
    main()
