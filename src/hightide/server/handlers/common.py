"""Helpers shared by the data-plane handlers."""

from __future__ import annotations

from ...protocol.errors import ErrorCode

LEADER_EPOCH = 0  # single node: every partition is in leader epoch 0


def check_leader_epoch(current_leader_epoch: int, partition_epoch: int = LEADER_EPOCH) -> ErrorCode:
    """Kafka's leader-epoch fencing: a client that knows a newer epoch gets
    UNKNOWN_LEADER_EPOCH, an older one FENCED_LEADER_EPOCH; -1 skips the check."""
    if current_leader_epoch < 0 or current_leader_epoch == partition_epoch:
        return ErrorCode.none
    if current_leader_epoch > partition_epoch:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.fenced_leader_epoch


def resolve_partition(broker, topic: str, partition: int):
    """(log, error). The error is UNKNOWN_TOPIC_OR_PARTITION when the topic or the
    partition does not exist."""
    t = broker.image.topics.get(topic)
    if t is None or partition not in t.partitions:
        return None, ErrorCode.unknown_topic_or_partition
    plog = broker.partition_log(topic, partition)
    if plog is None:
        return None, ErrorCode.unknown_topic_or_partition
    return plog, ErrorCode.none
