"""Share sessions (KIP-932): the per-member set of partitions a ShareFetch session
covers, and its epoch. Sans-IO; time is an argument.

Epoch rules (Kafka's ``SharePartitionManager.newContext`` / ``acknowledgeSessionUpdate``):

* ShareFetch epoch 0 opens a session (a *full* request: it lists every partition, must
  not carry acknowledgements), replacing any session the member had; the next request
  must carry epoch 1.
* ShareFetch epoch N > 0 is *incremental*: it names only added/changed partitions (and
  partitions with acknowledgements) plus forgotten topics; the session fetches from all
  its partitions. Epoch mismatch -> INVALID_SHARE_SESSION_EPOCH, no session ->
  SHARE_SESSION_NOT_FOUND. Epochs wrap from 2^31-1 to 1.
* Epoch -1 closes the session after its acknowledgements (no partitions to fetch).
* ShareAcknowledge uses the same epochs but never opens a session (epoch 0 ->
  INVALID_SHARE_SESSION_EPOCH).

Lifetime (Kafka 4.1+): a session ends with the final epoch, or when its connection closes
(Kafka's disconnect listener). It is *not* ended by the member leaving the group: a
closing consumer sends its leave heartbeat first and its final ShareAcknowledge after, and
that final request must still find the session. A departed member's session is marked
(:meth:`ShareSessionCache.mark_departed`); the broker drops it when the client closes it,
after a retention time (:meth:`ShareSessionCache.expire_departed`), or to make room when
the cache is full (departed sessions are evicted first, oldest first), so departed members
never hold slots for good.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from .types import ShareError

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "FetchContext",
    "SessionError",
    "ShareSession",
    "ShareSessionCache",
    "next_epoch",
]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

# Kafka error codes (as protocol.errors.ErrorCode).
INVALID_REQUEST = 42
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133

TopicIdPartition = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class SessionError(ShareError):
    """A share session request refused (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED)."""


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)  # ordered set
    last_used_ms: int = 0
    departed_ms: int | None = None  # when the member was first seen gone from its group


@dataclass(frozen=True, slots=True)
class FetchContext:
    """What one ShareFetch request does: ``full`` (answer every partition), incremental,
    or ``final`` (close after the acknowledgements). ``partitions`` are the partitions to
    fetch from (empty for final)."""

    kind: str  # "full" | "incremental" | "final"
    partitions: tuple[TopicIdPartition, ...]

    @property
    def full(self) -> bool:
        return self.kind == "full"


class ShareSessionCache:
    """Share sessions keyed by (group id, member id), at most ``max_sessions`` of them."""

    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def mark_departed(self, group_id: str, member_id: str, now_ms: int) -> bool:
        """Record that the session's member left its group (the session stays, see the
        module doc). Returns True when the mark is new; False if there is no session or it
        was already marked (the first departure time is kept)."""
        s = self._sessions.get((group_id, member_id))
        if s is None or s.departed_ms is not None:
            return False
        s.departed_ms = now_ms
        return True

    def mark_present(self, group_id: str, member_id: str) -> None:
        """The member is in its group (again): its session is no longer departed."""
        s = self._sessions.get((group_id, member_id))
        if s is not None:
            s.departed_ms = None

    def expire_departed(self, now_ms: int, retention_ms: int) -> list[ShareSession]:
        """Remove sessions whose member departed at least ``retention_ms`` ago; returns them."""
        gone = [s for s in self._sessions.values()
                if s.departed_ms is not None and now_ms - s.departed_ms >= retention_ms]
        for s in gone:
            del self._sessions[(s.group_id, s.member_id)]
        return gone

    def _evict_departed(self) -> bool:
        """Make room: remove the session that departed first. False if none departed."""
        departed = [s for s in self._sessions.values() if s.departed_ms is not None]
        if not departed:
            return False
        oldest = min(departed, key=lambda s: s.departed_ms or 0)
        del self._sessions[(oldest.group_id, oldest.member_id)]
        return True

    def fetch_context(self, group_id: str, member_id: str, epoch: int, partitions: Iterable[TopicIdPartition],
                      forgotten: Iterable[TopicIdPartition], has_acknowledgements: bool, now_ms: int) -> FetchContext:
        """Validate a ShareFetch's session epoch and update the session. Raises
        :class:`SessionError` with Kafka's error code."""
        key = (group_id, member_id)
        partitions = list(partitions)
        if epoch == FINAL_EPOCH:
            if partitions:
                raise SessionError(INVALID_REQUEST, "a final share fetch must not fetch partitions")
            if key not in self._sessions:
                raise SessionError(SHARE_SESSION_NOT_FOUND, "no such share session")
            return FetchContext("final", ())
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                raise SessionError(INVALID_REQUEST, "acknowledgements in an initial share fetch")
            self._sessions.pop(key, None)
            if len(self._sessions) >= self.max_sessions and not self._evict_departed():
                raise SessionError(SHARE_SESSION_LIMIT_REACHED, "the share session cache is full")
            s = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH), dict.fromkeys(partitions), now_ms)
            self._sessions[key] = s
            return FetchContext("full", tuple(s.partitions))
        s = self._check(key, epoch)
        for tp in partitions:
            s.partitions.setdefault(tp, None)
        for tp in forgotten:
            s.partitions.pop(tp, None)
        s.epoch = next_epoch(s.epoch)
        s.last_used_ms = now_ms
        return FetchContext("incremental", tuple(s.partitions))

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> bool:
        """Validate a ShareAcknowledge's epoch and advance the session. Returns True when
        it is the final request (the session closes after it). Raises SessionError."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            raise SessionError(INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session")
        if epoch == FINAL_EPOCH:
            if key not in self._sessions:
                raise SessionError(SHARE_SESSION_NOT_FOUND, "no such share session")
            return True
        s = self._check(key, epoch)
        s.epoch = next_epoch(s.epoch)
        s.last_used_ms = now_ms
        return False

    def _check(self, key: tuple[str, str], epoch: int) -> ShareSession:
        s = self._sessions.get(key)
        if s is None:
            raise SessionError(SHARE_SESSION_NOT_FOUND, "no such share session")
        if s.epoch != epoch:
            raise SessionError(INVALID_SHARE_SESSION_EPOCH, f"expected share session epoch {s.epoch}, got {epoch}")
        return s
