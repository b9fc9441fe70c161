"""Brokers finding the active controller among several voters, without sockets: the
controller channel over fake connections to fake voters (refused, NOT_CONTROLLER, the
active one, a connection lost with a request in flight), the forwarding of writes
(re-sent when answered NOT_CONTROLLER, never when the outcome is unknown), heartbeats
moving to a new active controller without a new registration, and the metadata
follower following Raft's leader hints and applying only committed records."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hightide.client.errors import KafkaConnectionError, KafkaTimeoutError
from hightide.cluster.metadata_log import MetadataLog
from hightide.cluster.records import TopicRecord, encode
from hightide.protocol.broker_heartbeat_response import BrokerHeartbeatResponse
from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, request_schema, response_schema
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch
from hightide.node import controller_channel
from hightide.node.lifecycle import BrokerLifecycleManager
from hightide.node.controller_channel import ControllerChannel, ControllerLocator
from hightide.node.forwarding import Forwarder
from hightide.node.metadata_follower import MetadataFollower, committed_prefix, last_batch_epoch
from hightide.node.read_gate import ReadGate
from tests.waiting import async_wait_until

A, B, C = ("127.0.0.1", 9001), ("127.0.0.1", 9002), ("127.0.0.1", 9003)
VOTERS = {3000: A, 3001: B, 3002: C}
NOT_CONTROLLER = int(ErrorCode.not_controller)


# -- a fake quorum behind fake connections ------------------------------------------
class Voter:
    """One controller as the brokers see it: ``up`` (accepts connections), ``active``
    (answers; else NOT_CONTROLLER / NOT_LEADER_OR_FOLLOWER with ``hint``), and
    ``lose_next`` (the next request arrives, then the connection breaks)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.up = True
        self.paused = False  # accepts the socket, never answers (SIGSTOP)
        self.active = False
        self.lose_next = False
        self.hint: tuple[int, int] = (-1, -1)  # (leader id, epoch) it would name
        self.received: list[tuple[int, Any]] = []
        self.fetch_answer: Callable[[dict], Any] | None = None

    def of(self, api_key: int) -> list[Any]:
        return [body for key, body in self.received if key == api_key]


class Net:
    def __init__(self) -> None:
        self.voters = {addr: Voter(node_id) for node_id, addr in VOTERS.items()}
        self.registrations = 0
        self.metadata_offset: int | None = None  # the MetadataOffset an active voter's Envelope answer carries

    def __getitem__(self, addr: tuple[str, int]) -> Voter:
        return self.voters[addr]

    def answer(self, voter: Voter, api_key: int, version: int, body: Any, unknown_tags: dict | None) -> Any:
        if api_key == 1:
            if not voter.active:
                return fetch_answer(error=ErrorCode.not_leader_or_follower, leader=voter.hint)
            assert voter.fetch_answer is not None
            return voter.fetch_answer(body)
        if not voter.active:
            if api_key == 58:
                return SimpleNamespace(error_code=NOT_CONTROLLER, response_data=None)
            return SimpleNamespace(error_code=NOT_CONTROLLER)
        if api_key == 58:
            if self.metadata_offset is not None and unknown_tags is not None:  # tag 10000 MetadataOffset
                unknown_tags[0] = {10000: self.metadata_offset.to_bytes(8, "big", signed=True)}
            return SimpleNamespace(error_code=0, response_data=create_topics_answer(0))
        if api_key == 62:
            self.registrations += 1
            return SimpleNamespace(error_code=0, broker_epoch=42)
        if api_key == 63:
            return BrokerHeartbeatResponse(error_code=0 if body["broker_epoch"] == 42 else
                                           int(ErrorCode.stale_broker_epoch), is_caught_up=True,
                                           is_fenced=False)
        raise AssertionError(f"unexpected api {api_key}")


