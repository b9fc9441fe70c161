"""A broker's per-batch metadata work follows the change (Broker.after_metadata_change).

An embedded broker hosts many topics; a metadata batch touching one topic is applied to
its image (as the metadata follower of a broker-only node applies it) and the hook runs:
only that topic's logs get their config refreshed and only its partitions' roles are
looked at, and its new config is in force. A batch of unknown extent (a change of the
brokers) still walks the whole image, and so does the first call (the catch-up).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from hightide import Broker, BrokerConfig
from hightide.cluster.broker_records import RegisterBrokerRecord
from hightide.cluster.image import TopicImage
from hightide.cluster.records import ConfigRecord, PartitionRecord, TOPIC_RESOURCE, TopicRecord

TOPICS = 40


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))  # type: ignore[arg-type]


class Counting:
    """Wraps the broker's hosted logs' refresh_topic_config and the replica manager's
    apply_image, recording their arguments."""

    def __init__(self, b: Broker) -> None:
        self.refreshed: list[str] = []
        self.role_walks: list[set[str] | None] = []
        refresh, apply_image = b.hosted.refresh_topic_config, b.replica_manager.apply_image

        def counting_refresh(topic: TopicImage) -> None:
            self.refreshed.append(topic.name)
            refresh(topic)

        def counting_apply(image: Any, topics: Any = None) -> None:
            self.role_walks.append(None if topics is None else set(topics))
            apply_image(image, topics)

        b.hosted.refresh_topic_config = counting_refresh  # type: ignore[method-assign]
        b.replica_manager.apply_image = counting_apply  # type: ignore[method-assign]

    def clear(self) -> None:
        self.refreshed.clear()
        self.role_walks.clear()


def test_a_batch_touching_one_topic_refreshes_only_that_topic(tmp_path: Path) -> None:
    async def body() -> None:
        cfg = BrokerConfig.load(overrides={"node.id": 1, "offsets.topic.num.partitions": 1})
        b = Broker(cfg, data_dir=str(tmp_path / "b1"), listen=("127.0.0.1", 0))
        await b.start()
        try:
            records: list[Any] = []
            for i in range(TOPICS):
                tid = str(uuid.uuid4())
                records += [TopicRecord(f"t{i}", tid),
                            PartitionRecord(str(tid), 0, 1, 0, (1,)), PartitionRecord(str(tid), 1, 1, 0, (1,))]
            await b.metadata_writer.commit_metadata(records)  # the own-write hook opens the logs
            assert b.logs is not None and b.logs.get(("t7", 1)) is not None
            counts = Counting(b)

            b.after_metadata_change()  # the first call (the catch-up): the whole image
            assert len(counts.refreshed) == len(b.image.topics) >= TOPICS
            assert counts.role_walks == [None]

            counts.clear()  # a batch touching t7 only
            b.image.apply(ConfigRecord(TOPIC_RESOURCE, "t7", "retention.ms", "12345"), b.image.offset + 1)
            b.after_metadata_change()
            assert counts.refreshed == ["t7"]
            assert counts.role_walks == [{"t7"}]
            log = b.logs.get(("t7", 1))
            assert log is not None and log.config.retention_ms == 12345

            counts.clear()  # a change of the brokers: who may lead changed, the whole image again
            b.image.apply(RegisterBrokerRecord(2, str(uuid.uuid4()), 7, fenced=False), b.image.offset + 1)
            b.after_metadata_change()
            assert len(counts.refreshed) == len(b.image.topics)
            assert counts.role_walks == [None]
        finally:
            await b.stop(grace_s=1)
    run(body())
