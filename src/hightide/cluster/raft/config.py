"""Timeouts of the Raft core, with Kafka's names and defaults (``controller.quorum.*``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .voters import VoterSet

__all__ = ["RaftConfig", "UNSAFE_RULES"]

#: Deliberately broken rules, for tests only: each lets the simulator show that its
#: invariants catch a real bug. Never set outside tests.
UNSAFE_RULES = frozenset({
    "hw_any_voter",          # HW = the highest offset any single voter reached
    "vote_without_persist",  # grant a vote without writing it to the quorum-state file
    "ack_unflushed",         # fetch (acknowledge) and count offsets before their fsync
    "hw_any_epoch",          # advance the HW before an entry of the leader's epoch commits
})


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """``election_timeout_ms`` (controller.quorum.election.timeout.ms, 1000): a voter
    without a leader waits a random time in [t, 2t) before starting an election.
    ``fetch_timeout_ms`` (controller.quorum.fetch.timeout.ms, 2000): a follower that has
    not fetched successfully for this long starts an election; a leader resigns when a
    majority has not fetched within 1.5 times it (check quorum).
    ``election_backoff_max_ms`` (controller.quorum.election.backoff.max.ms, 1000),
    ``request_timeout_ms`` (controller.quorum.request.timeout.ms, 2000),
    ``retry_backoff_ms`` (controller.quorum.retry.backoff.ms, 20),
    ``fetch_max_wait_ms`` (the leader parks an empty fetch up to this long, 500).
    ``pre_vote``: start elections with a pre-vote round (KIP-996, Kafka 4); False is
    Kafka 3's behaviour (a voter whose timer expires becomes a candidate at once).
    ``leader_change_payload(leader_id, epoch, voters, granting_voters)`` builds the payload of the
    LeaderChange entry a new leader appends (production: a control record batch with
    Kafka's LeaderChangeMessage, as :mod:`hightide.cluster.raft.wire` expects every
    payload to be a record batch); None uses a small JSON document (tests, simulator).
    ``voters_payload(voters, epoch)`` builds (payload, offset count) of a voter-set control
    entry (KIP-853; production: a control batch of two records, Kafka's KRaftVersionRecord
    and VotersRecord, :func:`~.batches.voters_entry`) and ``read_voters(data)`` reads back the last voter set
    written in ``data`` (a control entry's payload, or a snapshot), None if none; None
    (both) uses :mod:`.voters`' text form (tests, simulator).
    """

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    fetch_max_entries: int = 64
    snapshot_chunk_bytes: int = 1 << 20
    pre_vote: bool = True
    leader_change_payload: Callable[[int, int, Sequence[int], Sequence[int]], bytes] | None = None
    voters_payload: Callable[[VoterSet, int], tuple[bytes, int]] | None = None
    read_voters: Callable[[bytes], VoterSet | None] | None = None
    unsafe: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        unknown = self.unsafe - UNSAFE_RULES
        if unknown:
            raise ValueError(f"unknown unsafe rules: {sorted(unknown)}")

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms * 3 // 2
