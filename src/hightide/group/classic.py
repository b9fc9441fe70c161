"""The classic consumer group protocol's state machine (sans-IO).

Theory of operation
-------------------
A classic group moves through five states::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 │        ▲                                   │
      └──no members─────┘        └──join, leave, expiry──────────────┤
                                 └──────────────── Stable ◀──leader's SyncGroup
    (any) ──DeleteGroups──▶ Dead

:data:`TRANSITIONS` is the table of legal moves and :func:`transition` the only place
that changes :attr:`ClassicGroup.state`; it raises :class:`IllegalTransition` on a move
the table does not allow (a bug here, never a client error).

Operations (:func:`join`, :func:`sync`, :func:`heartbeat`, :func:`leave`, :func:`poll`)
work on a :class:`ClassicGroup` that the caller owns (the shard hands them a clone and
installs it only after the records are durable). They never read the clock: ``now`` is
an argument. Responses that must wait (a JoinGroup until the rebalance completes, a
follower's SyncGroup until the leader's assignment) are *parked*: the caller passes an
opaque ``handle`` that is stored on the member, and an :class:`Effects` collects
``(handle, response)`` completions for this and earlier parked requests, plus whether the
group's metadata must be persisted (a ``GroupValue`` record).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from .records import GroupValue, MemberMetadata


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.PREPARING_REBALANCE: frozenset({S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE, S.STABLE, S.DEAD}),
    S.STABLE: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.DEAD: frozenset({S.DEAD}),
}


class IllegalTransition(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow: a coordinator bug, not a client error."""


def transition(group: "ClassicGroup", new: GroupState, now: int) -> None:
    """Move ``group`` to ``new`` (stamping the state time); raise IllegalTransition."""
    if new not in TRANSITIONS[group.state]:
        raise IllegalTransition(f"group {group.group_id!r}: {group.state.value} -> {new.value}")
    group.state = new
    group.state_ts = now


@dataclass(frozen=True)
class GroupLimits:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1


# -- responses (version independent; the handlers encode them) ------------------------------
@dataclass(frozen=True)
class JoinResponse:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata)
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResponse:
    error: ErrorCode
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True  # JoinGroup v4+


