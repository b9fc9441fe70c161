"""KRaft metadata snapshots on real processes: with a tiny
``metadata.log.max.record.bytes.between.snapshots`` the controller snapshots and trims
its log while topics are created; a broker that joins afterwards (empty metadata copy,
fetch offset 0 below the controller's log start) catches up through FetchSnapshot and
sees every topic; a restarted controller loads its image from the snapshot plus the log
after it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from hightide.client import AdminClient
from hightide.cluster.raft.messages import OffsetAndEpoch
from hightide.cluster.snapshot import SnapshotStore, image_from_snapshot

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

    # A restarted controller loads the snapshot plus the log after it, and keeps serving.
    ctl.restart(kill=True)
    c.wait_unfenced([0, 1])
    assert "metadata image loaded: snapshot" in ctl.output().split("--- start 2")[-1]
    c.run(create(c.address(1), ["after-restart"]))
    for broker in (0, 1):
        c.wait_until(lambda b=broker: {"after-restart", *names} <= c.run(topics_on(c.address(b))), 30,
                     what=f"every topic on broker {broker} after the controller restart")
