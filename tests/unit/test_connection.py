"""KafkaConnection driven through a fake transport (no sockets), uvicorn-style."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest
from kio.schema.list_groups.v0.request import ListGroupsRequest
from kio.serial import entity_reader

from hightide.config import BrokerConfig
from hightide.protocol.codec import encode_request
from hightide.server.connection import KafkaConnection
from hightide.server.context import RequestContext
from hightide.server.handlers import routes as handler_routes
from hightide.server.registry import CloseConnection, RawResponse, Route

SYNC_KEY, ASYNC_KEY, API_VERSIONS = 16, 10, 18  # ListGroups, FindCoordinator, ApiVersions


class FakeTransport:
    """Records what the protocol does to its transport."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.closed = False
        self.paused = False
        self.pauses = 0
        self.resumes = 0

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.chunks.append(bytes(data))

    def writelines(self, buffers: list) -> None:
        assert not self.closed
        self.chunks.append(b"".join(bytes(b) for b in buffers))

    def pause_reading(self) -> None:
        assert not self.paused
        self.paused, self.pauses = True, self.pauses + 1

    def resume_reading(self) -> None:
        assert self.paused
        self.paused, self.resumes = False, self.resumes + 1

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.write_high = high

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 54321) if name == "peername" else default

    def frames(self) -> list[bytes]:
        """Everything written, split into frames (size prefix removed)."""
        data, out = b"".join(self.chunks), []
        while data:
            size = int.from_bytes(data[:4], "big")
            out.append(data[4:4 + size])
            data = data[4 + size:]
        return out

    def correlation_ids(self) -> list[int]:
        return [int.from_bytes(f[:4], "big", signed=True) for f in self.frames()]


class FakeBroker:
    """What a connection needs of a broker: config, the route table (the real one; tests
    add routes to it), services (none: the test handlers use only the header)."""

    def __init__(self, services: Any = None, **config: Any) -> None:
        self.config = BrokerConfig.load(None, config)
        self.connections: set = set()
        self.routes: dict[int, Route] = dict(handler_routes())
        self.services = services


def raw(ctx: RequestContext, note: bytes = b"") -> RawResponse:
    """A response frame body that identifies its request."""
    return RawResponse([ctx.header.correlation_id.to_bytes(4, "big", signed=True), b"ok", note])


class Harness:
    """A connection on a fake transport with test routes; the async route's futures
    are kept by correlation id so a test can complete them in any order."""

    def __init__(self, services: Any = None, **config: Any) -> None:
        self.broker = FakeBroker(services, **config)
        self.routes = self.broker.routes  # the table the connection routes by
        self.transport = FakeTransport()
        self.conn = KafkaConnection(self.broker)  # type: ignore[arg-type]
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.pending: dict[int, asyncio.Future] = {}
        self.requests: list[tuple[int, Any]] = []

    def sync_handler(self, ctx: RequestContext, req: Any) -> Any:
        self.requests.append((ctx.header.correlation_id, req))
        return raw(ctx)

    def async_handler(self, ctx: RequestContext, req: Any) -> Awaitable[Any]:
        self.requests.append((ctx.header.correlation_id, req))
        fut = asyncio.get_running_loop().create_future()
        self.pending[ctx.header.correlation_id] = fut
        return fut

    def receive(self, data: bytes, chunk: int | None = None) -> None:
        """Deliver bytes the way asyncio's BufferedProtocol path does."""
        pos = 0
        while pos < len(data) and not self.transport.closed:
            buf = self.conn.get_buffer(-1)
            n = min(len(buf), len(data) - pos, chunk or len(data))
            buf[:n] = data[pos:pos + n]
            pos += n
            self.conn.buffer_updated(n)

    def complete(self, corr: int, note: bytes = b"") -> None:
        fut = self.pending.pop(corr)
        fut.set_result(RawResponse([corr.to_bytes(4, "big"), b"ok", note]))


def sync_req(corr: int) -> bytes:
    return encode_request(SYNC_KEY, 0, corr, "client", ListGroupsRequest())


def async_req(corr: int) -> bytes:
    return encode_request(ASYNC_KEY, 0, corr, "client", FindCoordinatorRequest(key=f"g{corr}"))


