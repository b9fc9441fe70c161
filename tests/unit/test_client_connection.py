"""BrokerConnection against the in-process FakeBroker: handshake and version
negotiation, pipelining with out-of-order responses, timeouts, closing."""

from __future__ import annotations

import asyncio

import pytest

from hightide.client import (
    BrokerConnection,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from hightide.client.connection import decode_response
from hightide.client.errors import ErrorCode
from hightide.client.testing import CLOSE, NO_RESPONSE, FakeBroker
from hightide.protocol.offset_fetch_response import (
    GroupOffsets,
    PartitionOffset,
    encode_offset_fetch_response,
)
from tests.waiting import async_wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def find_coordinator_answer(header, req):
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "node_id": 7,
            "host": req.key, "port": 9092}


async def connect(broker: FakeBroker, **kw) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", broker.port, "test", **kw)
    await conn.connect()
    return conn


def test_handshake_uses_api_versions_v3_and_records_ranges():
    async def main():
        async with FakeBroker({10: (0, 4), 3: (1, 12)}) as broker:
            conn = await connect(broker)
            assert conn.api_versions_version == 3
            assert conn.api_versions[10] == (0, 4) and conn.api_versions[3] == (1, 12)
            assert [h.api_version for h, _ in broker.requests_for(18)] == [3]
            _, req = broker.requests_for(18)[0]
            assert req.client_software_name == "hightide"
            assert broker.requests[0][0].client_id == "test"
            await conn.close()
    run(main())


def test_handshake_falls_back_to_v0_on_unsupported_version():
    async def main():
        # The broker knows only ApiVersions v0: a v3 request is answered with
        # UNSUPPORTED_VERSION in a v0 body; the client retries with v0.
        async with FakeBroker({10: (0, 2)}, api_versions_range=(0, 0)) as broker:
            conn = await connect(broker)
            assert conn.api_versions_version == 0
            assert [h.api_version for h, _ in broker.requests_for(18)] == [3, 0]
            assert conn.api_versions[10] == (0, 2)
            await conn.close()
    run(main())


def test_handshake_falls_back_to_the_advertised_api_versions_max():
    async def main():
        async with FakeBroker({}, api_versions_range=(0, 2)) as broker:
            conn = await connect(broker)
            assert [h.api_version for h, _ in broker.requests_for(18)] == [3, 2]
            assert conn.api_versions_version == 2
            await conn.close()
    run(main())


def test_pick_version_intersects_broker_client_and_kio_ranges():
    async def main():
        async with FakeBroker({9: (1, 9), 2: (1, 11), 47: (0, 0), 10: (2, 3)}) as broker:
            conn = await connect(broker)
            assert conn.pick_version(9, 9, 2) == 9
            assert conn.pick_version(9, 7, 2) == 7
            assert conn.pick_version(2, 20, 1) == 11  # kio knows ListOffsets up to v11
            assert conn.pick_version(47, 0, 0) == 0
            with pytest.raises(UnsupportedVersionError) as e:
                conn.pick_version(10, 1, 0)  # broker offers 2..3 only
            assert e.value.code == ErrorCode.unsupported_version and not e.value.retriable
            with pytest.raises(UnsupportedVersionError):
                conn.pick_version(16, 5, 0)  # not advertised at all
            assert conn.supports(9, 9) and not conn.supports(9, 10) and not conn.supports(16)
            await conn.close()
    run(main())


def test_pipelined_requests_are_matched_by_correlation_id():
    async def main():
        async with FakeBroker({10: (0, 3)}) as broker:
            delays = {"slow": 0.3, "medium": 0.15, "fast": 0.0}

            async def answer(header, req):
                await asyncio.sleep(delays[req.key])  # responses leave in reverse order
                return find_coordinator_answer(header, req)
            broker.on(10, answer)
            conn = await connect(broker)
            keys = ["slow", "medium", "fast"]
            got = await asyncio.gather(*(conn.request(10, 3, {"key": k, "key_type": 0}) for k in keys))
            assert [r.host for r in got] == keys
            corrs = [h.correlation_id for h, _ in broker.requests_for(10)]
            assert len(set(corrs)) == 3
            # all three were on the wire before the first answer came back
            assert broker.connections == 1
            await conn.close()
    run(main())