class FakeConnection:
    """Stands in for BrokerConnection: connects to a :class:`Voter` of ``net``."""

    net: Net

    def __init__(self, host: str, port: int, client_id: str | None = None, *, request_timeout_s: float = 30.0,
                 **kw: Any) -> None:
        self.host, self.port = host, port
        self.request_timeout_s = request_timeout_s
        self.connected = False
        self.closed = asyncio.Event()
        self.api_versions = {1: (4, 17), 19: (2, 7), 44: (0, 1), 58: (0, 0), 62: (0, 4), 63: (0, 2)}

    async def connect(self) -> None:
        voter = self.net[(self.host, self.port)]
        if not voter.up:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: refused")
        if voter.paused:  # as BrokerConnection: the handshake is bounded by its request timeout
            await asyncio.sleep(self.request_timeout_s)
            raise KafkaTimeoutError(f"api 18 v3 to {self.host}:{self.port} timed out")
        self.connected = True

    def pick_version(self, api_key: int, wanted_max: int, our_min: int = 0) -> int:
        return min(wanted_max, self.api_versions[api_key][1])

    async def request(self, api_key: int, version: int, body: Any, *, timeout_s: float | None = None,
                      unknown_tags: dict | None = None, decoder: Any = None) -> Any:
        voter = self.net[(self.host, self.port)]
        if not self.connected or not voter.up:
            self.connected = False
            raise KafkaConnectionError("connection closed")
        await asyncio.sleep(0)
        voter.received.append((api_key, body))
        if voter.paused:  # SIGSTOPped after the connect: no answer until the timeout or a close
            waiter = asyncio.ensure_future(self.closed.wait())
            await asyncio.wait((waiter,), timeout=timeout_s or self.request_timeout_s)
            waiter.cancel()
            if self.closed.is_set():
                raise KafkaConnectionError(f"{self.host}:{self.port}: connection closed")
            raise KafkaTimeoutError(f"api {api_key} v{version} to {self.host}:{self.port} timed out")
        if voter.lose_next:
            voter.lose_next = False
            self.connected = False
            raise KafkaConnectionError("connection reset by peer")
        answer = self.net.answer(voter, api_key, version, body, unknown_tags)
        if api_key == 1 and voter.active and not answer.responses[0].partitions[0].records:
            await asyncio.sleep(0.05)  # the long-poll found nothing new
        return answer

    async def close(self) -> None:
        self.connected = False
        self.closed.set()


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch) -> Net:
    n = Net()
    FakeConnection.net = n
    monkeypatch.setattr(controller_channel, "BrokerConnection", FakeConnection)
    return n


def channel(**kw: Any) -> ControllerChannel:
    kw.setdefault("request_timeout_s", 2.0)
    return ControllerChannel([A, B, C], client_id="test", voters=VOTERS, **kw)


def create_topics_answer(code: int) -> bytes:
    body = materialize(response_schema(19, 7), {"throttle_time": 0, "topics": [{
        "name": "t", "topic_id": uuid.UUID(int=7), "error_code": code, "error_message": None, "num_partitions": 1,
        "replication_factor": 1, "configs": None, "topic_config_error_code": 0}]})
    return encode_response(19, 7, 99, body)[4:]


def fetch_answer(*, error: int = 0, leader: tuple[int, int] = (-1, -1), records: bytes = b"", hwm: int = -1,
                 endpoints: dict[int, tuple[str, int]] | None = None) -> Any:
    p = SimpleNamespace(partition_index=0, error_code=int(error), high_watermark=hwm, records=records,
                        diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                        current_leader=SimpleNamespace(leader_id=leader[0], leader_epoch=leader[1]))
    nodes = [SimpleNamespace(node_id=i, host=h, port=p_) for i, (h, p_) in (endpoints or {}).items()]
    return SimpleNamespace(error_code=0, responses=[SimpleNamespace(partitions=[p])], node_endpoints=nodes)


# -- the locator ---------------------------------------------------------------------
def test_locator_tries_voters_in_turn_and_follows_newer_hints_only() -> None:
    loc = ControllerLocator([A, B, C], VOTERS)
    assert loc.target() == A
    loc.failed(A)
    assert loc.target() == B
    loc.failed(B)
    assert loc.target() == C and loc.leader_id == -1
    assert loc.hint(3000, 5)  # id only: the static voter's address
    assert loc.target() == A and loc.describe() == "3000 (epoch 5) at 127.0.0.1:9001"
    assert not loc.hint(3001, 4)  # older epoch: ignored
    assert loc.target() == A
    assert not loc.hint(-1, 5)  # "no leader" in the same epoch changes nothing
    assert loc.hint(3002, 6, ("10.0.0.9", 1))  # a configured voter address wins over NodeEndpoints
    assert loc.target() == C


