"""Rebalance timing guards (issue 20 item 12), sans IO: a classic join phase ends the
moment the last live member has rejoined -- a member that leaves, a pending member that
leaves, or a member whose session expires never holds it until the rebalance timeout.
These are the properties ``bench/rebalance.py`` relies on (each rebalance costs the
clients' heartbeat interval, nothing on the coordinator's side); they are Kafka's rules
(GroupMetadataManager: hasAllMembersJoined, removeMemberAndUpdateClassicGroup)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from hightide.group.classic import GroupState
from tests.unit.test_classic_group import RANGE, Ctx

E = ErrorCode
CHANGED = (("range", b"new-meta"),)


def _generation(ctx: Ctx) -> int:
    return ctx.group.generation


def test_leave_during_join_phase_completes_it_at_once() -> None:
    ctx = Ctx(initial_rebalance_delay_ms=0)
    a, b, c = ctx.stable_group(3)
    gen = _generation(ctx)
    ha = ctx.join(member_id=a, protocols=CHANGED)  # a changes its subscription: rebalance
    hb = ctx.join(member_id=b)
    assert ctx.group.state is GroupState.PREPARING_REBALANCE and ctx.answer(ha) is None
    ctx.leave((c, None))  # the one member not rejoined leaves: nothing left to wait for
    assert ctx.answer(ha).error == E.none and ctx.answer(hb).error == E.none
    assert ctx.answer(ha).generation == gen + 1 and set(ctx.group.members) == {a, b}


def test_leave_from_stable_rebalances_with_the_rest_only() -> None:
    ctx = Ctx(initial_rebalance_delay_ms=0)
    a, b, c = ctx.stable_group(3)
    ctx.leave((b, None))
    assert ctx.heartbeat(a, _generation(ctx)) == E.rebalance_in_progress
    ha = ctx.join(member_id=a)
    assert ctx.answer(ha) is None
    hc = ctx.join(member_id=c)  # the last live member: done, no timer involved
    assert ctx.answer(ha).error == E.none and ctx.answer(hc).error == E.none
    assert ctx.group.state is GroupState.COMPLETING_REBALANCE and set(ctx.group.members) == {a, c}


def test_pending_member_that_leaves_releases_the_join_phase() -> None:
    ctx = Ctx(initial_rebalance_delay_ms=0)
    a, b = ctx.stable_group(2)
    pending = ctx.answer(ctx.join())  # MEMBER_ID_REQUIRED: pending, as in Kafka
    assert pending.error == E.member_id_required
    ha = ctx.join(member_id=a, protocols=CHANGED)
    hb = ctx.join(member_id=b)
    assert ctx.answer(ha) is None  # Kafka waits for pending members too
    ctx.leave((pending.member_id, None))  # the client closed instead of rejoining
    assert ctx.answer(ha).error == E.none and ctx.answer(hb).error == E.none


def test_expired_member_ends_the_join_phase_at_its_session_timeout_not_the_rebalance_timeout() -> None:
    ctx = Ctx(initial_rebalance_delay_ms=0)
    a, b, c = ctx.stable_group(3)  # session 10 s, rebalance timeout 30 s
    ha = ctx.join(member_id=a, protocols=CHANGED)
    hb = ctx.join(member_id=b)
    ctx.advance(9_000)
    assert ctx.answer(ha) is None
    ctx.advance(1_000)  # c's session (10 s since its last heartbeat) ran out
    assert ctx.answer(ha).error == E.none and ctx.answer(hb).error == E.none
    assert set(ctx.group.members) == {a, b}


def test_unchanged_follower_rejoin_in_stable_costs_no_rebalance() -> None:
    ctx = Ctx(initial_rebalance_delay_ms=0)
    a, b, c = ctx.stable_group(3)
    gen = _generation(ctx)
    hb = ctx.join(member_id=b, protocols=RANGE)
    assert ctx.answer(hb).error == E.none and ctx.answer(hb).generation == gen
    assert ctx.group.state is GroupState.STABLE
