"""The in-memory network (hightide.aio.memory_transport): delivery order and timing,
close and reset, reading and writing flow control, addresses — one event loop, no
socket."""

from __future__ import annotations

import asyncio
import errno

import pytest

from hightide.aio.memory_transport import MemoryNetwork, MemoryTransport


def run(coro):
    return asyncio.run(coro)


async def within(awaitable, seconds: float = 5.0):
    async with asyncio.timeout(seconds):
        return await awaitable


class Recorder(asyncio.Protocol):
    """Records every callback; ``keep_open`` is what eof_received answers."""

    def __init__(self, keep_open: bool = False) -> None:
        self.events: list[object] = []
        self.data = bytearray()
        self.transport: asyncio.Transport | None = None
        self.keep_open = keep_open
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        self.data += data
        self.events.append(bytes(data))

    def eof_received(self):
        self.events.append("eof")
        return self.keep_open

    def connection_lost(self, exc):
        self.events.append(("lost", type(exc).__name__ if exc else None))
        self.lost.set_result(exc)

    def pause_writing(self):
        self.events.append("pause_writing")

    def resume_writing(self):
        self.events.append("resume_writing")


class Buffered(asyncio.BufferedProtocol):
    """A BufferedProtocol with a tiny buffer (several get_buffer calls per write)."""

    def __init__(self) -> None:
        self.buf = bytearray(3)
        self.data = bytearray()

    def get_buffer(self, sizehint):
        return memoryview(self.buf)

    def buffer_updated(self, nbytes):
        self.data += self.buf[:nbytes]


async def pair(net: MemoryNetwork | None = None, server_factory=Recorder, client_factory=Recorder):
    net = net or MemoryNetwork()
    servers: list = []

    def make():
        servers.append(server_factory())
        return servers[-1]
    listening = await net.transport("10.0.0.1").listen(make, "127.0.0.1", 0)
    transport, client = await net.transport("10.0.0.2").connect(client_factory, *listening.address)
    return net, listening, transport, client, servers[0]


def test_bytes_arrive_in_order_one_loop_step_later_never_inside_write():
    async def main():
        _, _, t, client, server = await pair()
        assert server.events == ["made"] and client.events == ["made"]
        t.write(b"one")
        t.write(bytearray(b"two"))
        t.writelines([b"thr", b"ee"])
        assert server.data == b""  # never synchronously
        await asyncio.sleep(0)
        assert server.data == b"onetwothree"
        server.transport.write(b"back")
        await asyncio.sleep(0)
        assert client.data == b"back"
    run(main())


def test_a_written_buffer_may_be_reused_at_once():
    async def main():
        _, _, t, _, server = await pair()
        buf = bytearray(b"abc")
        t.write(buf)
        buf[:] = b"xyz"
        await asyncio.sleep(0)
        assert server.data == b"abc"
    run(main())


def test_addresses_and_no_socket_or_tls_info():
    async def main():
        _, listening, t, _, server = await pair()
        host, port = listening.address
        assert host == "127.0.0.1" and port > 0
        assert t.get_extra_info("peername") == (host, port)
        assert server.transport.get_extra_info("peername") == t.get_extra_info("sockname")
        assert t.get_extra_info("sockname")[0] == "10.0.0.2"
        for name in ("socket", "sslcontext", "ssl_object"):
            assert t.get_extra_info(name) is None
    run(main())


def test_close_delivers_pending_data_then_eof_and_connection_lost_to_both_sides():
    async def main():
        _, _, t, client, server = await pair()
        t.write(b"last words")
        t.close()
        assert t.is_closing()
        t.write(b"ignored after close")
        await within(asyncio.gather(client.lost, server.lost))
        assert server.events == ["made", b"last words", "eof", ("lost", None)]
        assert client.events == ["made", ("lost", None)]
    run(main())


def test_a_peer_that_keeps_its_side_open_after_eof_closes_it_later():
    async def main():
        _, _, t, client, server = await pair(server_factory=lambda: Recorder(keep_open=True))
        t.close()
        await client.lost
        await asyncio.sleep(0.01)
        assert server.events == ["made", "eof"] and not server.transport.is_closing()
        server.transport.write(b"to nobody")  # the client end is gone: dropped
        server.transport.close()
        await within(server.lost)
    run(main())