def test_locator_ignores_a_failed_leader_until_it_answers_itself_or_a_newer_epoch() -> None:
    loc = ControllerLocator([A, B, C], VOTERS)
    loc.hint(3000, 5)
    loc.failed(A)  # e.g. the connection to it was lost
    assert loc.target() == B and loc.leader_id == -1
    assert not loc.hint(3000, 5)  # a follower still naming the dead leader
    assert loc.target() == B
    assert loc.hint(3000, 5, A, authoritative=True)  # it answered a Fetch itself: it does lead
    assert loc.target() == A
    loc.failed(A)
    assert loc.hint(3001, 6) and loc.target() == B  # a newer epoch
    assert not loc.hint(-1, 7) and loc.leader_id == -1 and loc.target() == B  # an election: nobody leads
    bootstrap = ControllerLocator([("h", 1)])  # bootstrap servers: no voter ids
    assert bootstrap.hint(4, 1, ("h2", 2)) and bootstrap.target() == ("h2", 2)


def test_locator_skips_a_leader_that_failed_in_its_rounds_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    loc = ControllerLocator([A, B, C], VOTERS)
    loc.hint(3000, 5)
    loc.failed(A)  # e.g. a handshake timeout: A is paused
    assert loc.target() == B
    loc.failed(B)  # B and C know no leader yet (an election)
    assert loc.target() == C
    loc.failed(C)
    assert loc.target() == B  # not A: each visit would cost a handshake timeout while B and C elect
    monkeypatch.setattr(controller_channel, "STALE_SKIP_S", 0.0)
    loc.hint(3000, 5, A, authoritative=True)
    loc.failed(A)
    loc.failed(B)
    loc.failed(C)
    assert loc.target() == A  # after the skip: every voter in turn again (A may lead still)
    single = ControllerLocator([A], {3000: A})
    single.hint(3000, 5)
    single.failed(A)
    assert single.target() == A


# -- the channel ---------------------------------------------------------------------
def test_a_request_answered_not_controller_goes_to_the_next_voter(net: Net) -> None:
    async def run() -> None:
        net[B].up = False
        net[C].active = True
        ch = channel()
        try:
            resp = await ch.request(63, 2, {"broker_epoch": 42})
            assert resp.error_code == 0 and ch.address == C
            assert [len(net[a].of(63)) for a in (A, B, C)] == [1, 0, 1]
            assert ch.not_controller_retries == 1
            await ch.request(63, 2, {"broker_epoch": 42})  # stays on the active controller
            assert [len(net[a].of(63)) for a in (A, B, C)] == [1, 0, 2]
        finally:
            await ch.close()
    asyncio.run(run())


def test_not_controller_everywhere_is_returned_after_the_timeout(net: Net) -> None:
    async def run() -> None:
        ch = channel()
        try:
            resp = await ch.request(63, 2, {"broker_epoch": 42}, timeout_s=0.4)
            assert resp.error_code == NOT_CONTROLLER
            assert all(net[a].of(63) for a in (A, B, C))  # every voter was asked
        finally:
            await ch.close()
    asyncio.run(run())


def test_a_connection_lost_in_flight_says_the_request_was_sent(net: Net) -> None:
    async def run() -> None:
        net[A].active = True
        net[A].lose_next = True
        ch = channel()
        try:
            with pytest.raises(controller_channel.ControllerUnavailable) as err:
                await ch.request(63, 2, {"broker_epoch": 42})
            assert err.value.sent
            net[A].up = net[B].up = net[C].up = False
            with pytest.raises(controller_channel.ControllerUnavailable) as err:
                await ch.request(63, 2, {"broker_epoch": 42})
            assert not err.value.sent
        finally:
            await ch.close()
    asyncio.run(run())


