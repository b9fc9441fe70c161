"""KRaft metadata snapshots on real processes: with a tiny
``metadata.log.max.record.bytes.between.snapshots`` the controller snapshots and trims
its log while topics are created; a broker that joins afterwards (empty metadata copy,
fetch offset 0 below the controller's log start) catches up through FetchSnapshot and
sees every topic; a broker snapshots its own copy and restarts from it; a restarted
controller loads its image from the snapshot plus the log after it. FetchSnapshot's
answers on a controller-only process."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from hightide.client import AdminClient
from hightide.cluster.raft.messages import OffsetAndEpoch
from hightide.cluster.snapshot import SnapshotStore, image_from_snapshot

from .test_controller import Controller

N_TOPICS = 120
SNAPSHOT_BYTES = 4096


def metadata_dir(node: Any) -> Path:
    return Path(node.spec.data_dir) / "__cluster_metadata-0"


def latest_snapshot(node: Any) -> tuple[OffsetAndEpoch, set[str]] | None:
    """The node's latest snapshot file and the topics in it (None: no snapshot yet)."""
    store = SnapshotStore(str(metadata_dir(node)))
    try:
        sid = store.latest()
        if sid is None:
            return None
        return sid, set(image_from_snapshot(store.read(sid), sid).topics)
    except OSError:  # replaced by a newer one meanwhile
        return None


async def topics_on(address: str) -> set[str]:
    async with AdminClient(address, request_timeout_s=10.0) as admin:
        return set(await admin.list_topics())


async def create(address: str, names: list[str]) -> None:
    async with AdminClient(address, request_timeout_s=30.0) as admin:
        for i in range(0, len(names), 20):
            await admin.create_topics(names[i:i + 20])


def test_snapshot_trim_catch_up_and_restart(cluster: Any) -> None:
    c = cluster(2, settings={"metadata.log.max.record.bytes.between.snapshots": SNAPSHOT_BYTES})
    late = c.node(1)
    late.stop()  # joins afterwards with an empty metadata copy
    shutil.rmtree(metadata_dir(late))
    names = [f"snap-{i:03d}" for i in range(N_TOPICS)]
    c.run(create(c.address(0), names))

    # The controller snapshots (its image holds every topic) and trims: the log starts at
    # the snapshot's end offset, older snapshots are gone.
    ctl = c.controller
    found = c.wait_until(lambda: (s := latest_snapshot(ctl)) is not None and set(names) <= s[1] and s, 30,
                         what="a controller snapshot holding every topic")
    sid = found[0]
    assert sid.offset > 0
    files = [n for n in os.listdir(metadata_dir(ctl)) if n.endswith(".checkpoint")]
    assert len(files) >= 1 and all(n.endswith(".checkpoint") for n in files)
    c.wait_until(lambda: int((metadata_dir(ctl) / "log-start-offset").read_text() or 0) >= sid.offset, 30,
                 what="the controller's log start offset at the snapshot")
    assert "metadata snapshot" in ctl.output()

    # The late broker fetches at 0 < log start: SnapshotId, FetchSnapshot, then the log.
    t0 = time.monotonic()
    late.start().wait_listening()
    c.wait_until(lambda: set(names) <= c.run(topics_on(c.address(1))), 60, what="every topic on the late broker")
    catch_up_s = time.monotonic() - t0
    c.wait_unfenced([0, 1])
    out = late.output()
    assert "loading snapshot" in out and "loaded metadata snapshot" in out, out[-3000:]
    assert any(n.endswith(".checkpoint") for n in os.listdir(metadata_dir(late)))
    print(f"late broker caught up through FetchSnapshot in {catch_up_s:.2f} s (snapshot {sid})")

    # A broker that followed all along snapshots its own copy (as Kafka's brokers do) and
    # a restart loads it.
    early = c.node(0)
    c.wait_until(lambda: latest_snapshot(early) is not None, 30, what="broker 0's own snapshot")
    early.restart()
    c.wait_unfenced([0, 1])
    assert "metadata image loaded: snapshot" in early.output().split("--- start 2")[-1]

    # A restarted controller loads the snapshot plus the log after it, and keeps serving.
    ctl.restart(kill=True)
    c.wait_unfenced([0, 1])
    assert "metadata image loaded: snapshot" in ctl.output().split("--- start 2")[-1]
    c.run(create(c.address(1), ["after-restart"]))
    for broker in (0, 1):
        c.wait_until(lambda b=broker: {"after-restart", *names} <= c.run(topics_on(c.address(b))), 30,
                     what=f"every topic on broker {broker} after the controller restart")


