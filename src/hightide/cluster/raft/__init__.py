"""KRaft's Raft as a sans-IO core (issue 14): :class:`RaftCore` steps from (time, event)
to actions; the asyncio shell and the seeded simulator drive it the same way."""

from .actions import (
    Action, Append, ClientAppend, Committed, ElectionState, Event, Flush, FlushDone,
    InstallSnapshot, NotLeaderError, PersistElection, Received, Resign, RoleChanged, Send,
    SendFailed, SnapshotCreated, Tick, TrimLog, Truncate,
)
from .config import UNSAFE_RULES, RaftConfig
from .core import RaftCore, leader_change_payload
from .log import RaftLog
from .messages import Entry, OffsetAndEpoch

__all__ = [
    "Action", "Append", "ClientAppend", "Committed", "ElectionState", "Event", "Flush",
    "FlushDone", "InstallSnapshot", "NotLeaderError", "PersistElection", "Received",
    "Resign", "RoleChanged", "Send", "SendFailed", "SnapshotCreated", "Tick", "TrimLog", "Truncate",
    "UNSAFE_RULES", "RaftConfig", "RaftCore", "leader_change_payload", "RaftLog", "Entry",
    "OffsetAndEpoch",
]