def test_a_connect_to_a_paused_voter_is_abandoned_for_a_new_leader_hint(net: Net) -> None:
    async def run() -> None:
        net[A].paused = True  # the old leader, SIGSTOPped: the handshake never completes
        net[B].active = True
        ch = channel(request_timeout_s=10.0)
        try:
            started = time.monotonic()
            pending = asyncio.ensure_future(ch.request(63, 2, {"broker_epoch": 42}))
            await asyncio.sleep(0.2)
            assert not pending.done()
            ch.locator.hint(3001, 2)  # the metadata fetch learned the new leader
            resp = await asyncio.wait_for(pending, 1.0)
            assert resp.error_code == 0 and ch.address == B and time.monotonic() - started < 1.0
        finally:
            await ch.close()
    asyncio.run(run())


def test_a_paused_voter_holds_a_request_only_for_the_connect_timeout(net: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_channel, "CONNECT_TIMEOUT_S", 0.3)

    async def run() -> None:
        net[A].paused = True  # accepts the socket, never answers ApiVersions; no hint arrives
        net[B].active = True
        ch = channel(request_timeout_s=10.0)
        try:
            started = time.monotonic()
            resp = await ch.request(63, 2, {"broker_epoch": 42})
            assert resp.error_code == 0 and ch.address == B
            assert time.monotonic() - started < 2.0  # not the 10 s request timeout
        finally:
            await ch.close()
    asyncio.run(run())


# -- forwarding ------------------------------------------------------------------------
def forwarder(ch: ControllerChannel) -> Forwarder:
    gate = ReadGate("local", 100, lao=lambda: -1, applied=lambda: -1, content=lambda: -1)
    return Forwarder(ch, gate)


def create_topics(timeout_ms: int = 2000) -> tuple[Any, Any]:
    ctx = SimpleNamespace(header=SimpleNamespace(api_key=19, api_version=7, correlation_id=5, client_id="c"),
                          peer="127.0.0.1:5555", principal=None)
    req = materialize(request_schema(19, 7), {
        "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": timeout_ms, "validate_only": False})
    return ctx, req


def envelopes(net: Net) -> list[int]:
    return [len(net[a].of(58)) for a in (A, B, C)]


def test_a_forwarded_write_answered_not_controller_is_sent_to_the_new_leader(net: Net) -> None:
    async def run() -> None:
        net[B].active = True
        ch = channel()
        fwd = forwarder(ch)
        try:
            answer = await fwd.forward(*create_topics())
            assert isinstance(answer, bytes) and answer[4:8] == (5).to_bytes(4, "big")  # the client's id
            assert envelopes(net) == [1, 1, 0]  # A refused it (applied nothing), B applied it once
        finally:
            await ch.close()
    asyncio.run(run())


def test_not_controller_inside_the_forwarded_answer_is_sent_again(net: Net) -> None:
    async def run() -> None:
        original = net.answer

        def inner_not_controller(voter: Voter, api_key: int, *rest: Any) -> Any:
            if api_key == 58 and voter is net[A]:  # the voter ran it and said NOT_CONTROLLER inside
                return SimpleNamespace(error_code=0, response_data=create_topics_answer(NOT_CONTROLLER))
            return original(voter, api_key, *rest)
        net.answer = inner_not_controller  # type: ignore[method-assign,assignment]
        net[C].active = True
        ch = channel()
        fwd = forwarder(ch)
        try:
            answer = await fwd.forward(*create_topics())
            assert isinstance(answer, bytes) and fwd.not_controller_resends == 1
            assert envelopes(net) == [1, 1, 1]  # A inside, B in the Envelope: NOT_CONTROLLER; C applied it
        finally:
            await ch.close()
    asyncio.run(run())


def test_a_forwarded_write_with_an_unknown_outcome_is_never_sent_again(net: Net) -> None:
    async def run() -> None:
        net[A].active = net[B].active = True
        net[A].lose_next = True  # it arrives at A, then the connection breaks
        ch = channel()
        fwd = forwarder(ch)
        try:
            answer = await fwd.forward(*create_topics())
            assert answer.topics[0].error_code == ErrorCode.request_timed_out  # retriable for the client
            assert "may or may not have been applied" in answer.topics[0].error_message
            assert envelopes(net) == [1, 0, 0]  # not re-sent to anyone
        finally:
            await ch.close()
    asyncio.run(run())