def test_timeout_drops_the_request_but_keeps_the_connection():
    async def main():
        async with FakeBroker({10: (0, 3)}) as broker:
            first = asyncio.Event()

            async def answer(header, req):
                if req.key == "never":
                    first.set()
                    return NO_RESPONSE
                return find_coordinator_answer(header, req)
            broker.on(10, answer)
            conn = await connect(broker, request_timeout_s=5)
            with pytest.raises(KafkaTimeoutError) as e:
                await conn.request(10, 3, {"key": "never", "key_type": 0}, timeout_s=0.2)
            assert e.value.code == ErrorCode.request_timed_out and e.value.retriable
            r = await conn.request(10, 3, {"key": "after", "key_type": 0})
            assert r.host == "after" and conn.connected
            await conn.close()
    run(main())


def test_late_response_to_a_timed_out_request_is_ignored():
    async def main():
        async with FakeBroker({10: (0, 3)}) as broker:
            async def answer(header, req):
                await asyncio.sleep(0.3 if req.key == "late" else 0.4)
                return find_coordinator_answer(header, req)
            broker.on(10, answer)
            conn = await connect(broker)
            late = conn.request(10, 3, {"key": "late", "key_type": 0}, timeout_s=0.1)
            other = conn.request(10, 3, {"key": "other", "key_type": 0})
            res = await asyncio.gather(late, other, return_exceptions=True)
            assert isinstance(res[0], KafkaTimeoutError)
            assert res[1].host == "other"
            await conn.close()
    run(main())


def test_broker_closing_fails_all_pending_requests():
    async def main():
        async with FakeBroker({10: (0, 3)}) as broker:
            async def answer(header, req):
                if req.key == "close":
                    await asyncio.sleep(0.1)
                    return CLOSE
                return NO_RESPONSE
            broker.on(10, answer)
            conn = await connect(broker)
            res = await asyncio.gather(
                conn.request(10, 3, {"key": "pending", "key_type": 0}),
                conn.request(10, 3, {"key": "close", "key_type": 0}), return_exceptions=True)
            assert all(isinstance(r, KafkaConnectionError) for r in res), res
            assert res[0].code == ErrorCode.network_exception and res[0].retriable
            assert not conn.connected
            with pytest.raises(KafkaConnectionError):
                await conn.request(10, 3, {"key": "x", "key_type": 0})
            await conn.close()
    run(main())


def test_close_fails_pending_and_is_idempotent():
    async def main():
        async with FakeBroker({10: (0, 3)}) as broker:
            broker.on(10, lambda h, r: NO_RESPONSE)
            conn = await connect(broker)
            pending = asyncio.ensure_future(conn.request(10, 3, {"key": "k", "key_type": 0}))
            await async_wait_until(lambda: broker.requests_for(10), timeout=5, what="the request at the broker")
            await conn.close()
            await conn.close()
            with pytest.raises(KafkaConnectionError):
                await pending
    run(main())


def test_connect_refused_is_a_connection_error():
    async def main():
        broker = FakeBroker()
        await broker.start()
        port = broker.port
        await broker.close()
        with pytest.raises(KafkaConnectionError):
            await BrokerConnection("127.0.0.1", port).connect()
    run(main())


def test_decode_response_collects_unknown_tags():
    """hightide's OffsetFetch extension tags (10000-10002) reach the caller as raw bytes."""
    frame = encode_offset_fetch_response(9, 42, [GroupOffsets("g", 0, [
        ("t", [PartitionOffset(0, 5, high_watermark=9, log_start_offset=2, last_stable_offset=8)])])])
    unknown: dict = {}
    corr, resp = decode_response(9, 9, frame[4:], unknown)
    assert corr == 42
    p = resp.groups[0].topics[0].partitions[0]
    assert p.committed_offset == 5
    assert unknown[id(p)] == {10000: (9).to_bytes(8, "big"), 10001: (2).to_bytes(8, "big"),
                              10002: (8).to_bytes(8, "big")}
    # without a dict to collect into, unknown tags are still skipped, not fatal
    _, resp2 = decode_response(9, 9, frame[4:])
    assert resp2.groups[0].topics[0].partitions[0].committed_offset == 5


