"""Memory unauthenticated clients can make a SASL listener hold (issue 26, item 8), against
a real ``hightide serve`` with a SASL_PLAINTEXT listener (PLAIN).

The independent check: five connections that sent only a 100,000,000 size field took the
broker's RSS from 42 to 518 MB, and it stayed there; 1,200 ordinary logins grew it by
24 MB. Kafka refuses a frame above ``sasl.server.max.receive.size`` before authentication
at its size field, and a closed connection must leave nothing behind.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request, request_schema
from ..conftest import ServerProcess, free_port

pytestmark = pytest.mark.integration

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("sasl-memory")
    srv = ServerProcess(d / "data")
    sasl_port = free_port()
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{srv.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        # long enough that only the size check can close the connections within the test
        "connections.authentication.timeout.ms": "120000",
    }
    srv.args = tuple(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))
    srv.start()
    try:
        yield srv, sasl_port
    finally:
        code = srv.stop()
        out = srv.output()
        assert code == 0, out[-4000:]
        assert "Traceback" not in out, out[-6000:]


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _login(port: int) -> None:
    """One PLAIN login (SaslHandshake v1, SaslAuthenticate v2), then close."""
    handshake = materialize(request_schema(17, 1), {"mechanism": "PLAIN"})
    auth = materialize(request_schema(36, 2), {"auth_bytes": b"\x00alice\x00alice-secret"})
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(17, 1, 1, "login", handshake))
        assert _read_frame(sock)[4:6] == b"\x00\x00"  # correlation id, then error code 0
        sock.sendall(encode_request(36, 2, 2, "login", auth))
        answer = _read_frame(sock)
        assert answer[5:7] == b"\x00\x00", answer  # v2 answers have a tagged header: one byte more


def _closed_by_peer(sock: socket.socket, deadline: float) -> bool:
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if sock.recv(4096) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def test_huge_size_fields_before_authentication_are_refused_without_growing_memory(sasl_broker):
    srv, port = sasl_broker
    assert srv.proc is not None
    pid = srv.proc.pid
    for _ in range(20):  # warm up (imports, caches) before the baseline
        _login(port)
    before = _rss_kb(pid)
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(5)]
    try:
        for s in socks:
            s.sendall((100_000_000).to_bytes(4, "big"))
        deadline = time.monotonic() + 15
        closed = [_closed_by_peer(s, deadline) for s in socks]
        after = _rss_kb(pid)
    finally:
        for s in socks:
            s.close()
    print(f"RSS {before} kB -> {after} kB, closed {closed}")
    assert closed == [True] * 5, closed
    assert after - before < 20_000, f"RSS {before} kB -> {after} kB"
    assert srv.output().count("Failing SASL authentication due to invalid receive size") >= 5


def test_many_logins_do_not_grow_memory(sasl_broker):
    srv, port = sasl_broker
    assert srv.proc is not None
    pid = srv.proc.pid
    for _ in range(200):  # warm up: allocator arenas, caches
        _login(port)
    before = _rss_kb(pid)
    for _ in range(1200):
        _login(port)
    after = _rss_kb(pid)
    print(f"1,200 logins: RSS {before} kB -> {after} kB")
    assert after - before < 8_000, f"RSS {before} kB -> {after} kB after 1,200 logins"