def test_no_active_controller_until_the_timeout_answers_request_timed_out(net: Net) -> None:
    async def run() -> None:
        ch = channel()
        fwd = forwarder(ch)
        try:
            answer = await fwd.forward(*create_topics(timeout_ms=1000))
            assert answer.topics[0].error_code == ErrorCode.request_timed_out
            assert "NOT_CONTROLLER" in answer.topics[0].error_message
        finally:
            await ch.close()
    asyncio.run(run())


# -- heartbeats ------------------------------------------------------------------------
def test_heartbeats_move_to_the_new_active_controller_without_registering_again(net: Net) -> None:
    async def run() -> None:
        net[A].active = True
        settings = SimpleNamespace(node_id=1, heartbeat_interval_ms=50, session_timeout_ms=3000)
        ch = channel()
        mgr = BrokerLifecycleManager(settings, ch, lambda: "c1", lambda: {}, lambda lao: None)  # type: ignore[arg-type]
        mgr.core.on_caught_up(0)
        mgr.start()
        try:
            await async_wait_until(lambda: len(net[A].of(63)) >= 2, 5, what="heartbeats to A")
            net[A].up = net[A].active = False  # A is killed; B wins the election
            net[B].active = True
            await async_wait_until(lambda: len(net[B].of(63)) >= 3, 5, what="heartbeats to B")
            assert net.registrations == 1 and mgr.broker_epoch == 42 and mgr.unfenced.is_set()
            assert {hb["broker_epoch"] for hb in net[B].of(63)} == {42}  # the same session
        finally:
            await mgr.close()
            await ch.close()
    asyncio.run(run())


# -- a paused leader: every channel moves as soon as a new leader is known (issue 26 #4) --
async def connected_to_a(ch: ControllerChannel, net: Net) -> None:
    """Connect ``ch`` to A (the active controller), then SIGSTOP A and let B win."""
    net[A].active = True
    assert (await ch.request(63, 2, {"broker_epoch": 42})).error_code == 0 and ch.address == A
    net[A].paused = True  # the connection stays open; A answers nothing any more
    net[B].active = True


async def settle(*tasks: asyncio.Future[Any], within: float) -> float:
    """Wait for ``tasks`` at most ``within`` seconds; the time it took (cancels the rest)."""
    started = time.monotonic()
    _, pending = await asyncio.wait(tasks, timeout=within)
    for task in pending:
        task.cancel()
    assert not pending, f"{len(pending)} of {len(tasks)} still waiting after {within} s"
    return time.monotonic() - started


def test_a_new_leader_hint_moves_the_next_request_off_a_paused_leader_at_once(net: Net) -> None:
    async def run() -> None:
        ch = channel(request_timeout_s=10.0)
        try:
            await connected_to_a(ch, net)
            ch.locator.hint(3001, 2)  # the metadata fetch learned the new leader
            beat = asyncio.ensure_future(ch.request(63, 2, {"broker_epoch": 42}))
            await settle(beat, within=2.0)
            assert beat.result().error_code == 0 and ch.address == B
            assert len(net[A].of(63)) == 1  # nothing more was sent to the paused leader
        finally:
            await ch.close()
    asyncio.run(run())


def test_requests_in_flight_to_a_deposed_leader_are_abandoned_when_a_new_one_is_known(net: Net) -> None:
    async def run() -> None:
        ch = channel(request_timeout_s=10.0)
        fwd = forwarder(ch)
        try:
            await connected_to_a(ch, net)
            write = asyncio.ensure_future(fwd.forward(*create_topics(timeout_ms=10000)))
            beat = asyncio.ensure_future(ch.request(63, 2, {"broker_epoch": 42}))
            await async_wait_until(lambda: len(net[A].of(58)) == 1 and len(net[A].of(63)) == 2, 5,
                                   what="both requests at the paused leader")
            ch.locator.hint(3001, 2)
            took = await settle(write, beat, within=2.0)
            answer = write.result()  # its outcome is unknown: REQUEST_TIMED_OUT, never sent again
            assert answer.topics[0].error_code == ErrorCode.request_timed_out and envelopes(net) == [1, 0, 0]
            assert isinstance(beat.exception(), controller_channel.ControllerUnavailable)
            assert beat.exception().sent  # type: ignore[union-attr]  # the caller decides (heartbeats: again)
            assert took < 1.0
            again = asyncio.ensure_future(fwd.forward(*create_topics(timeout_ms=10000)))  # the client's retry
            await settle(again, within=2.0)
            assert isinstance(again.result(), bytes) and envelopes(net) == [1, 1, 0]
        finally:
            await ch.close()
    asyncio.run(run())


