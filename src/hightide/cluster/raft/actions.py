"""What the Raft core asks its driver to do, and the events the driver feeds it.

:meth:`RaftCore.step` returns an ordered list of actions. The driver carries them out in
order, with one rule that makes the protocol safe: a :class:`PersistElection` must be
durable (written and fsynced, as Kafka's ``quorum-state`` file) before any later
:class:`Send` of the same list leaves the node. :class:`Append`, :class:`Truncate` and
:class:`InstallSnapshot` change the log the driver keeps; :class:`Flush` asks for an
fsync, answered later by a :class:`FlushDone` event (the core never acknowledges, and a
leader never counts, an offset that is not flushed).
"""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Entry, Message, OffsetAndEpoch
from .voters import VoterNode

__all__ = [
    "ElectionState", "Send", "PersistElection", "Append", "Truncate", "Flush",
    "Committed", "InstallSnapshot", "TrimLog", "RoleChanged", "Action",
    "Received", "Tick", "ClientAppend", "FlushDone", "SnapshotCreated", "SendFailed", "Resign", "AddVoter", "RemoveVoter", "Event",
    "NotLeaderError", "VoterChangeError",
]


@dataclass(frozen=True, slots=True)
class ElectionState:
    """Kafka's ``quorum-state`` content: the epoch, whom this node voted for in it and
    the leader it knows (-1 for none)."""

    epoch: int
    voted_for: int = -1
    leader_id: int = -1


# --- actions ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` to node ``dest`` (best effort: the core retries on its timers).

    ``correlation_id`` pairs a response with its request, as Kafka's request header
    does: the transport hands it back on the :class:`Received` response.
    """

    dest: int
    message: Message
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class PersistElection:
    """Write the quorum-state file durably before any later Send in the same list."""

    state: ElectionState


@dataclass(frozen=True, slots=True)
class Append:
    """Write ``entries`` to the log starting at ``base_offset`` (the current end)."""

    base_offset: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    """Drop every entry at or after ``offset`` (DivergingEpoch)."""

    offset: int


@dataclass(frozen=True, slots=True)
class Flush:
    """fsync the log up to ``end_offset``, then feed back ``FlushDone(end_offset)``."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class Committed:
    """The high watermark moved to ``high_watermark``: offsets below it are committed."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """A follower fetched snapshot ``snapshot_id``: store ``data`` durably, drop the log
    (it now starts at ``snapshot_id.offset``) and load the application state from it."""

    snapshot_id: OffsetAndEpoch
    data: bytes


@dataclass(frozen=True, slots=True)
class TrimLog:
    """The log now starts at ``snapshot_id.offset``: entries below it may be deleted."""

    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class RoleChanged:
    """This node's role changed: one of unattached, prospective, candidate, leader,
    follower, resigned; ``leader_id`` is -1 when none is known."""

    role: str
    epoch: int
    leader_id: int


Action = (Send | PersistElection | Append | Truncate | Flush | Committed | InstallSnapshot
          | TrimLog | RoleChanged)


# --- events ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Received:
    """``message`` arrived from node ``source``; for a response, ``correlation_id`` is
    the one of the :class:`Send` that carried the request."""

    source: int
    message: Message
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: run the timers that are due (``RaftCore.next_deadline``)."""


@dataclass(frozen=True, slots=True)
class ClientAppend:
    """The application appends ``payloads`` (leader only; one entry each). ``counts``:
    how many offsets each entry holds (a record batch: its record count); empty means
    one each."""

    payloads: tuple[bytes, ...]
    counts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class FlushDone:
    """The fsync asked by ``Flush(end_offset)`` completed."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotCreated:
    """The application wrote a snapshot of its state up to ``snapshot_id.offset`` (a
    committed entry boundary); the core may trim the log behind it and serve it."""

    snapshot_id: OffsetAndEpoch
    data: bytes


@dataclass(frozen=True, slots=True)
class SendFailed:
    """The request sent under ``correlation_id`` to ``dest`` failed without an answer
    (connection refused or closed): the core retries after ``retry_backoff_ms``."""

    dest: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class Resign:
    """Graceful shutdown: a leader resigns with EndQuorumEpoch."""


@dataclass(frozen=True, slots=True)
class AddVoter:
    """AddRaftVoter (KIP-853) on the leader: append a voter set with ``node`` added. The
    core refuses with :class:`VoterChangeError` (nothing appended) or appends the entry;
    the change is done once the high watermark passes the log end offset after the step."""

    node: VoterNode


@dataclass(frozen=True, slots=True)
class RemoveVoter:
    """RemoveRaftVoter (KIP-853) on the leader: append a voter set without ``node_id``
    (whose directory id must be ``directory_id`` when both are known); as :class:`AddVoter`.
    A leader that removes itself leads until the change commits, then resigns."""

    node_id: int
    directory_id: str = ""


Event = Received | Tick | ClientAppend | FlushDone | SnapshotCreated | SendFailed | Resign | AddVoter | RemoveVoter


class NotLeaderError(Exception):
    """An append reached a node that is not the leader (Kafka's NOT_LEADER_OR_FOLLOWER /
    NOT_CONTROLLER): ``leader_id`` (-1 unknown) and ``epoch`` are its best hint."""

    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class VoterChangeError(Exception):
    """An AddVoter / RemoveVoter the leader refuses, with Kafka's error code (an int of
    kio's ErrorCode: NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, UNSUPPORTED_VERSION,
    DUPLICATE_VOTER, VOTER_NOT_FOUND) and its one-line message."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