# -- the group ------------------------------------------------------------------------------
@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_handle: Any = None
    sync_handle: Any = None
    heartbeat_deadline: int | None = None  # None: loaded from the log, not yet timed

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = S.EMPTY
    state_ts: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> deadline
    join_deadline: int | None = None
    initial_delay: bool = False  # the join phase is the initial delayed one
    initial_remaining: int = 0
    new_member_added: bool = False
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline: int | None = None

    def clone(self) -> "ClassicGroup":
        g = copy.copy(self)
        g.members = {k: copy.copy(m) for k, m in self.members.items()}
        g.static, g.pending, g.pending_sync = dict(self.static), dict(self.pending), set(self.pending_sync)
        return g

    # -- queries ----------------------------------------------------------------------
    def rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_handle is not None for m in self.members.values())

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order of preference."""
        members = list(self.members.values())
        if not members:
            return []
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        return [n for n, _ in members[0].protocols if n in common]

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {n for n, _ in protocols}
        return protocol_type == self.protocol_type and any(
            all(n in {p for p, _ in m.protocols} for m in self.members.values()) for n in names)

    def select_protocol(self) -> str | None:
        """Each member votes for its most preferred common protocol; most votes wins."""
        candidates = self.candidate_protocols()
        votes = dict.fromkeys(candidates, 0)
        for m in self.members.values():
            votes[next(n for n, _ in m.protocols if n in votes)] += 1
        return max(candidates, key=lambda n: votes[n], default=None)

    def member_check(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for a request naming a member."""
        if instance_id is not None:
            existing = self.static.get(instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            return ErrorCode.none if existing == member_id else ErrorCode.fenced_instance_id
        return ErrorCode.none if member_id in self.members else ErrorCode.unknown_member_id

    def generation_check(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        """:meth:`member_check`, then ILLEGAL_GENERATION unless ``generation`` is the group's."""
        code = self.member_check(member_id, instance_id)
        if code == ErrorCode.none and generation != self.generation:
            return ErrorCode.illegal_generation
        return code

    def join_response(self, member_id: str, skip_assignment: bool = False) -> JoinResponse:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member_id == self.leader:
            members = tuple((m.member_id, m.instance_id, m.metadata(self.protocol)) for m in self.members.values())
        return JoinResponse(ErrorCode.none, member_id, self.generation, self.protocol_type, self.protocol,
                            self.leader or "", members, skip_assignment)

    def next_deadline(self) -> int | None:
        """The earliest time :func:`poll` has work (-1: right away)."""
        times = [t for t in (self.join_deadline, self.sync_deadline) if t is not None]
        times += self.pending.values()
        for m in self.members.values():
            if m.heartbeat_deadline is None:
                return -1
            if m.join_handle is None and m.sync_handle is None:
                times.append(m.heartbeat_deadline)
        return min(times, default=None)

    # -- persistence ----------------------------------------------------------------------
    def to_record(self) -> GroupValue:
        return GroupValue(self.protocol_type or "", self.generation, self.protocol, self.leader, self.state_ts,
                          tuple(MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host,
                                               m.rebalance_timeout, m.session_timeout, m.metadata(self.protocol),
                                               m.assignment) for m in self.members.values()))

    @classmethod
    def from_record(cls, group_id: str, v: GroupValue) -> "ClassicGroup":
        """A group as loaded: Stable with its members (who must heartbeat within their
        session timeout, counted from the first :func:`poll`), or Empty."""
        g = cls(group_id, S.STABLE if v.members else S.EMPTY, v.current_state_timestamp, v.generation,
                v.protocol_type or None, v.protocol, v.leader)
        for mm in v.members:
            g.members[mm.member_id] = Member(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                                             mm.session_timeout, mm.rebalance_timeout, v.protocol_type,
                                             ((v.protocol or "", mm.subscription),), mm.assignment)
            if mm.group_instance_id is not None:
                g.static[mm.group_instance_id] = mm.member_id
        return g


@dataclass
class Effects:
    """What an operation produced besides the new group state."""

    completions: list[tuple[Any, Any]] = field(default_factory=list)
    persist: bool = False

    def complete(self, handle: Any, response: Any) -> None:
        if handle is not None:
            self.completions.append((handle, response))


# -- rebalance mechanics ----------------------------------------------------------------------
def _add_member(g: ClassicGroup, m: Member) -> None:
    if not g.members:
        g.protocol_type = m.protocol_type
    g.members[m.member_id] = m
    if m.instance_id is not None:
        g.static[m.instance_id] = m.member_id
    if g.leader is None:
        g.leader = m.member_id
    g.new_member_added = True


def remove_member(g: ClassicGroup, member_id: str, now: int, limits: GroupLimits, fx: Effects,
                  error: ErrorCode = ErrorCode.unknown_member_id) -> None:
    """Remove a member (answering its parked requests with ``error``) and rebalance."""
    m = g.members.pop(member_id)
    fx.complete(m.join_handle, JoinResponse(error, member_id))
    fx.complete(m.sync_handle, SyncResponse(error))
    if m.instance_id is not None and g.static.get(m.instance_id) == member_id:
        del g.static[m.instance_id]
    g.pending_sync.discard(member_id)
    if g.leader == member_id:
        g.leader = next(iter(g.members), None)
    if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
        prepare_rebalance(g, now, limits, fx)
    elif g.state is S.PREPARING_REBALANCE:
        maybe_complete_join(g, now, limits, fx)


def prepare_rebalance(g: ClassicGroup, now: int, limits: GroupLimits, fx: Effects) -> None:
    """Start a join phase: parked syncs get REBALANCE_IN_PROGRESS; an Empty group waits
    ``group.initial.rebalance.delay.ms`` (extended while members keep arriving, up to
    the rebalance timeout), any other the rebalance timeout or until all have rejoined."""
    if g.state is S.COMPLETING_REBALANCE:
        for m in g.members.values():
            m.assignment = b""
            fx.complete(m.sync_handle, SyncResponse(ErrorCode.rebalance_in_progress))
            m.sync_handle = None
    g.pending_sync.clear()
    g.sync_deadline = None
    timeout = g.rebalance_timeout()
    g.initial_delay = g.state is S.EMPTY
    if g.initial_delay:
        g.join_deadline = now + min(limits.initial_rebalance_delay_ms, timeout)
        g.initial_remaining = max(timeout - limits.initial_rebalance_delay_ms, 0)
        g.new_member_added = False
    else:
        g.join_deadline = now + timeout
    transition(g, S.PREPARING_REBALANCE, now)
    maybe_complete_join(g, now, limits, fx)


def maybe_complete_join(g: ClassicGroup, now: int, limits: GroupLimits, fx: Effects) -> None:
    if g.state is S.PREPARING_REBALANCE and not g.initial_delay and g.all_joined():
        complete_join(g, now, limits, fx)


def complete_join(g: ClassicGroup, now: int, limits: GroupLimits, fx: Effects) -> None:
    """End the join phase: drop members that did not rejoin, start the next generation
    and answer every parked JoinGroup (the leader gets the member list)."""
    for mid in [mid for mid, m in g.members.items() if m.join_handle is None]:
        g.members.pop(mid)
        g.static = {i: x for i, x in g.static.items() if x != mid}
    if g.leader not in g.members:
        g.leader = next(iter(g.members), None)
    g.join_deadline, g.initial_delay = None, False
    g.generation += 1
    if not g.members:
        g.protocol, g.leader = None, None
        transition(g, S.EMPTY, now)
        fx.persist = True
        return
    g.protocol = g.select_protocol()
    transition(g, S.COMPLETING_REBALANCE, now)
    for m in g.members.values():
        fx.complete(m.join_handle, g.join_response(m.member_id))
        m.join_handle = None
        m.heartbeat_deadline = now + m.session_timeout
    g.pending_sync = set(g.members)
    g.sync_deadline = now + g.rebalance_timeout()


def _update_then_rebalance(g: ClassicGroup, m: Member, req: JoinRequest, handle: Any, now: int,
                           limits: GroupLimits, fx: Effects) -> None:
    m.protocols, m.session_timeout, m.rebalance_timeout = req.protocols, req.session_timeout, req.rebalance_timeout
    m.client_id, m.client_host = req.client_id, req.client_host
    if m.join_handle is not None and m.join_handle is not handle:
        fx.complete(m.join_handle, JoinResponse(ErrorCode.rebalance_in_progress, m.member_id))
    m.join_handle = handle
    if g.state is S.PREPARING_REBALANCE:
        maybe_complete_join(g, now, limits, fx)
    else:
        prepare_rebalance(g, now, limits, fx)


# -- requests -------------------------------------------------------------------------------------
def _accepts(g: ClassicGroup, member_id: str, limits: GroupLimits) -> bool:
    """``group.max.size``: a new member is refused once the group is full."""
    m = g.members.get(member_id)
    if g.state in (S.EMPTY, S.DEAD):
        return True
    if g.state is S.PREPARING_REBALANCE:
        awaiting = sum(1 for x in g.members.values() if x.join_handle is not None)
        return (m is not None and m.join_handle is not None) or awaiting < limits.max_size
    return m is not None or len(g.members) < limits.max_size


def join(g: ClassicGroup, req: JoinRequest, handle: Any, now: int, limits: GroupLimits, fx: Effects,
         new_member_id: Callable[[str], str]) -> None:
    """JoinGroup. The answer (now or when the join phase ends) is a completion for ``handle``."""
    def fail(code: ErrorCode) -> None:
        fx.complete(handle, JoinResponse(code, req.member_id))

    if not limits.min_session_timeout_ms <= req.session_timeout <= limits.max_session_timeout_ms:
        return fail(ErrorCode.invalid_session_timeout)
    if g.state is S.DEAD:
        return fail(ErrorCode.coordinator_not_available)
    if not g.supports(req.protocol_type, req.protocols):
        return fail(ErrorCode.inconsistent_group_protocol)
    if not _accepts(g, req.member_id, limits):
        return fail(ErrorCode.group_max_size_reached)
    if not req.member_id:
        return _join_new(g, req, handle, now, limits, fx, new_member_id(req.client_id))
    if req.member_id in g.pending:
        del g.pending[req.member_id]
        return _join_new(g, req, handle, now, limits, fx, req.member_id)
    code = g.member_check(req.member_id, req.instance_id)
    if code != ErrorCode.none:
        return fail(code)
    m = g.members[req.member_id]
    unchanged = m.protocols == req.protocols
    if g.state is S.COMPLETING_REBALANCE and unchanged or (
            g.state is S.STABLE and unchanged and m.member_id != g.leader):
        m.heartbeat_deadline = now + m.session_timeout
        return fx.complete(handle, g.join_response(m.member_id))
    _update_then_rebalance(g, m, req, handle, now, limits, fx)


def _join_new(g: ClassicGroup, req: JoinRequest, handle: Any, now: int, limits: GroupLimits, fx: Effects,
              member_id: str) -> None:
    if req.instance_id is not None and req.instance_id in g.static:
        return _replace_static(g, req, handle, now, limits, fx, member_id)
    if req.instance_id is None and req.require_known_member_id and not req.member_id:
        g.pending[member_id] = now + req.session_timeout
        return fx.complete(handle, JoinResponse(ErrorCode.member_id_required, member_id))
    m = Member(member_id, req.instance_id, req.client_id, req.client_host, req.session_timeout,
               req.rebalance_timeout, req.protocol_type, req.protocols, join_handle=handle,
               heartbeat_deadline=now + req.session_timeout)
    _add_member(g, m)
    if g.state is S.PREPARING_REBALANCE:
        maybe_complete_join(g, now, limits, fx)
    else:
        prepare_rebalance(g, now, limits, fx)


def _replace_static(g: ClassicGroup, req: JoinRequest, handle: Any, now: int, limits: GroupLimits,
                    fx: Effects, member_id: str) -> None:
    """A static member rejoined with a new member id: the old id is fenced. With its
    protocols unchanged a Stable group keeps its generation (no rebalance)."""
    old_id = g.static[req.instance_id]  # type: ignore[index]
    old = g.members.pop(old_id)
    fx.complete(old.join_handle, JoinResponse(ErrorCode.fenced_instance_id, old_id))
    fx.complete(old.sync_handle, SyncResponse(ErrorCode.fenced_instance_id))
    m = copy.copy(old)
    m.member_id, m.join_handle, m.sync_handle = member_id, None, None
    m.heartbeat_deadline = now + req.session_timeout
    g.members[member_id] = m
    g.static[req.instance_id] = member_id  # type: ignore[index]
    if g.leader == old_id:
        g.leader = member_id
    if old_id in g.pending_sync:
        g.pending_sync.discard(old_id)
        g.pending_sync.add(member_id)
    if g.state is S.STABLE and old.protocols == req.protocols:
        m.session_timeout, m.rebalance_timeout = req.session_timeout, req.rebalance_timeout
        m.client_id, m.client_host = req.client_id, req.client_host
        fx.persist = True
        return fx.complete(handle, g.join_response(member_id, skip_assignment=member_id == g.leader))
    _update_then_rebalance(g, m, req, handle, now, limits, fx)


def sync(g: ClassicGroup, member_id: str, instance_id: str | None, generation: int, protocol_type: str | None,
         protocol: str | None, assignments: dict[str, bytes], handle: Any, now: int, limits: GroupLimits,
         fx: Effects) -> None:
    """SyncGroup. A follower's answer is parked until the leader's assignment arrives; the
    leader's moves the group to Stable and persists it."""
    def fail(code: ErrorCode) -> None:
        fx.complete(handle, SyncResponse(code))

    if g.state is S.DEAD:
        return fail(ErrorCode.coordinator_not_available)
    code = g.generation_check(member_id, instance_id, generation)
    if code != ErrorCode.none:
        return fail(code)
    if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol is not None and protocol != g.protocol):
        return fail(ErrorCode.inconsistent_group_protocol)
    if g.state is S.PREPARING_REBALANCE:
        return fail(ErrorCode.rebalance_in_progress)
    m = g.members[member_id]
    m.heartbeat_deadline = now + m.session_timeout
    g.pending_sync.discard(member_id)
    if g.state is S.STABLE:
        return fx.complete(handle, SyncResponse(ErrorCode.none, g.protocol_type, g.protocol, m.assignment))
    m.sync_handle = handle
    if member_id != g.leader:
        return
    for x in g.members.values():
        x.assignment = assignments.get(x.member_id, b"")
    transition(g, S.STABLE, now)
    fx.persist = True
    for x in g.members.values():
        fx.complete(x.sync_handle, SyncResponse(ErrorCode.none, g.protocol_type, g.protocol, x.assignment))
        x.sync_handle = None
        x.heartbeat_deadline = now + x.session_timeout