def test_heartbeats_follow_a_new_leader_hint_away_from_a_paused_leader(net: Net) -> None:
    async def run() -> None:
        net[A].active = True
        # session 9 s (Kafka's default): a heartbeat is given up on after 4.5 s
        settings = SimpleNamespace(node_id=1, heartbeat_interval_ms=50, session_timeout_ms=9000)
        ch = channel(request_timeout_s=10.0)
        mgr = BrokerLifecycleManager(settings, ch, lambda: "c1", lambda: {}, lambda lao: None)  # type: ignore[arg-type]
        mgr.core.on_caught_up(0)
        mgr.start()
        try:
            await async_wait_until(lambda: len(net[A].of(63)) >= 2, 5, what="heartbeats to A")
            net[A].paused = True
            net[B].active = True
            await asyncio.sleep(0.2)  # a heartbeat is in flight to the paused A
            hinted = time.monotonic()
            ch.locator.hint(3001, 2)
            await async_wait_until(lambda: len(net[B].of(63)) >= 2, 5, what="heartbeats to B")
            assert time.monotonic() - hinted < 1.5  # not the 4.5 s heartbeat timeout
            assert net.registrations == 1 and {hb["broker_epoch"] for hb in net[B].of(63)} == {42}
        finally:
            await mgr.close()
            await ch.close()
    asyncio.run(run())


# -- forwarded writes answer by their deadline (issue 26 #5) -------------------------------
def alter_configs() -> tuple[Any, Any]:
    """An IncrementalAlterConfigs (no timeout field) as a broker receives it."""
    ctx = SimpleNamespace(header=SimpleNamespace(api_key=44, api_version=1, correlation_id=6, client_id="c"),
                          peer="127.0.0.1:5555", principal=None)
    req = materialize(request_schema(44, 1), {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}], "validate_only": False})
    return ctx, req


async def answer_times(calls: list[Any], within: float) -> list[tuple[float, Any]]:
    """Run ``calls`` (coroutines) at once; (seconds until each answered, its answer)."""
    started = time.monotonic()
    out: list[tuple[float, Any]] = []

    async def timed(call: Any) -> None:
        answer = await call
        out.append((time.monotonic() - started, answer))
    await settle(*(asyncio.ensure_future(timed(c)) for c in calls), within=within)
    return out


def test_forwarded_writes_answer_by_their_timeout_with_several_callers_queued(net: Net) -> None:
    async def run() -> None:
        for addr in (A, B, C):
            net[addr].paused = True  # every voter accepts the socket and never answers (2 s handshakes)
        ch = channel(request_timeout_s=10.0)
        fwd = forwarder(ch)
        try:
            answers = await answer_times([fwd.forward(*create_topics(timeout_ms=1000)) for _ in range(4)], 10.0)
            assert all(a.topics[0].error_code == ErrorCode.request_timed_out for _, a in answers)
            assert max(t for t, _ in answers) < 1.5, sorted(t for t, _ in answers)  # 1 s + slack
        finally:
            await ch.close()
    asyncio.run(run())