@pytest.fixture
def routes() -> Iterator[Callable[..., None]]:
    """``routes(key, lo, hi, fn)`` routes a test handler in the latest harness's table
    (each harness has its own copy: nothing global is changed)."""
    current: list[Harness] = []

    def add(key: int, lo: int, hi: int, fn: Callable) -> None:
        current[-1].routes[key] = Route(key, lo, hi, fn, f"test_{key}")

    add.current = current  # type: ignore[attr-defined]
    yield add


async def settle() -> None:
    """Let done-callbacks scheduled with call_soon run."""
    for _ in range(3):
        await asyncio.sleep(0)


def harness(routes: Callable, services: Any = None, **config: Any) -> Harness:
    h = Harness(services, **config)
    routes.current.append(h)  # type: ignore[attr-defined]
    routes(SYNC_KEY, 0, 4, h.sync_handler)
    routes(ASYNC_KEY, 0, 4, h.async_handler)
    return h


# -- ordering ---------------------------------------------------------------------------


def test_sync_requests_answered_at_once(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        h.receive(sync_req(1) + sync_req(2) + sync_req(3))
        assert h.transport.correlation_ids() == [1, 2, 3]
        assert h.conn.in_flight == 0
        assert [c for c, _ in h.requests] == [1, 2, 3]
        assert h.requests[0][1] == ListGroupsRequest()
    asyncio.run(scenario())


def test_pipelined_responses_leave_in_request_order(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        h.receive(async_req(1) + sync_req(2) + async_req(3) + sync_req(4) + async_req(5))
        assert h.requests[2][1] == FindCoordinatorRequest(key="g3")
        assert h.transport.chunks == [] and h.conn.in_flight == 5
        h.complete(5)
        h.complete(3)  # later requests finish first
        await settle()
        assert h.transport.chunks == []
        h.complete(1)
        await settle()
        assert h.transport.correlation_ids() == [1, 2, 3, 4, 5]
        assert h.conn.in_flight == 0
        h.receive(sync_req(6))
        assert h.transport.correlation_ids()[-1] == 6
    asyncio.run(scenario())


def test_partial_head_completion_flushes_only_the_prefix(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        h.receive(async_req(1) + sync_req(2) + async_req(3) + sync_req(4))
        h.complete(1, b"first")
        await settle()
        assert h.transport.correlation_ids() == [1, 2]
        assert h.transport.frames()[0] == (1).to_bytes(4, "big") + b"okfirst"
        h.complete(3)
        await settle()
        assert h.transport.correlation_ids() == [1, 2, 3, 4]
    asyncio.run(scenario())


def test_frames_split_across_reads(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        h.receive(b"".join(sync_req(i) if i % 2 else async_req(i) for i in range(1, 9)), chunk=3)
        for corr in sorted(h.pending, reverse=True):
            h.complete(corr)
        await settle()
        assert h.transport.correlation_ids() == list(range(1, 9))
    asyncio.run(scenario())


def test_none_result_sends_nothing_but_keeps_order(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 0, 4, lambda ctx, req: None)  # e.g. acks=0 Produce
        h.receive(async_req(1) + sync_req(2) + async_req(3))
        h.pending.pop(3).set_result(None)
        h.complete(1)
        await settle()
        assert h.transport.correlation_ids() == [1]
        assert h.conn.in_flight == 0 and not h.transport.closed
    asyncio.run(scenario())


def test_kio_entity_response_is_encoded_with_header(routes: Callable) -> None:
    from hightide.protocol.build import materialize

    async def scenario() -> None:
        h = harness(routes)
        cls = load_response_schema(SYNC_KEY, 3)
        resp = materialize(cls, {"throttle_time": 0, "error_code": 0, "groups": []})
        routes(SYNC_KEY, 3, 3, lambda ctx, req: resp)
        h.receive(encode_request(SYNC_KEY, 3, 77, None, __import__(
            "kio.schema.list_groups.v3.request", fromlist=["x"]).ListGroupsRequest()))
        (frame,) = h.transport.frames()
        assert frame[:5] == (77).to_bytes(4, "big") + b"\x00"  # response header v1
        decoded, _ = entity_reader(cls)(memoryview(frame).toreadonly(), 5)
        assert decoded == resp and decoded.throttle_time == datetime.timedelta(0)
    asyncio.run(scenario())


# -- back-pressure ----------------------------------------------------------------------


def test_backpressure_pauses_and_resumes(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes, **{"queued.max.requests": 4})
        h.receive(async_req(1) + async_req(2) + async_req(3))
        assert not h.transport.paused
        h.receive(async_req(4))
        assert h.transport.paused and h.transport.pauses == 1
        h.complete(1)
        await settle()
        assert h.transport.paused  # 3 in flight: not below 4 // 2 + 1
        h.complete(2)
        await settle()
        assert not h.transport.paused and h.transport.resumes == 1
        h.complete(3)
        h.complete(4)
        await settle()
        assert h.transport.correlation_ids() == [1, 2, 3, 4]
        assert (h.transport.pauses, h.transport.resumes) == (1, 1)
    asyncio.run(scenario())


def test_backpressure_counts_sync_responses_queued_behind_a_slow_one(routes: Callable) -> None:
    # Regression: answered requests waiting behind a pending one did not count, so a
    # client could pipeline without limit behind a long poll.
    async def scenario() -> None:
        h = harness(routes, **{"queued.max.requests": 4})
        h.receive(async_req(1) + sync_req(2) + sync_req(3))
        assert not h.transport.paused
        h.receive(sync_req(4))
        assert h.transport.paused and h.conn.in_flight == 4
        h.complete(1)
        await settle()
        assert not h.transport.paused and h.conn.in_flight == 0
        assert h.transport.correlation_ids() == [1, 2, 3, 4]
    asyncio.run(scenario())


def test_requests_in_one_read_beyond_the_limit_wait_for_back_pressure_to_clear(routes: Callable) -> None:
    # Everything pipelined in one read used to be dispatched at once, however far past
    # queued.max.requests; the rest is now held (copied) until the queue drains.
    async def scenario() -> None:
        h = harness(routes, **{"queued.max.requests": 2})
        h.receive(b"".join(async_req(i) for i in range(1, 7)))
        assert h.transport.paused and [c for c, _ in h.requests] == [1, 2]
        assert h.conn.in_flight == 6
        h.complete(1)
        h.complete(2)
        await settle()
        assert [c for c, _ in h.requests] == [1, 2, 3, 4]  # two more, then paused again
        assert h.transport.paused
        for corr in (3, 4):
            h.complete(corr)
        await settle()
        for corr in (5, 6):
            h.complete(corr)
        await settle()
        assert not h.transport.paused and h.conn.in_flight == 0
        assert h.transport.correlation_ids() == [1, 2, 3, 4, 5, 6]
    asyncio.run(scenario())


def test_full_write_buffer_pauses_reading(routes: Callable) -> None:
    # A client that sends without reading its answers: the transport reports its
    # write buffer full and reading stops until it drains; held requests then run.
    async def scenario() -> None:
        h = harness(routes)
        assert h.transport.write_high is not None
        h.receive(sync_req(1))
        h.conn.pause_writing()
        assert h.transport.paused
        h.receive(sync_req(2) + sync_req(3))  # already in flight from the kernel: held
        assert [c for c, _ in h.requests] == [1]
        h.conn.resume_writing()
        assert not h.transport.paused
        assert h.transport.correlation_ids() == [1, 2, 3]
    asyncio.run(scenario())


# -- closing ----------------------------------------------------------------------------


def test_unknown_api_key_closes(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        frame = bytearray(sync_req(1))
        frame[4:6] = (9999).to_bytes(2, "big")
        h.receive(bytes(frame) + sync_req(2))
        assert h.transport.closed and h.conn.closing
        assert h.transport.chunks == [] and h.requests == []  # nothing after it is handled
    asyncio.run(scenario())


def test_unsupported_version_closes(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 1, 4, h.sync_handler)
        h.receive(sync_req(1))
        assert h.transport.closed and h.requests == []
    asyncio.run(scenario())


def test_api_versions_out_of_range_gets_fallback(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        routes(API_VERSIONS, 0, 2, h.sync_handler)
        from kio.schema.api_versions.v3.request import ApiVersionsRequest
        h.receive(async_req(1) + encode_request(API_VERSIONS, 3, 2, "c",
                                                ApiVersionsRequest(client_software_name="x",
                                                                   client_software_version="1")))
        assert h.requests == [(1, FindCoordinatorRequest(key="g1"))]  # the handler never saw request 2
        assert h.transport.chunks == []  # the fallback waits for the answer to request 1
        h.complete(1)
        await settle()
        assert h.transport.correlation_ids() == [1, 2] and not h.transport.closed
        fallback = load_response_schema(API_VERSIONS, 0)
        decoded, _ = entity_reader(fallback)(memoryview(h.transport.frames()[1]).toreadonly(), 4)  # header v0
        assert decoded.error_code == 35  # UNSUPPORTED_VERSION
        assert (API_VERSIONS, 0, 2) in [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys]
    asyncio.run(scenario())


def test_close_connection_from_handler(routes: Callable) -> None:
    def refuse(ctx: RequestContext, req: Any) -> Any:
        raise CloseConnection("acks=0 produce failed")

    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 0, 4, refuse)
        h.receive(sync_req(1) + async_req(2))
        assert h.transport.closed and h.transport.chunks == []
        assert h.pending == {}  # the request after it was never dispatched
    asyncio.run(scenario())


def test_handler_exception_closes(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 0, 4, lambda ctx, req: 1 / 0)
        h.receive(sync_req(1))
        assert h.transport.closed
    asyncio.run(scenario())


def test_async_handler_failure_closes(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        h.receive(async_req(1))
        h.pending.pop(1).set_exception(RuntimeError("boom"))
        await settle()
        assert h.transport.closed and h.transport.chunks == []
    asyncio.run(scenario())


def test_oversized_and_malformed_frames_close(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes, **{"socket.request.max.bytes": 100})
        h.receive((101).to_bytes(4, "big"))
        assert h.transport.closed

        h = harness(routes)
        h.receive((3).to_bytes(4, "big") + b"\x00\x10\x00")  # a frame too short for a header
        assert h.transport.closed

        h = harness(routes)
        bad = bytearray(async_req(1))
        assert bad[-4:] == b"\x00\x02g1"
        bad[-4:-2] = b"\x7f\xff"  # string length past the end of the frame
        h.receive(bytes(bad))
        assert h.transport.closed and h.requests == []
    asyncio.run(scenario())


def test_connection_lifecycle(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        assert h.broker.connections == {h.conn} and h.conn.peer == "127.0.0.1:54321"
        h.receive(async_req(1))
        fut = h.pending[1]
        h.conn.connection_lost(None)
        await settle()
        assert h.broker.connections == set() and fut.cancelled()
        assert h.conn.closing
    asyncio.run(scenario())


def test_eof_with_in_flight_requests_closes_after_flush(routes: Callable) -> None:
    async def scenario() -> None:
        h = harness(routes)
        assert h.conn.eof_received() is False  # nothing in flight: let asyncio close
        h = harness(routes)
        h.receive(async_req(1) + sync_req(2))
        assert h.conn.eof_received() is True  # keep the write side open
        assert not h.transport.closed
        h.complete(1)
        await settle()
        assert h.transport.correlation_ids() == [1, 2] and h.transport.closed
    asyncio.run(scenario())


def test_handlers_get_a_typed_context_on_the_broker_services(routes: Callable) -> None:
    seen: list[RequestContext] = []

    async def scenario() -> None:
        services = object()  # a marker: the connection hands the broker's services through as they are
        h = harness(routes, services=services)
        routes(SYNC_KEY, 0, 4, lambda ctx, req: seen.append(ctx) or raw(ctx))
        h.receive(sync_req(7))
        (ctx,) = seen
        assert isinstance(ctx, RequestContext) and ctx.services is services
        assert (ctx.header.correlation_id, ctx.version, ctx.peer) == (7, 0, "127.0.0.1:54321")
        assert abs(ctx.now_ms - time.time() * 1000) < 5000 and ctx.unknown_tags == {}
    asyncio.run(scenario())


def test_protocol_error_from_a_handler_closes_with_the_reason_logged(routes: Callable, caplog) -> None:
    from hightide.protocol.errors import ErrorCode, PeerProtocolError

    def refuse(ctx: RequestContext, req: Any) -> Any:
        raise PeerProtocolError("records are not a record batch", ErrorCode.corrupt_message)

    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 0, 4, refuse)
        with caplog.at_level("WARNING", logger="hightide.server"):
            h.receive(sync_req(1) + sync_req(2))
        assert h.transport.closed and h.transport.chunks == []
        assert "protocol error: records are not a record batch (corrupt_message)" in caplog.text
    asyncio.run(scenario())
