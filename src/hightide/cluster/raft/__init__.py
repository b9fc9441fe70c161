"""KRaft's Raft as a sans-IO core (issue 14): :class:`RaftCore` steps from (time, event)
to actions; the asyncio shell and the seeded simulator drive it the same way."""

from .actions import (
    Action, AddVoter, Append, ClientAppend, Committed, ElectionState, Event, Flush, FlushDone,
    InstallSnapshot, NotLeaderError, PersistElection, Received, RemoveVoter, Resign, RoleChanged,
    Send,
    SendFailed, SnapshotCreated, Tick, TrimLog, Truncate, VoterChangeError,
)
from .config import UNSAFE_RULES, RaftConfig
from .core import RaftCore, leader_change_payload
from .log import RaftLog
from .messages import Entry, OffsetAndEpoch
from .voters import VoterNode, VoterSet

__all__ = [
    "Action", "AddVoter", "RemoveVoter", "VoterChangeError", "VoterNode", "VoterSet", "Append",
    "ClientAppend", "Committed", "ElectionState", "Event", "Flush",
    "FlushDone", "InstallSnapshot", "NotLeaderError", "PersistElection", "Received",
    "Resign", "RoleChanged", "Send", "SendFailed", "SnapshotCreated", "Tick", "TrimLog", "Truncate",
    "UNSAFE_RULES", "RaftConfig", "RaftCore", "leader_change_payload", "RaftLog", "Entry",
    "OffsetAndEpoch",
]