def test_a_forwarded_write_without_a_timeout_field_answers_by_the_default(
        net: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    from hightide.node import forwarding
    monkeypatch.setattr(forwarding, "DEFAULT_TIMEOUT_MS", 1000)

    async def run() -> None:
        for addr in (A, B, C):
            net[addr].paused = True
        ch = channel(request_timeout_s=10.0)
        fwd = forwarder(ch)
        try:
            answers = await answer_times([fwd.forward(*alter_configs()) for _ in range(3)], 10.0)
            for _, a in answers:
                assert [(r.error_code, r.resource_name) for r in a.responses] == [(ErrorCode.request_timed_out, "t")]
            assert max(t for t, _ in answers) < 1.5, sorted(t for t, _ in answers)
        finally:
            await ch.close()
    asyncio.run(run())


def test_not_controller_everywhere_answers_by_the_timeout_despite_the_backoff(net: Net) -> None:
    async def run() -> None:
        ch = channel(request_timeout_s=10.0, max_backoff_s=5.0)  # nobody leads: NOT_CONTROLLER everywhere
        fwd = forwarder(ch)
        try:
            answers = await answer_times([fwd.forward(*create_topics(timeout_ms=2000))], 10.0)
            assert answers[0][1].topics[0].error_code == ErrorCode.request_timed_out
            assert answers[0][0] < 2.5, answers[0][0]
        finally:
            await ch.close()
    asyncio.run(run())


def test_the_read_gate_wait_of_a_forwarded_write_ends_at_its_timeout(net: Net) -> None:
    async def run() -> None:
        net[A].active = True
        net.metadata_offset = 7  # the write's records end at offset 7; no broker acknowledges it
        ch = channel(request_timeout_s=10.0)
        gate = ReadGate("acknowledged", 5000, lao=lambda: -1, applied=lambda: 7, content=lambda: 7)
        fwd = Forwarder(ch, gate)
        try:
            answers = await answer_times([fwd.forward(*create_topics(timeout_ms=1000))], 10.0)
            took, answer = answers[0]
            assert isinstance(answer, bytes) and took < 1.5, took  # applied: its answer, not the 5 s gate bound
        finally:
            await ch.close()
    asyncio.run(run())


# -- the metadata follower -------------------------------------------------------------
def batch(base: int, *names: str, epoch: int = 1, control: bool = False) -> bytes:
    return build_batch([(None, encode(TopicRecord(n, str(uuid.uuid4()))), [], 1000) for n in names],
                       base_offset=base, partition_leader_epoch=epoch, is_control=control)


def test_committed_prefix_keeps_whole_batches_below_the_high_watermark() -> None:
    a, b = batch(0, "a"), batch(1, "b", "c")
    assert committed_prefix(a + b, 3) == a + b
    assert committed_prefix(a + b, 2) == a  # b ends at offset 2: not committed yet
    assert committed_prefix(a + b, 0) == b""


def test_the_follower_follows_the_leader_hint_and_applies_committed_records_only(net: Net, tmp_path: Path) -> None:
    async def run() -> None:
        leader_batches = batch(0, "a", epoch=4) + batch(1, "b", epoch=4)
        answers = [fetch_answer(records=leader_batches, hwm=1, leader=(3001, 4)),  # b is not committed yet
                   fetch_answer(records=batch(1, "b", epoch=4), hwm=2, leader=(3001, 4))]
        net[A].hint = (3001, 4)  # A follows B in epoch 4
        net[B].active = True
        net[B].fetch_answer = lambda body: answers.pop(0) if answers else fetch_answer(hwm=2, leader=(3001, 4))
        metadata = MetadataLog(str(tmp_path), 0, True)
        applied: list[tuple[int, list[str]]] = []
        ch = channel(name="metadata-fetch")
        f = MetadataFollower(metadata, ch, 7, epoch=lambda: 42, cluster_id=lambda: "c1",
                             on_applied=lambda a, c: applied.append((a, sorted(metadata.image.topics))),
                             on_caught_up=lambda: None)
        f.start()
        try:
            await async_wait_until(lambda: len(applied) == 2, 5, what="both batches applied")
            assert applied == [(0, ["a"]), (1, ["a", "b"])]  # b only once the HW covered it
            fetches = net[B].of(1)
            part = [fb["topics"][0]["partitions"][0] for fb in fetches[:2]]
            assert [p["fetch_offset"] for p in part] == [0, 1]
            assert [p["current_leader_epoch"] for p in part] == [4, 4]  # learned from A's hint
            assert part[1]["last_fetched_epoch"] == 4
            assert len(net[A].of(1)) == 1 and ch.locator.leader_id == 3001
        finally:
            await f.close()
            await ch.close()
        assert last_batch_epoch(metadata.log) == 4
        metadata.close()
    asyncio.run(run())


def test_the_follower_tries_the_next_voter_while_nobody_leads_and_skips_control_batches(
        net: Net, tmp_path: Path) -> None:
    async def run() -> None:
        leader_change = build_batch([(None, b"\x00\x00\x00\x00", [], 1000)], base_offset=0,
                                    partition_leader_epoch=6, is_control=True)
        records = leader_change + batch(1, "a", epoch=6)
        net[C].active = True
        net[C].fetch_answer = lambda body: fetch_answer(records=records if body["topics"][0]["partitions"][0][
            "fetch_offset"] == 0 else b"", hwm=2, leader=(3002, 6))
        metadata = MetadataLog(str(tmp_path), 0, True)
        ch = channel(name="metadata-fetch")
        f = MetadataFollower(metadata, ch, 7, epoch=lambda: 42, cluster_id=lambda: "c1",
                             on_applied=lambda a, c: None, on_caught_up=lambda: None)
        f.start()
        try:  # A and B know no leader (an election): the follower goes on to C
            await async_wait_until(lambda: metadata.image.offset == 1, 5, what="the record after the LeaderChange")
            assert sorted(metadata.image.topics) == ["a"] and metadata.log.log_end_offset == 2
            assert net[A].of(1) and net[B].of(1) and ch.locator.leader_id == 3002
        finally:
            await f.close()
            await ch.close()
        metadata.close()
    asyncio.run(run())


# -- hightide's admin client: --bootstrap-controller against a quorum ----------------
class QuorumConn:
    """Stands in for BrokerConnection in hightide.client.cluster: DescribeQuorum
    answered per address by ``answers`` (a function of the address and the round)."""

    answers: Callable[[tuple[str, int]], Any]
    asked: list[tuple[str, int]] = []

    def __init__(self, host: str, port: int, client_id: str | None = None, **kw: Any) -> None:
        self.host, self.port = host, port

    async def connect(self) -> None:
        if (self.host, self.port) == A:  # down
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}")

    def pick_version(self, api_key: int, wanted_max: int, our_min: int = 0) -> int:
        return wanted_max

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        assert api_key == 55
        self.asked.append((self.host, self.port))
        return self.answers((self.host, self.port))

    async def close(self) -> None:
        pass


