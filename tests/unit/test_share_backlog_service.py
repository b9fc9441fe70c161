"""The backlog share assignor wired through ``broker.share_groups`` in an in-process broker:
the group config picks it, the heartbeat carries a snapshot of the share partitions'
backlogs (share.auto.offset.reset's start before any fetch), so the partitions holding
the records get more members; a ``simple`` group on the same records does not."""

from __future__ import annotations

import asyncio
import time

import pytest

from hightide import Broker, BrokerConfig
from hightide.cluster.controller import NewTopic
from hightide.group.share_group import ShareHeartbeatRequest
from hightide.protocol.records import build_batch, validate_batches


@pytest.fixture
def env(tmp_path):
    loop = asyncio.new_event_loop()
    b = Broker(BrokerConfig.load(overrides={"offsets.topic.num.partitions": 1,
                                            "group.share.assignors": "simple,backlog"}),
               data_dir=str(tmp_path), listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    _, records = b.controller.create_topics(b.image, [NewTopic("t", 4)])
    loop.run_until_complete(b.metadata_writer.commit_metadata(records))
    now = int(time.time() * 1000)
    for partition, n in ((0, 900), (1, 30), (2, 30), (3, 40)):  # 90% of the records in partition 0
        batch = bytearray(build_batch([(None, b"v", [], now)] * n))
        b.hosted.partition_log("t", partition).append(batch, validate_batches(batch), now)
    yield loop, b
    loop.run_until_complete(b.stop())
    loop.close()


def _configure(loop, b: Broker, group: str, **configs: str) -> None:
    code, msg, records = b.controller.alter_group_configs(
        b.image, group, [(k.replace("_", "."), 0, v) for k, v in configs.items()])
    assert code == 0, msg
    loop.run_until_complete(b.metadata_writer.commit_metadata(records))


def _holders(loop, b: Broker, group: str, members: int) -> dict[int, int]:
    epochs = {}
    for i in range(members):
        r = loop.run_until_complete(b.share_groups.heartbeat(
            ShareHeartbeatRequest(group, f"m{i}", 0, None, ("t",)), int(time.time() * 1000)))
        assert r.error_code == 0, r
        epochs[f"m{i}"] = r.member_epoch
    out: dict[int, int] = {}
    for m, e in epochs.items():  # every member picks up the final target
        r = loop.run_until_complete(b.share_groups.heartbeat(
            ShareHeartbeatRequest(group, m, e, None, None), int(time.time() * 1000)))
        assert r.error_code == 0, r
    desc = b.share_groups.describe(group)
    for member in desc["members"]:
        for _, _, parts in member["assignment"]:
            for p in parts:
                out[p] = out.get(p, 0) + 1
    return out


def test_backlog_group_gets_members_in_proportion(env) -> None:
    loop, b = env
    _configure(loop, b, "busy", share_auto_offset_reset="earliest", share_assignor="backlog")
    assert b.share_groups.assignor("busy") == "backlog"
    snap = b.share_groups.backlogs("busy")
    holders = _holders(loop, b, "busy", 4)
    assert b.share_groups.describe("busy")["assignor_name"] == "backlog"
    assert holders[0] == 4 and all(holders[p] >= 1 for p in (1, 2, 3)), holders
    assert {tp[1]: v.lag for tp, v in b.share_groups.backlogs("busy").items()} == {0: 900, 1: 30, 2: 30, 3: 40}
    assert snap == {}  # before the first heartbeat the group had no partitions


def test_simple_stays_the_default(env) -> None:
    loop, b = env
    _configure(loop, b, "plain", share_auto_offset_reset="earliest")
    assert b.share_groups.assignor("plain") == "simple"
    assert _holders(loop, b, "plain", 4) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert b.share_groups.describe("plain")["assignor_name"] == "simple"