def heartbeat(g: ClassicGroup, member_id: str, instance_id: str | None, generation: int, now: int) -> ErrorCode:
    """Heartbeat: resets the member's session timer; REBALANCE_IN_PROGRESS tells it to rejoin."""
    if g.state is S.DEAD:
        return ErrorCode.coordinator_not_available
    code = g.generation_check(member_id, instance_id, generation)
    if code != ErrorCode.none:
        return code
    m = g.members[member_id]
    m.heartbeat_deadline = now + m.session_timeout
    return ErrorCode.rebalance_in_progress if g.state is S.PREPARING_REBALANCE else ErrorCode.none


def leave(g: ClassicGroup, members: list[tuple[str, str | None]], now: int, limits: GroupLimits,
          fx: Effects) -> list[ErrorCode]:
    """LeaveGroup for each (member id, instance id): its error code, in order."""
    out = []
    for member_id, instance_id in members:
        if instance_id is not None:
            existing = g.static.get(instance_id)
            if existing is None:
                out.append(ErrorCode.unknown_member_id)
            elif member_id and member_id != existing:
                out.append(ErrorCode.fenced_instance_id)
            else:
                out.append(ErrorCode.none)
                remove_member(g, existing, now, limits, fx)
        elif member_id in g.pending:
            del g.pending[member_id]
            out.append(ErrorCode.none)
            maybe_complete_join(g, now, limits, fx)
        elif member_id in g.members:
            out.append(ErrorCode.none)
            remove_member(g, member_id, now, limits, fx)
        else:
            out.append(ErrorCode.unknown_member_id)
    return out


