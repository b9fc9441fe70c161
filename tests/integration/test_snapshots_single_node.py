"""Metadata snapshots on the single node (combined mode, one voter): with a tiny
``metadata.log.max.record.bytes.between.snapshots`` ``hightide serve`` snapshots its
metadata image and trims the metadata log while topics are created, and a restart
(kill -9) loads the image from the snapshot plus the log after it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from hightide.client import AdminClient
from hightide.cluster.snapshot import SnapshotStore

from ..waiting import wait_until

pytestmark = pytest.mark.integration


async def create(bootstrap: str, names: list[str]) -> set[str]:
    async with AdminClient(bootstrap, request_timeout_s=30.0) as admin:
        for i in range(0, len(names), 20):
            await admin.create_topics(names[i:i + 20])
        return set(await admin.list_topics())


async def topics(bootstrap: str) -> set[str]:
    async with AdminClient(bootstrap, request_timeout_s=30.0) as admin:
        return set(await admin.list_topics())


def test_single_node_snapshots_trims_and_restarts_from_the_snapshot(fresh_server) -> None:
    srv = fresh_server("--set", "metadata.log.max.record.bytes.between.snapshots=4096")
    names = [f"single-{i:03d}" for i in range(80)]
    assert set(names) <= asyncio.run(create(srv.bootstrap, names))
    store = SnapshotStore(str(Path(srv.data_dir) / "__cluster_metadata-0"))
    sid = wait_until(lambda: store.latest(), 30, what="a metadata snapshot")
    assert [n for n in os.listdir(store.directory) if n.endswith(".checkpoint")] != []
    srv.kill9()
    srv2 = fresh_server("--set", "metadata.log.max.record.bytes.between.snapshots=4096", data_dir=srv.data_dir,
                        port=srv.port)
    assert set(names) <= asyncio.run(topics(srv2.bootstrap))
    assert "metadata image loaded: snapshot" in srv2.output() and store.latest().offset >= sid.offset
    assert srv2.stop() == 0
