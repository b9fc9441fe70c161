"""What DescribeQuorum (55) reports about the quorum, read from a leader's core.

Mirrors the fields of DescribeQuorumResponse's partition data (Kafka's
``kafka-metadata-quorum describe --status/--replication``): the leader, its epoch, the
high watermark and, for each voter and observer, its log end offset (the last offset it
fetched from, for others; the flushed end, for the leader itself) and the times of its
last fetch and of its last fetch at the leader's end (-1 when never), and (KIP-853) its
directory id ("" when unknown: a static voter). The observers are the replicas that
fetched from the leader through the core (controllers that are not voters; brokers
fetch the committed log outside it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .core import RaftCore

__all__ = ["ReplicaState", "QuorumInfo", "describe_quorum"]


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1
    directory_id: str = ""


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


def describe_quorum(core: RaftCore, now: int) -> QuorumInfo | None:
    """The quorum as the leader sees it; None on a non-leader (Kafka answers
    NOT_LEADER_OR_FOLLOWER there). Timestamps are in the core's clock (ms)."""
    if core.role != "leader":
        return None

    voter_set = core.voter_set

    def state(replica: int, offset: int) -> ReplicaState:
        node = voter_set.get(replica)
        directory = node.directory_id if node is not None else core.observer_directory.get(replica, "")
        if replica == core.node_id:
            return ReplicaState(replica, core.flushed_end, now, now, core.directory_id or directory)
        return ReplicaState(replica, offset, core.last_fetch_ms.get(replica, -1),
                            core.last_caught_up_ms.get(replica, -1), directory)

    voters = tuple(state(v, core.progress.get(v, -1) if v in core.last_fetch_ms else -1)
                   for v in core.voters)
    observers = tuple(state(o, off) for o, off in sorted(core.observer_progress.items()))
    return QuorumInfo(core.node_id, core.epoch, core.high_watermark, voters, observers)
