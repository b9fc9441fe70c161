"""The KRaft RPC payloads the Raft core exchanges, as small frozen dataclasses.

Each class mirrors the fields of the one ``__cluster_metadata`` partition of Kafka's
message (Vote 52, BeginQuorumEpoch 53, EndQuorumEpoch 54, Fetch 1, FetchSnapshot 59),
with Kafka's field names, so converting them to and from kio's classes at the shell is
field-for-field (that converter comes with the wiring into the metadata runtime). The
core keeps its own flat shapes because kio's messages nest one
partition inside topic tuples and carry fields the core never reads (cluster and
directory ids, topic ids, rack), and because the simulator builds hundreds of thousands
of them per run: a flat slotted dataclass is several times cheaper to build and compare.

The sender of a message is not a field: the transport hands it to the core as ``source``
(Kafka's connection knows the peer), except where Kafka's message names it
(``replica_id``, ``leader_id``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode", "OffsetAndEpoch", "Entry",
    "VoteRequest", "VoteResponse",
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse",
    "EndQuorumEpochRequest", "EndQuorumEpochResponse",
    "FetchRequest", "FetchResponse",
    "FetchSnapshotRequest", "FetchSnapshotResponse",
    "Message",
]

NONE = int(ErrorCode.none)


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """An (offset, epoch) pair: a log position (Kafka's ``OffsetAndEpoch``).

    Used for a snapshot id (``end_offset`` = the first offset *not* in the snapshot,
    ``epoch`` = the epoch of the last entry it covers) and for DivergingEpoch.
    """

    offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: a batch of ``count`` offsets written in leader ``epoch``.

    ``payload`` is opaque to the core (a record batch in production). ``control`` marks
    the core's own LeaderChange entry, which the application skips when applying.
    """

    epoch: int
    payload: bytes
    count: int = 1
    control: bool = False


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote (52), one partition: ``replica_id`` asks for a vote in ``replica_epoch``.

    ``pre_vote`` (KIP-996) asks "would you vote for me?" without changing anyone's
    epoch or vote; ``replica_epoch`` is then the sender's current epoch, not epoch + 1.
    """

    replica_id: int
    replica_epoch: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """Vote response: ``leader_id``/``leader_epoch`` are the responder's view (-1 none)."""

    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """BeginQuorumEpoch (53): the new leader announces itself to every voter."""

    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """EndQuorumEpoch (54): a resigning leader tells the voters, best successors first."""

    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Fetch (1) on ``__cluster_metadata``: ``fetch_offset`` is the fetcher's *flushed*
    end offset (so the leader learns what it holds durably), ``last_fetched_epoch`` the
    epoch of the entry before it. ``max_wait_ms`` is the long-poll bound.
    ``replica_directory_id``: the fetcher's directory id (KIP-853's ReplicaKey; "" unknown)."""

    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_wait_ms: int
    replica_directory_id: str = ""


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """Fetch response. At most one of ``diverging_epoch`` (truncate, then fetch again),
    ``snapshot_id`` (fetch that snapshot first) and ``records`` is set."""

    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    records: tuple[Entry, ...] = ()
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """FetchSnapshot (59): ``max_bytes`` of snapshot ``snapshot_id`` from ``position``."""

    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """FetchSnapshot response: ``unaligned_records`` are the bytes at ``position`` of a
    snapshot of ``size`` bytes."""

    error_code: int
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch
    size: int
    position: int
    unaligned_records: bytes


Message = (VoteRequest | VoteResponse | BeginQuorumEpochRequest | BeginQuorumEpochResponse
           | EndQuorumEpochRequest | EndQuorumEpochResponse | FetchRequest | FetchResponse
           | FetchSnapshotRequest | FetchSnapshotResponse)
