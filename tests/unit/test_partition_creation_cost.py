"""Issue 33: what creating a partition costs — nothing fsynced on the event loop, and the
work after a metadata write is that of the change, not of every partition."""

from __future__ import annotations

import uuid

from hightide.cluster.image import MetadataImage
from hightide.cluster.records import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord, TOPIC_RESOURCE
from hightide.log.config import LogConfig
from hightide.log.manager import LogManager
from hightide.log.storage import POSIX
from hightide.log.storage_faulty import Fault, FaultyStorage


def test_opening_a_new_partition_fsyncs_nothing(tmp_path):
    """A new partition's log (on a data dir without a clean-shutdown marker: a fresh one,
    or one after kill -9) opens without an fsync: its directory entries ride on a later
    flush. On the old code the open flushed the new log on the caller's thread (the event
    loop) because its empty last segment counted as recovered after an unclean stop."""
    disk = FaultyStorage(POSIX)
    logs = LogManager(str(tmp_path), disk)
    assert not logs.clean_shutdown
    disk.set_rules(Fault("fsync", "EIO"))  # any fsync fails
    plog = logs.open(("orders", 0), LogConfig(), 0)
    assert plog.log_end_offset == 0 and plog.offline_reason is None
    assert not plog.needs_flush(0)  # an empty new log: nothing the periodic policy must fsync
    disk.clear()
    plog.flush(0)  # the directory entries are made durable by the first flush
    logs.close()
    reopened = LogManager(str(tmp_path), POSIX)
    assert reopened.clean_shutdown
    assert reopened.open(("orders", 0), LogConfig(), 0).log_end_offset == 0
    reopened.close()


def _topic(image: MetadataImage, name: str, partitions: int, offset: int) -> int:
    tid = str(uuid.uuid4())
    image.apply(TopicRecord(name=name, topic_id=tid), offset)
    for p in range(partitions):
        offset += 1
        image.apply(PartitionRecord(partition=p, topic_id=tid, replicas=(1,), isr=(1,), leader=1, leader_epoch=0), offset)
    return offset + 1


def test_image_names_the_topics_a_change_touched():
    image = MetadataImage()
    off = _topic(image, "a", 2, 0)
    assert image.take_changes() is None  # a fresh image: look at everything
    off = _topic(image, "b", 3, off)
    image.apply(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="a", name="retention.ms", value="1"), off)
    assert image.take_changes() == {"a", "b"}
    assert image.take_changes() == set()
    image.apply(RemoveTopicRecord(topic_id=str(image.topics["b"].topic_id)), off + 1)
    assert image.take_changes() == {"b"}
