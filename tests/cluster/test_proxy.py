"""The fault-injecting TCP proxy: forwarding, latency per direction, pause, blackhole,
refuse and reset, against a small echo server."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.waiting import wait_until

from .proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[:2]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[FaultProxy]:
    with FaultProxy(echo) as p:
        yield p


def _connect(p: FaultProxy) -> socket.socket:
    s = socket.create_connection(p.address, timeout=5)
    s.settimeout(5)
    return s


def _roundtrip(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_forwards_both_ways_in_order(proxy: FaultProxy) -> None:
    with _connect(proxy) as s:
        payload = bytes(range(256)) * 1000
        assert _roundtrip(s, payload) == payload
    wait_until(lambda: proxy.up.bytes == proxy.down.bytes == len(payload), what="byte counters")


def test_latency_is_added_per_direction(proxy: FaultProxy) -> None:
    with _connect(proxy) as s:
        _roundtrip(s, b"warm")
        start = time.monotonic()
        _roundtrip(s, b"x")
        base = time.monotonic() - start
        proxy.set_latency(up_ms=150, down_ms=100)
        start = time.monotonic()
        assert _roundtrip(s, b"hello") == b"hello"
        delayed = time.monotonic() - start
    assert delayed >= 0.25, (base, delayed)


def test_pause_holds_bytes_until_resume(proxy: FaultProxy) -> None:
    with _connect(proxy) as s:
        _roundtrip(s, b"warm")
        proxy.pause()
        s.sendall(b"held")
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(10)
        proxy.resume()
        s.settimeout(5)
        assert s.recv(10) == b"held"


def test_blackhole_discards_and_keeps_the_connection(proxy: FaultProxy) -> None:
    with _connect(proxy) as s:
        proxy.blackhole(True)
        s.sendall(b"lost")
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(10)
        assert proxy.open_connections == 1
        proxy.blackhole(False)
        s.settimeout(5)
        assert _roundtrip(s, b"back") == b"back"


def test_close_connections_resets_them(proxy: FaultProxy) -> None:
    with _connect(proxy) as s:
        _roundtrip(s, b"warm")
        proxy.close_connections()
        wait_until(lambda: proxy.open_connections == 0, what="connections closed")
        try:
            data = s.recv(10)
        except ConnectionResetError:
            data = b""
        assert data == b""


def test_refuse_closes_new_connections_only(proxy: FaultProxy) -> None:
    with _connect(proxy) as old:
        _roundtrip(old, b"warm")
        proxy.refuse(True)
        with _connect(proxy) as new:
            try:
                data = new.recv(10)
            except ConnectionResetError:
                data = b""
            assert data == b""
        assert _roundtrip(old, b"still") == b"still"
        proxy.refuse(False)
    with _connect(proxy) as again:
        assert _roundtrip(again, b"ok") == b"ok"


def test_stop_is_idempotent_and_closes_the_listener(echo: tuple[str, int]) -> None:
    p = FaultProxy(echo).start()
    addr = p.address
    p.stop()
    p.stop()
    with pytest.raises(OSError):
        socket.create_connection(addr, timeout=1).close()
