"""The single node's Metadata answer for every topic is written from bytes kept per topic
(issue 33): byte-identical to kio's encoder for every version, and a changed partition
is written afresh."""

from __future__ import annotations

import uuid

import pytest

from hightide.cluster.image import MetadataImage
from hightide.cluster.records import PartitionChangeRecord, PartitionRecord, TopicRecord
from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.metadata_response import TopicEntryCache, splice_topics
from hightide.server.handlers.metadata import topic_entry


def _image() -> MetadataImage:
    image = MetadataImage()
    off = 0
    for name, n in (("orders", 3), ("__consumer_offsets", 2), ("zeta", 1)):
        tid = str(uuid.uuid4())
        image.apply(TopicRecord(name=name, topic_id=tid), off)
        for p in reversed(range(n)):  # partitions applied out of order: the answer sorts them
            off += 1
            image.apply(PartitionRecord(topic_id=tid, partition=p, leader=1, leader_epoch=p, replicas=(1, 2),
                                        isr=(1,)), off)
        off += 1
    return image


def _body(topics: list, version: int) -> bytes:
    resp = materialize(response_schema(3, version), {
        "throttle_time": 0, "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
        "cluster_id": "abc", "controller_id": 1, "topics": topics, "cluster_authorized_operations": -2**31})
    return encode_response(3, version, 7, resp)[4:]


@pytest.mark.parametrize("version", range(13))
def test_spliced_answer_is_kios(version):
    image = _image()
    listed = sorted(image.topics.values(), key=lambda t: t.name)
    cache = TopicEntryCache()
    spliced = b"".join(splice_topics(_body([], version), version, [cache.entry(t, version) for t in listed]))
    assert spliced == _body([topic_entry(t) for t in listed], version)


def test_a_changed_partition_is_written_afresh():
    image = _image()
    cache = TopicEntryCache()
    t = image.topics["orders"]
    first = cache.entry(t, 12)
    assert cache.entry(t, 12) is first  # unchanged: the same bytes
    image.apply(PartitionChangeRecord(topic_id=str(t.topic_id), partition=1, leader=2), 100)
    again = cache.entry(t, 12)
    assert again != first
    listed = [image.topics["orders"]]
    assert b"".join(splice_topics(_body([], 12), 12, [cache.entry(x, 12) for x in listed])) == _body(
        [topic_entry(x) for x in listed], 12)