def fetch_snapshot(conn: Any, sid: OffsetAndEpoch, position: int, *, max_bytes: int = 1 << 20,
                   epoch: int | None = None, topic: str = "__cluster_metadata", version: int = 1,
                   cluster_id: str | None = None) -> Any:
    """FetchSnapshot (59); ``epoch`` (CurrentLeaderEpoch) by default the controller's."""
    if epoch is None:
        epoch = conn.leader_epoch()
    return conn.request(59, version, {
        "cluster_id": cluster_id if cluster_id is not None else conn.cluster_id, "replica_id": -1,
        "max_bytes": max_bytes, "topics": [{"name": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": epoch, "position": position, "replica_directory_id": None,
            "snapshot_id": {"end_offset": sid.offset, "epoch": sid.epoch}}]}]})


def test_fetch_below_log_start_and_fetch_snapshot_rules(cluster: Any) -> None:
    """Kafka's answers, on a controller-only process (NoOps off: nothing else is written)."""
    c = cluster(0, wait=False, metadata_max_idle_interval_ms=0, broker_session_timeout_ms=600_000,
                metadata_log_max_record_bytes_between_snapshots=SNAPSHOT_BYTES)
    with Controller(c.bootstrap_controller, c.cluster_id, c.controllers[0].spec.node_id) as conn:
        conn.up(0)  # a registered broker to place partitions on (its session outlives the test)
        for i in range(60):
            assert conn.create_topic(f"t{i}").error_code == ErrorCode.none
        seen: list[Any] = []

        def settled() -> OffsetAndEpoch | None:
            """The latest snapshot once no write is in progress and it stayed the same."""
            s = latest_snapshot(c.controller)
            busy = any(n.endswith(".part") for n in os.listdir(metadata_dir(c.controller)))
            seen.append(None if s is None or busy else s[0])
            return seen[-1] if len(seen) >= 3 and seen[-1] is not None and seen[-1] == seen[-2] == seen[-3] else None

        sid = c.wait_until(settled, 30, what="the controller's last snapshot written")
        data = (metadata_dir(c.controller) / f"{sid.offset:020d}-{sid.epoch:010d}.checkpoint").read_bytes()

        # A Fetch below the log start: error NONE, SnapshotId, no records; at the start: records.
        part = conn.fetch(0).responses[0].partitions[0]
        assert (part.error_code, part.snapshot_id.end_offset, part.snapshot_id.epoch) == (0, sid.offset, sid.epoch)
        assert not part.records and part.log_start_offset == sid.offset
        part = conn.fetch(sid.offset).responses[0].partitions[0]
        assert part.snapshot_id.end_offset == -1 and part.high_watermark >= sid.offset

        # Chunks by position reassemble the file (v0 and v1); Size is the file size.
        for version in (0, 1):
            got = b""
            while len(got) < len(data):
                resp = fetch_snapshot(conn, sid, len(got), max_bytes=1000, version=version)
                p = resp.topics[0].partitions[0]
                assert (resp.error_code, p.error_code, p.size, p.position) == (0, 0, len(data), len(got))
                assert 0 < len(p.unaligned_records) <= 1000
                got += bytes(p.unaligned_records)
            assert got == data

        def code(**kw: Any) -> tuple[int, int]:
            resp = fetch_snapshot(conn, kw.pop("sid", sid), kw.pop("position", 0), **kw)
            return int(resp.error_code), int(resp.topics[0].partitions[0].error_code) if resp.topics else -1

        assert code(sid=OffsetAndEpoch(sid.offset - 1, 0)) == (0, ErrorCode.snapshot_not_found)
        assert code(position=len(data)) == (0, ErrorCode.position_out_of_range)
        assert code(position=-1) == (0, ErrorCode.position_out_of_range)
        assert code(epoch=conn.leader_epoch() + 1) == (0, ErrorCode.unknown_leader_epoch)
        assert code(epoch=-1) == (0, ErrorCode.fenced_leader_epoch)
        assert code(topic="other") == (0, ErrorCode.unknown_topic_or_partition)
        assert code(cluster_id="not-ours") == (ErrorCode.inconsistent_cluster_id, -1)
