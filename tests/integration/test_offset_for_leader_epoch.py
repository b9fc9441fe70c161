"""OffsetForLeaderEpoch (23) answered from the partition's leader-epoch cache, as Kafka's
Partition.lastOffsetForLeaderEpoch: the largest epoch <= the requested one and where it
ends; -1/-1 (no error) for an epoch newer than the log's latest or for -1. The old stub
answered (0, log end) for any epoch >= 0."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ..rawkafka import RawClient
from .clients import Rec, confluent_produce

pytestmark = pytest.mark.integration


def test_offset_for_leader_epoch_from_the_epoch_cache(server, topic_name):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    with RawClient(server.bootstrap) as c:
        def ask(*epochs: int) -> list[tuple[int, int, int]]:
            r = c.request(23, 4, {"replica_id": -1, "topics": [{"topic": topic_name, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": e} for e in epochs]}]})
            return [(p.error_code, p.leader_epoch, p.end_offset) for p in r.topics[0].partitions]

        assert ask(0) == [(0, 0, 0)]  # the leader's epoch starts at the log end even before any append
        confluent_produce(server.bootstrap, topic_name, [Rec(0, None, b"x", (), 1)] * 7)
        assert ask(0, 5, -1) == [(0, 0, 7), (0, -1, -1), (0, -1, -1)]
