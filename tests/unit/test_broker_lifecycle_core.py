"""The broker's lifecycle state machine (node/lifecycle.LifecycleCore) with
simulated time: registration retry, heartbeats, WantFence until caught up, prompt
acknowledgements, the catch-up cadence, STALE_BROKER_EPOCH and controlled shutdown."""

from __future__ import annotations

import uuid

from hightide.protocol.broker_heartbeat_response import BrokerHeartbeatResponse
from hightide.protocol.errors import ErrorCode
from hightide.node.lifecycle import (CATCH_UP_FIRST_MS, CATCH_UP_INTERVAL_MS, Heartbeat, LifecycleCore,
                                              LifecycleState, Register, Wait)

INTERVAL = 250


def ok(lao: int | None = None, fenced: bool = False, shut_down: bool = False) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(ErrorCode.none, is_caught_up=True, is_fenced=fenced, should_shut_down=shut_down,
                                   lowest_acknowledged_offset=lao)


def registered(now: int = 0, epoch: int = 7) -> LifecycleCore:
    core = LifecycleCore(INTERVAL, incarnation_id=uuid.UUID(int=5))
    action = core.next_request(now)
    assert action == Register(uuid.UUID(int=5))
    core.on_registered(ErrorCode.none, epoch, now)
    return core


def test_registers_first_then_heartbeats_at_once_with_want_fence_until_caught_up() -> None:
    core = registered()
    assert core.state is LifecycleState.RUNNING and core.broker_epoch == 7
    hb = core.next_request(0)
    assert hb == Heartbeat(7, -1, want_fence=True, want_shut_down=False)
    assert core.next_request(0) is None  # one request in flight at a time
    core.on_heartbeat(ok(fenced=True), 10)
    assert core.next_request(10) == Wait(10 + INTERVAL)
    core.on_caught_up(20)  # the follower reached the controller's high watermark: say so at once
    core.on_applied(41, 40, 20)
    hb = core.next_request(20)
    assert hb == Heartbeat(7, 41, want_fence=False, want_shut_down=False)


def test_a_new_incarnation_per_core_and_registration_retries_with_backoff() -> None:
    assert LifecycleCore(INTERVAL).incarnation_id != LifecycleCore(INTERVAL).incarnation_id
    core = LifecycleCore(INTERVAL)
    delays = []
    now = 0
    for _ in range(6):
        action = core.next_request(now)
        assert isinstance(action, Register)
        core.on_failure(now)
        wait = core.next_request(now)
        assert isinstance(wait, Wait)
        delays.append(wait.until_ms - now)
        now = wait.until_ms
    assert delays == [100, 200, 400, 800, 1000, 1000]  # doubling, capped at max(1 s, interval)
    core.next_request(now)
    core.on_registered(ErrorCode.duplicate_broker_registration, -1, now)  # refused: retry too
    assert core.state is LifecycleState.REGISTERING and isinstance(core.next_request(now), Wait)


def test_content_records_trigger_a_prompt_heartbeat_noops_do_not() -> None:
    core = registered()
    core.on_applied(5, 5, 0)
    core.next_request(0)
    core.on_heartbeat(ok(lao=5), 0)
    core.on_applied(6, 5, 10)  # a NoOp at 6: content offset unchanged
    assert core.next_request(10) == Wait(INTERVAL)
    core.on_applied(7, 7, 20)  # a content record: heartbeat now
    assert isinstance(core.next_request(20), Heartbeat)
    # applied while a heartbeat is in flight: the next one goes right after its answer
    core.on_applied(8, 8, 30)
    core.on_heartbeat(ok(lao=7), 40)
    assert core.next_request(40) == Heartbeat(7, 8, want_fence=True, want_shut_down=False)


def test_catch_up_cadence_while_the_lao_is_below_the_applied_content() -> None:
    core = registered()
    core.on_applied(10, 10, 0)
    core.next_request(0)
    now, delays = 0, []
    for _ in range(6):
        core.on_heartbeat(ok(lao=8), now)  # another broker has not applied 9-10 yet
        wait = core.next_request(now)
        assert isinstance(wait, Wait)
        delays.append(wait.until_ms - now)
        now = wait.until_ms
        assert isinstance(core.next_request(now), Heartbeat)
    assert delays == [CATCH_UP_FIRST_MS, 10, 20, 40, CATCH_UP_INTERVAL_MS, CATCH_UP_INTERVAL_MS]
    core.on_heartbeat(ok(lao=10), now)  # covered: back to the normal interval
    assert core.next_request(now) == Wait(now + INTERVAL)
    assert core.lowest_acknowledged == 10 and core.lao_covers_content


def test_lao_is_kept_and_never_lowered() -> None:
    core = registered()
    core.next_request(0)
    core.on_heartbeat(ok(lao=12), 0)
    for lao in (-1, None, 3):
        core.next_request(10_000)
        core.on_heartbeat(ok(lao=lao), 10_000)
        assert core.lowest_acknowledged == 12


def test_stale_broker_epoch_registers_again_with_the_same_incarnation() -> None:
    core = registered()
    core.next_request(0)
    core.on_heartbeat(BrokerHeartbeatResponse(ErrorCode.stale_broker_epoch, lowest_acknowledged_offset=-1), 5)
    assert core.state is LifecycleState.REGISTERING and core.broker_epoch == -1
    assert core.next_request(5) == Register(uuid.UUID(int=5))
    core.on_registered(ErrorCode.none, 30, 6)
    assert core.next_request(6) == Heartbeat(30, -1, want_fence=True, want_shut_down=False)


def test_heartbeat_failures_back_off_and_errors_do_not_change_state() -> None:
    core = registered()
    core.next_request(0)
    core.on_failure(0)
    assert core.next_request(0) == Wait(100)
    core.next_request(100)
    core.on_heartbeat(BrokerHeartbeatResponse(ErrorCode.not_controller), 100)
    assert core.next_request(100) == Wait(300)
    assert core.state is LifecycleState.RUNNING


def test_controlled_shutdown_until_should_shut_down() -> None:
    core = registered()
    core.next_request(0)
    core.on_heartbeat(ok(lao=0), 0)
    core.begin_shutdown(10)
    hb = core.next_request(10)
    assert isinstance(hb, Heartbeat) and hb.want_shut_down
    core.on_heartbeat(ok(lao=0), 20)  # still leading: keep asking, at the catch-up cadence
    assert core.next_request(20) == Wait(20 + CATCH_UP_INTERVAL_MS)
    core.next_request(70)
    core.on_heartbeat(ok(lao=0, fenced=True, shut_down=True), 80)
    assert core.state is LifecycleState.SHUT_DOWN and core.next_request(80) is None


def test_shutdown_before_registration_is_immediate() -> None:
    core = LifecycleCore(INTERVAL)
    core.begin_shutdown(0)
    assert core.state is LifecycleState.SHUT_DOWN and core.next_request(0) is None
