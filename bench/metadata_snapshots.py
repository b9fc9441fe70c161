"""Metadata snapshots: size and cost of a KRaft snapshot of the metadata image for N
topics (3 partitions and one config each), in one process over a real metadata log.

For each size: the metadata log holding the topic creations, then one snapshot through
the snapshotter (``capture_ms``: how long the event loop is held, a copy of the image;
``encode_write_ms``: records, batches, ``.part`` + fsync + rename in the worker thread),
``decode_ms`` (bytes → image, what a broker installing it does off the loop) and
``restart_ms`` (opening the metadata log again: load the snapshot, replay the tail) next
to ``replay_ms`` (opening a copy of the same log without the snapshot: a full replay).
``--churn`` adds that many config changes per topic to the log (the image stays the
same size): what a snapshot saves.

    .venv/bin/python bench/metadata_snapshots.py [--topics 100,1000,10000,1000] [--churn 0,0,0,10] [--out FILE]

Prints JSON (and writes it to ``--out``). Wall-clock on this machine (2 shared cores):
ratios matter more than values. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hightide.cluster.metadata_log import MetadataLog  # noqa: E402
from hightide.cluster.records import TOPIC_RESOURCE, ConfigRecord, PartitionRecord, TopicRecord, encode  # noqa: E402
from hightide.cluster.snapshot import image_from_snapshot  # noqa: E402
from hightide.protocol.records import build_batch, validate_batches  # noqa: E402
from hightide.node.snapshotter import Snapshotter  # noqa: E402


async def _never(timeout_s: float) -> None:
    await asyncio.sleep(0)


def _fill(ml: MetadataLog, n_topics: int, partitions: int, churn: int) -> None:
    for i in range(n_topics):
        tid = str(uuid.UUID(int=i + 1))
        name = f"topic-{i:06d}"
        recs: list[Any] = [TopicRecord(name, tid)]
        recs += [PartitionRecord(tid, p, p % 3, 0, (p % 3, (p + 1) % 3, (p + 2) % 3)) for p in range(partitions)]
        recs.append(ConfigRecord(TOPIC_RESOURCE, name, "retention.ms", "86400000"))
        batch = build_batch([(None, encode(r), [], 1000) for r in recs])
        res = ml.log.append(batch, validate_batches(batch, client_origin=False), 1000)
        ml.apply(recs, list(range(res.base_offset, res.base_offset + len(recs))))
    for round_ in range(churn):  # config changes: the log grows, the image does not
        for i in range(n_topics):
            rec = ConfigRecord(TOPIC_RESOURCE, f"topic-{i:06d}", "retention.ms", str(86400000 + round_))
            batch = build_batch([(None, encode(rec), [], 1000)])
            res = ml.log.append(batch, validate_batches(batch, client_origin=False), 1000)
            ml.apply([rec], [res.base_offset])
    ml.log.flush()


def measure(base: Path, n_topics: int, churn: int = 0, partitions: int = 3) -> dict[str, Any]:
    snap_dir, plain_dir = base / f"snap-{n_topics}-{churn}", base / f"plain-{n_topics}-{churn}"
    ml = MetadataLog(str(snap_dir), 0, True)
    _fill(ml, n_topics, partitions, churn)
    log_bytes = ml.log.size_bytes
    ml.close()
    shutil.copytree(snap_dir, plain_dir)
    ml = MetadataLog(str(snap_dir), 0, True)
    s = Snapshotter(ml, max_bytes=1, interval_ms=0, applied_end=lambda: ml.log.log_end_offset, wait_commit=_never)
    sid = asyncio.run(s.create())
    assert sid is not None
    data = ml.snapshots.read(sid)
    ml.close()
    t0 = time.monotonic()
    image_from_snapshot(data, sid)
    decode_s = time.monotonic() - t0
    t0 = time.monotonic()
    MetadataLog(str(snap_dir), 0, True).close()
    restart_s = time.monotonic() - t0
    t0 = time.monotonic()
    MetadataLog(str(plain_dir), 0, True).close()
    replay_s = time.monotonic() - t0
    return {"topics": n_topics, "partitions_per_topic": partitions, "config_changes_per_topic": churn,
            "records": int(s.last_stats["records"]),
            "log_bytes": log_bytes, "snapshot_bytes": len(data),
            "capture_ms": round(s.last_stats["capture_ms"], 1), "encode_write_ms": round(s.last_stats["write_ms"], 1),
            "decode_ms": round(decode_s * 1000, 1), "restart_ms": round(restart_s * 1000, 1),
            "replay_ms": round(replay_s * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="100,1000,10000,1000")
    parser.add_argument("--churn", default="0,0,0,10", help="config changes per topic, per --topics entry")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hightide-snapshots-"))
    try:
        rows = [measure(base, int(n), int(c)) for n, c in zip(args.topics.split(","), args.churn.split(","))]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = {"bench": "metadata_snapshots", "rows": rows}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