def quorum_answer(error: int = 0, leader: int = -1, nodes: dict[int, tuple[str, int]] | None = None) -> Any:
    part = SimpleNamespace(partition_index=0, error_code=error, error_message=None, leader_id=leader,
                           leader_epoch=3, high_watermark=10 if not error else -1, current_voters=(), observers=())
    return SimpleNamespace(error_code=0, topics=[SimpleNamespace(topic_name="__cluster_metadata", partitions=[part])],
                           nodes=[SimpleNamespace(node_id=i, listeners=[SimpleNamespace(name="CONTROLLER", host=h,
                                                                                        port=p)])
                                  for i, (h, p) in (nodes or {}).items()])


def test_the_admin_client_finds_the_active_controller_of_a_quorum(monkeypatch: pytest.MonkeyPatch) -> None:
    from hightide.client import cluster as client_cluster
    rounds = {"n": 0}

    def answers(addr: tuple[str, int]) -> Any:
        if addr == B:
            rounds["n"] += 1  # nobody leads in the first round (an election), then C does
            return quorum_answer(int(ErrorCode.not_leader_or_follower), 3002 if rounds["n"] > 1 else -1,
                                 {3002: C})
        return quorum_answer(0, 3002) if rounds["n"] > 1 else quorum_answer(int(ErrorCode.not_leader_or_follower))
    QuorumConn.answers = staticmethod(answers)
    QuorumConn.asked = []
    monkeypatch.setattr(client_cluster, "BrokerConnection", QuorumConn)

    async def run() -> None:
        conn, quorum = await client_cluster.active_controller([A, B], timeout_s=5)
        assert (conn.host, conn.port) == C and quorum.leader_id == 3002 and quorum.high_watermark == 10
        assert QuorumConn.asked == [B, B, C]  # round 1: B (no leader); round 2: B names C, C answers
    asyncio.run(run())