def test_abort_resets_the_peer_and_drops_what_it_did_not_take():
    async def main():
        _, _, t, client, server = await pair()
        server.transport.pause_reading()
        t.write(b"never read")
        await asyncio.sleep(0)
        t.abort()
        await within(asyncio.gather(client.lost, server.lost))
        assert server.events == ["made", ("lost", "ConnectionResetError")]
        assert client.events[-1] == ("lost", None)
    run(main())


def test_reset_breaks_the_connection_both_ways():
    async def main():
        net, _, t, client, server = await pair()
        [conn] = net.connections
        conn.reset()
        await within(asyncio.gather(client.lost, server.lost))
        assert client.events[-1] == server.events[-1] == ("lost", "ConnectionResetError")
        assert not net.connections
    run(main())


def test_paused_reading_keeps_what_arrives_and_resume_hands_it_over_in_order():
    async def main():
        _, _, t, _, server = await pair()
        server.transport.pause_reading()
        assert not server.transport.is_reading()
        t.write(b"a")
        t.write(b"b")
        await asyncio.sleep(0.01)
        assert server.data == b""
        server.transport.resume_reading()
        t.write(b"c")
        await asyncio.sleep(0.01)
        assert server.data == b"abc"
    run(main())


def test_write_flow_control_follows_what_the_peer_takes():
    async def main():
        _, _, t, client, server = await pair()
        t.set_write_buffer_limits(high=10, low=4)
        server.transport.pause_reading()
        t.write(b"x" * 11)
        assert client.events[-1] == "pause_writing" and t.get_write_buffer_size() == 11
        await asyncio.sleep(0.01)
        assert t.get_write_buffer_size() == 11  # arrived, not taken: still counts
        server.transport.resume_reading()
        await asyncio.sleep(0.01)
        assert client.events[-1] == "resume_writing" and t.get_write_buffer_size() == 0
    run(main())


def test_a_buffered_protocol_receives_through_its_buffers():
    async def main():
        _, _, t, _, server = await pair(server_factory=Buffered)
        t.write(b"0123456789")
        await asyncio.sleep(0)
        assert server.data == b"0123456789"
    run(main())


def test_connect_to_nobody_is_refused_and_tls_is_not_offered():
    async def main():
        net = MemoryNetwork()
        with pytest.raises(ConnectionRefusedError) as e:
            await MemoryTransport(net).connect(Recorder, "127.0.0.1", 9092)
        assert e.value.errno == errno.ECONNREFUSED
        listening = await net.transport().listen(Recorder, None, 9092)
        await net.transport().connect(Recorder, "10.1.2.3", 9092)  # a wildcard listener takes any host
        with pytest.raises(OSError) as e:
            await net.transport().listen(Recorder, "127.0.0.1", 9092)
        assert e.value.errno == errno.EADDRINUSE
        listening.close()
        assert not listening.is_serving()
        await listening.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await net.transport().connect(Recorder, "127.0.0.1", 9092)
        import ssl
        with pytest.raises(ValueError, match="TLS"):
            await net.transport().connect(Recorder, "127.0.0.1", 9092, ssl=ssl.create_default_context())
    run(main())


def test_a_failing_protocol_callback_aborts_the_connection():
    class Failing(Recorder):
        def data_received(self, data):
            raise RuntimeError("boom")

    async def main():
        loop = asyncio.get_running_loop()
        errors: list = []
        loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
        _, _, t, client, server = await pair(server_factory=Failing)
        t.write(b"x")
        await within(asyncio.gather(client.lost, server.lost))
        assert client.events[-1] == ("lost", "ConnectionResetError")
        assert isinstance(errors[0]["exception"], RuntimeError)
    run(main())


def test_deliver_is_the_one_hook_every_segment_passes():
    class Counting(MemoryNetwork):
        def __init__(self) -> None:
            super().__init__()
            self.segments = 0

        def deliver(self, conn, to_server, arrive):
            self.segments += 1
            super().deliver(conn, to_server, arrive)

    async def main():
        net = Counting()
        _, _, t, client, server = await pair(net)
        t.write(b"a")
        t.close()
        await within(asyncio.gather(client.lost, server.lost))
        assert net.segments == 3  # the bytes, the client's end of stream, the server's (it closes on eof)
    run(main())