def poll(g: ClassicGroup, now: int, limits: GroupLimits, fx: Effects) -> None:
    """Timers: pending member ids and sessions expire, the join phase ends (initial delay
    extended while members keep arriving), members that never synced are removed."""
    for mid in [mid for mid, t in g.pending.items() if t <= now]:
        del g.pending[mid]
        maybe_complete_join(g, now, limits, fx)
    for m in list(g.members.values()):
        if m.heartbeat_deadline is None:
            m.heartbeat_deadline = now + m.session_timeout
        elif m.join_handle is None and m.sync_handle is None and m.heartbeat_deadline <= now \
                and m.member_id in g.members:
            remove_member(g, m.member_id, now, limits, fx)
    if g.join_deadline is not None and g.join_deadline <= now and g.state is S.PREPARING_REBALANCE:
        if g.initial_delay and g.new_member_added and g.initial_remaining > 0 and limits.initial_rebalance_delay_ms:
            g.new_member_added = False
            g.join_deadline = now + min(limits.initial_rebalance_delay_ms, g.initial_remaining)
            g.initial_remaining = max(g.initial_remaining - limits.initial_rebalance_delay_ms, 0)
        else:
            complete_join(g, now, limits, fx)
    if g.sync_deadline is not None and g.sync_deadline <= now:
        g.sync_deadline = None
        late = [mid for mid in g.pending_sync if mid in g.members]
        g.pending_sync.clear()
        for mid in late:
            if mid in g.members:
                remove_member(g, mid, now, limits, fx)


def describe(g: ClassicGroup) -> dict:
    """DescribeGroups entry: member metadata and assignments only while Stable."""
    stable = g.state is S.STABLE
    return {"group_state": g.state.value, "protocol_type": g.protocol_type or "",
            "protocol_data": (g.protocol or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                         "client_host": m.client_host,
                         "member_metadata": m.metadata(g.protocol) if stable else b"",
                         "member_assignment": m.assignment if stable else b""} for m in g.members.values()]}
