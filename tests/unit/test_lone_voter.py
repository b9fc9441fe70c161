"""The lone voter (``hightide serve``: one process, one voter of ``__cluster_metadata``)
writes its metadata log through the Raft shell and core, as a controller quorum does.

* A data dir written by hightide before that (the serial metadata runtime: leader-epoch-0
  batches, a snapshot, no quorum-state; ``tests/fixtures/pre_raft_single_node.tar.gz``,
  made by ``tests/fixtures/make_pre_raft_data_dir.py`` with the old code) starts with all
  its topics, records and committed offsets, takes new writes, and restarts again.
* On the in-memory storage engine a lone-voter broker starts and serves, its quorum-state
  goes through that engine (nothing but the lock file on the real disk), and a topic
  whose creation was acknowledged survives a power cut (``MemoryStorage.crash``).
* Snapshots: the lone voter snapshots its image and trims its log behind it as before.
"""

from __future__ import annotations

import asyncio
import json
import os
import tarfile
from pathlib import Path

from hightide.cluster.controller import NewTopic
from hightide.config import BrokerConfig
from hightide.log.storage import read_small_file
from hightide.log.storage_memory import MemoryStorage
from hightide.server.broker import Broker
from tests.rawkafka import RawClient
from tests.reliability.embedded import EmbeddedBroker
from tests.waiting import async_wait_until

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pre_raft_single_node.tar.gz"


def _extract(tmp_path: Path) -> str:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return str(tmp_path / "data")


def _committed(bootstrap: str) -> dict[int, int]:
    with RawClient(bootstrap) as c:
        r = c.request(9, 7, {"group_id": "g", "topics": [{"name": "events", "partition_indexes": [0, 1]}],
                             "require_stable": False})
        assert r.error_code == 0, r
        return {p.partition_index: p.committed_offset for p in r.topics[0].partitions}


def _quorum_state(data_dir: str) -> dict:
    return json.loads(Path(data_dir, "__cluster_metadata-0", "quorum-state").read_text())


def test_a_data_dir_written_before_the_metadata_log_went_through_raft_starts_whole(tmp_path: Path) -> None:
    data_dir = _extract(tmp_path)
    assert not os.path.exists(os.path.join(data_dir, "__cluster_metadata-0", "quorum-state"))

    async def run() -> None:
        async with Broker(data_dir=data_dir, listen=("127.0.0.1", 0)) as b:
            assert sorted(t for t in b.image.topics if not t.startswith("__")) == ["audit", "events"]
            assert len(b.image.topics["events"].partitions) == 2
            assert b.metadata_runtime is not None and b.metadata_runtime.shell.epoch == 1  # above the old epoch 0
            assert [b.hosted.partition_log("events", p).log_end_offset for p in (0, 1)] == [5, 3]
            await async_wait_until(lambda: asyncio.to_thread(_committed, f"127.0.0.1:{b.port}"), 20,
                                   what="group g's offsets loaded")
            assert await asyncio.to_thread(_committed, f"127.0.0.1:{b.port}") == {0: 4, 1: 2}
            created = await b.metadata_writer.create_topics([NewTopic("later", 1, 1)])
            assert created[0].error_code == 0
        assert _quorum_state(data_dir)["currentVoters"] == [{"voterId": 1}]
        async with Broker(data_dir=data_dir, listen=("127.0.0.1", 0)) as b:
            assert sorted(t for t in b.image.topics if not t.startswith("__")) == ["audit", "events", "later"]
            assert b.metadata_runtime is not None and b.metadata_runtime.shell.epoch == 2
            assert [b.hosted.partition_log("events", p).log_end_offset for p in (0, 1)] == [5, 3]
            await async_wait_until(lambda: asyncio.to_thread(_committed, f"127.0.0.1:{b.port}"), 20,
                                   what="group g's offsets loaded")
            assert await asyncio.to_thread(_committed, f"127.0.0.1:{b.port}") == {0: 4, 1: 2}
    asyncio.run(run())


def test_a_lone_voter_on_memory_storage_serves_and_keeps_an_acknowledged_topic_through_a_power_cut(
        tmp_path: Path) -> None:
    disk = MemoryStorage()
    data_dir = tmp_path / "data"
    srv = EmbeddedBroker(data_dir, disk).start()
    try:
        with RawClient(srv.bootstrap) as c:
            r = c.request(19, 7, {"topics": [{"name": "kept", "num_partitions": 3, "replication_factor": 1,
                                              "assignments": [], "configs": []}],
                                  "timeout": 30000, "validate_only": False})
            assert r.topics[0].error_code == 0
            md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
            assert [t.name for t in md.topics] == ["kept"]
    finally:
        srv.kill()
    # the quorum-state went through the engine: on the real disk there is only the lock
    assert sorted(os.listdir(data_dir)) == [".lock"]
    state = json.loads(read_small_file(disk, str(data_dir / "__cluster_metadata-0" / "quorum-state")))
    assert (state["leaderEpoch"], state["leaderId"], state["votedId"]) == (1, 1, 1)
    disk.crash()  # a power cut: only what was fsynced is left
    srv2 = EmbeddedBroker(data_dir, disk, port=srv.port).start()
    try:
        image = srv2.call(lambda: srv2.broker.image)
        assert sorted(image.topics) == ["kept"] and len(image.topics["kept"].partitions) == 3
        assert srv2.call(lambda: srv2.broker.metadata_runtime.shell.epoch) == 2  # type: ignore[union-attr]
    finally:
        srv2.stop()


def test_the_lone_voter_snapshots_its_image_and_trims_its_log(tmp_path: Path) -> None:
    config = BrokerConfig()
    config.set("metadata.log.max.record.bytes.between.snapshots", "1")

    async def run() -> None:
        async with Broker(config, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            for i in range(3):
                await b.metadata_writer.create_topics([NewTopic(f"t{i}", 1, 1)])
            assert b.metadata is not None and b.metadata_runtime is not None
            metadata, shell = b.metadata, b.metadata_runtime.shell
            await async_wait_until(lambda: metadata.snapshot_id is not None
                                   and metadata.snapshot_id.offset == shell.committed_end, 20,
                                   what="a snapshot at the committed end")
            sid = metadata.snapshot_id
            assert sid is not None and sid.epoch == shell.epoch == 1
            assert metadata.log.log_start_offset == sid.offset and shell.core.log.start_offset == sid.offset
        async with Broker(config, data_dir=str(tmp_path), listen=("127.0.0.1", 0)) as b:
            assert sorted(b.image.topics) == ["t0", "t1", "t2"]
    asyncio.run(run())
