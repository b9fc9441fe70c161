"""The broker's metadata follower without sockets: what a Fetch answer means (plan,
whole_batches), and append → apply → notify against a real local MetadataLog, fed by a
fake controller channel; divergence truncates and resyncs without telling the broker
about the half-rebuilt image."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hightide.cluster.broker_records import NoOpRecord
from hightide.cluster.metadata_log import MetadataLog
from hightide.cluster.records import ConfigRecord, MetadataRecord, TopicRecord, encode
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch
from hightide.node.metadata_follower import (
    METADATA_TOPIC_ID,
    UNCOMMITTED_BACKOFF_MS,
    Append,
    Backoff,
    MetadataFollower,
    Truncate,
    plan,
    whole_batches,
)
from tests.waiting import async_wait_until


def batch(base: int, *records: MetadataRecord) -> bytes:
    return build_batch([(None, encode(r), [], 1000) for r in records], base_offset=base, partition_leader_epoch=0)


def topic(name: str) -> TopicRecord:
    return TopicRecord(name, str(uuid.uuid4()))


def partition(records: bytes = b"", hwm: int = 0, error: int = 0, diverging: int = -1) -> Any:
    return SimpleNamespace(error_code=error, high_watermark=hwm, records=records,
                           diverging_epoch=SimpleNamespace(epoch=0, end_offset=diverging))


def test_whole_batches_drops_a_partial_tail_and_batches_below_the_fetch_offset() -> None:
    a, b, c = batch(0, topic("a")), batch(1, topic("b"), topic("c")), batch(3, NoOpRecord())
    assert whole_batches(a + b + c[:20], 0) == a + b
    assert whole_batches(a + b + c, 1) == b + c
    assert whole_batches(a + b, 2) == b  # a batch containing the fetch offset is kept
    assert whole_batches(b"", 0) == b""


def test_plan_maps_answers_to_actions() -> None:
    data = batch(5, topic("a"))
    assert plan(partition(data, hwm=6), 5) == Append(data, 6)
    assert plan(partition(hwm=5), 5) == Backoff(0, 5)  # nothing new after the long-poll
    assert isinstance(plan(partition(error=ErrorCode.offset_out_of_range), 5), Truncate)
    assert plan(partition(hwm=3, diverging=3), 5).offset == 0  # type: ignore[union-attr]  # full resync
    # a high watermark behind the local copy (a new Raft leader that has not committed in its epoch yet) is
    # not a divergence: the local copy holds committed records only; ask again shortly
    assert plan(partition(hwm=2), 5) == Backoff(UNCOMMITTED_BACKOFF_MS, -1)
    assert plan(partition(hwm=-1), 5) == Backoff(UNCOMMITTED_BACKOFF_MS, -1)
    assert plan(partition(data + batch(6, topic("b")), hwm=6), 5) == Append(data, 6)  # offset 6 is not committed
    assert plan(partition(batch(6, topic("b")), hwm=6), 6) == Backoff(UNCOMMITTED_BACKOFF_MS, 6)
    backoff = plan(partition(error=ErrorCode.not_leader_or_follower), 5)
    assert isinstance(backoff, Backoff) and backoff.delay_ms > 0 and backoff.reason == "NOT_LEADER_OR_FOLLOWER"


class FakeChannel:
    """Answers metadata Fetches from a list of (records, high watermark) or errors."""

    def __init__(self) -> None:
        self.answers: asyncio.Queue[Any] = asyncio.Queue()
        self.requests: list[dict] = []

    async def connection(self) -> Any:
        return SimpleNamespace(pick_version=lambda key, hi, lo=0: 17, host="127.0.0.1", port=9093)

    async def request(self, api_key: int, version: int, body: dict, **kw: Any) -> Any:
        self.requests.append(body)
        p = await self.answers.get()
        p.partition_index = 0
        return SimpleNamespace(error_code=0, responses=[SimpleNamespace(partitions=[p])])

    def reset(self) -> None:
        pass


def follower(tmp_path: Path, channel: FakeChannel, events: list) -> MetadataFollower:
    log = MetadataLog(str(tmp_path), 0, True)
    return MetadataFollower(log, channel, 3, epoch=lambda: 11, cluster_id=lambda: "c1",  # type: ignore[arg-type]
                            on_applied=lambda a, c: events.append(("applied", a, c, sorted(log.image.topics))),
                            on_caught_up=lambda: events.append(("caught_up",)),
                            on_reset=lambda: events.append(("reset",)))


def test_appends_applies_before_the_next_fetch_and_reports_content_offsets(tmp_path: Path) -> None:
    asyncio.run(_appends(tmp_path))


async def _appends(tmp_path: Path) -> None:
    channel, events = FakeChannel(), []
    f = follower(tmp_path, channel, events)
    channel.answers.put_nowait(partition(batch(0, topic("a"), NoOpRecord()), hwm=2))
    f.start()
    try:
        await async_wait_until(lambda: len(channel.requests) == 2, 5, what="the second Fetch")
        # the second Fetch asks for offset 2: 0-1 are appended and applied before it was sent
        first, second = channel.requests
        assert first["topics"][0]["topic_id"] == METADATA_TOPIC_ID
        assert first["replica_state"] == {"replica_id": 3, "replica_epoch": 11}
        assert [r["topics"][0]["partitions"][0]["fetch_offset"] for r in (first, second)] == [0, 2]
        assert events == [("applied", 1, 0, ["a"]), ("caught_up",)]  # content offset 0: the NoOp is not content
        assert f.metadata.log.log_end_offset == 2 and f.metadata.image.offset == 1
        channel.answers.put_nowait(partition(batch(2, ConfigRecord(2, "a", "retention.ms", "5")), hwm=3))
        await async_wait_until(lambda: len(channel.requests) == 3, 5, what="the third Fetch")
        assert events[-1] == ("applied", 2, 2, ["a"]) and f.caught_up
        assert f.metadata.image.topics["a"].configs == {"retention.ms": "5"}
    finally:
        await f.close()
        f.metadata.close()


def test_divergence_truncates_and_resyncs_quietly(tmp_path: Path) -> None:
    asyncio.run(_divergence(tmp_path))


async def _divergence(tmp_path: Path) -> None:
    channel, events = FakeChannel(), []
    f = follower(tmp_path, channel, events)
    channel.answers.put_nowait(partition(batch(0, topic("a")) + batch(1, topic("b")), hwm=2))
    f.start()
    try:
        await async_wait_until(lambda: len(channel.requests) == 2, 5, what="the second Fetch")
        events.clear()
        # the controller's log was replaced (a new data dir with one topic): it ends at 1
        channel.answers.put_nowait(partition(hwm=1, diverging=1))
        await async_wait_until(lambda: len(channel.requests) == 3, 5, what="the Fetch after truncation")
        assert events == [("reset",)] and f.metadata.image.topics == {}
        assert channel.requests[-1]["topics"][0]["partitions"][0]["fetch_offset"] == 0  # from scratch
        assert channel.requests[-1]["topics"][0]["partitions"][0]["last_fetched_epoch"] == -1
        channel.answers.put_nowait(partition(batch(0, topic("c")), hwm=1))
        await async_wait_until(lambda: len(events) == 2, 5, what="the resync caught up")
        assert events[-1] == ("applied", 0, 0, ["c"])  # told once, with the whole new image
    finally:
        await f.close()
        f.metadata.close()