def test_a_cancel_in_the_loop_step_of_the_response_ends_the_request_cancelled():
    """Issue 26 item 3: ``asyncio.wait_for`` (Python 3.11) returned the response and
    swallowed a cancellation that arrived in the same loop step, so the metadata
    follower's fetch loop (cancelled at shutdown) went on fetching forever. The caller's
    cancellation must win: the request ends cancelled."""
    import struct

    async def main():
        async with FakeBroker({10: (0, 4)}) as broker:
            broker.on(10, lambda header, req: NO_RESPONSE)
            conn = await connect(broker)
            task = asyncio.ensure_future(conn.request(10, 3, {"key": "k", "key_type": 0},
                                                      decoder=lambda frame: "the answer"))
            await async_wait_until(lambda: bool(conn._pending))
            corr = next(iter(conn._pending))
            frame = struct.pack(">i", corr) + b"\0"
            conn._on_events(conn._core.receive_data(struct.pack(">i", len(frame)) + frame))  # the response arrives ...
            task.cancel()  # ... in the same loop step as the cancellation
            done, _ = await asyncio.wait((task,), timeout=5)
            assert done, "the request did not end"
            assert task.cancelled(), f"the cancellation was swallowed: the request returned {task.result()!r}"
            await conn.close()
    run(main())


def test_the_connection_runs_over_any_transport():
    """The same BrokerConnection over the in-memory network: handshake with the v0
    fallback, pipelined answers out of order, the broker closing."""
    from hightide.aio.memory_transport import MemoryTransport

    async def main():
        transport = MemoryTransport()
        async with FakeBroker({10: (0, 3)}, api_versions_range=(0, 2), transport=transport) as broker:
            async def answer(header, req):
                await asyncio.sleep({"slow": 0.05, "fast": 0.0, "close": 0.1}[req.key])
                return CLOSE if req.key == "close" else find_coordinator_answer(header, req)
            broker.on(10, answer)
            conn = await connect(broker, transport=transport)
            assert conn.api_versions_version == 2 and conn.api_versions[10] == (0, 3)
            got = await asyncio.gather(*(conn.request(10, 3, {"key": k, "key_type": 0}) for k in ("slow", "fast")))
            assert [r.host for r in got] == ["slow", "fast"]
            with pytest.raises(KafkaConnectionError):
                await conn.request(10, 3, {"key": "close", "key_type": 0})
            assert not conn.connected
            await conn.close()
        with pytest.raises(KafkaConnectionError, match="cannot connect"):
            await BrokerConnection("127.0.0.1", broker.port, transport=transport).connect()
    run(main())


def test_a_full_write_buffer_holds_requests_within_their_deadline():
    """Write flow control: while the broker reads nothing (its reading paused), the
    transport's write buffer fills and pauses writing; a request then waits for room
    only until its deadline (KafkaTimeoutError), and once the broker reads again the
    connection carries on."""
    from hightide.aio.memory_transport import MemoryNetwork

    async def main():
        net = MemoryNetwork()
        async with FakeBroker({10: (0, 3)}, transport=net.transport()) as broker:
            broker.on(10, find_coordinator_answer)
            conn = await connect(broker, transport=net.transport())
            [link] = net.connections
            link.server.pause_reading()
            big = "k" * 100_000  # above the write buffer's 64 KiB high-water mark
            with pytest.raises(KafkaTimeoutError):
                await conn.request(10, 3, {"key": big, "key_type": 0}, timeout_s=0.3)
            assert conn._write_paused and conn.connected
            link.server.resume_reading()
            r = await conn.request(10, 3, {"key": "after", "key_type": 0}, timeout_s=5)
            assert r.host == "after" and not conn._write_paused
            await conn.close()
    run(main())
