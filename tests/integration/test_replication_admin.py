"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments against the
single node, through confluent-kafka's and kafka-python's admin clients: one broker, one
replica per partition, so no election is ever needed and no partition can move."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka._model import ElectionType
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.integration


def test_elect_leaders_answers_election_not_needed(server, topic_name):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(election, [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]).result(10)
        assert len(result) == 2
        assert [e.code() for e in result.values()] == [84, 84]  # ELECTION_NOT_NEEDED
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name + "-none", 0)]).result(10)
    assert [e.code() for e in result.values()] == [3]  # UNKNOWN_TOPIC_OR_PARTITION
    # every partition: those not needing an election are left out, so nothing comes back
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(10) == {}


def test_reassignments_on_one_node(server, topic_name):
    creator = AdminClient({"bootstrap.servers": server.bootstrap})
    creator.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        tp = KTopicPartition(topic_name, 0)
        node = creator.list_topics(timeout=10).brokers.popitem()[0]
        result = admin.alter_partition_reassignments({tp: [node, node + 1]})
        assert result[tp] is InvalidReplicationAssignmentError  # only itself is registered
        assert admin.alter_partition_reassignments({tp: [node]})[tp] is None  # already there: nothing to do
        assert admin.alter_partition_reassignments({tp: None})[tp] is NoReassignmentInProgressError
        missing = KTopicPartition(topic_name, 5)
        assert admin.alter_partition_reassignments({missing: [node]})[missing] is UnknownTopicOrPartitionError
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments({topic_name: [0]}) == {}
    finally:
        admin.close()
