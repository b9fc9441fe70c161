"""Load, CI-sized (``bench/load.py`` is the long version): 1,000 concurrent connections
are all answered, each in request order, for a bounded memory cost; a client that
pipelines requests without reading its answers is held back by back-pressure
(``queued.max.requests`` and the write buffer) instead of growing the broker's memory,
and others are served meanwhile."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request
from kio.index import load_request_schema

from ..integration.clients import confluent_create_topic
from ..rawkafka import RawClient
from .test_disk_faults import _produce

pytestmark = pytest.mark.integration


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _frame(api_key: int, version: int, corr: int, body: dict) -> bytes:
    return encode_request(api_key, version, corr, "load", materialize(load_request_schema(api_key, version), body))


def _fetch_body(topic: str, max_wait: int, pmax: int = 1 << 20) -> dict:
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": pmax, "current_leader_epoch": -1,
                 "log_start_offset": -1, "last_fetched_epoch": -1}]}], "forgotten_topics_data": [], "rack_id": ""}


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by broker")
        buf += chunk
    return bytes(buf)


def _recv_corr(s: socket.socket) -> tuple[int, int]:
    """(correlation id, frame size) of the next response."""
    size = struct.unpack(">i", _recv_exact(s, 4))[0]
    frame = _recv_exact(s, size)
    return struct.unpack_from(">i", frame, 0)[0], size


def test_thousand_connections_answered_in_order(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 1)  # empty: fetches long-poll
    api_versions = {"client_software_name": "load", "client_software_version": "1"}
    metadata = {"topics": [{"topic_id": None, "name": topic_name}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}
    time.sleep(0.3)  # fixed: the idle broker settles before its RSS baseline (no event to wait for)
    rss0 = _rss_mb(srv.proc.pid)
    socks = []
    expected = []
    for i in range(1000):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        frames = []
        if i % 10 == 0:  # a long poll first: the quick answers behind it must wait for it
            frames.append(_frame(1, 12, 1, _fetch_body(topic_name, max_wait=300)))
        frames.append(_frame(3, 12, 2, metadata))
        frames.append(_frame(18, 3, 3, api_versions))
        s.sendall(b"".join(frames))
        socks.append(s)
        expected.append([1, 2, 3] if i % 10 == 0 else [2, 3])
    rss_connected = _rss_mb(srv.proc.pid)
    t0 = time.monotonic()
    for s, want in zip(socks, expected):
        got = [_recv_corr(s)[0] for _ in want]
        assert got == want, "responses out of request order"
    answered_s = time.monotonic() - t0
    rss_peak = max(rss_connected, _rss_mb(srv.proc.pid))
    assert srv.proc.poll() is None
    for s in socks:
        s.close()
    print(f"1,000 connections: RSS {rss0:.0f} MB idle -> {rss_peak:.0f} MB, all answered in order "
          f"within {answered_s:.2f} s of the last send")
    # a 256 KiB receive buffer per connection cost ~250 MB here before
    assert rss_peak - rss0 < 120, f"1,000 connections cost {rss_peak - rss0:.0f} MB"


def test_client_that_does_not_read_is_held_back(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    with RawClient(srv.bootstrap) as c:
        for _ in range(8):
            assert _produce(c, topic_name, 0, [b"x" * 128 * 1024])[0] == 0  # 1 MiB in the partition
    n = 300  # each answer ~1 MiB: ~300 MB if the broker buffered them all
    request = b"".join(_frame(1, 12, corr, _fetch_body(topic_name, max_wait=0)) for corr in range(1, n + 1))
    time.sleep(0.3)  # fixed: the idle broker settles before its RSS baseline (no event to wait for)
    rss0 = _rss_mb(srv.proc.pid)
    slow = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sender = threading.Thread(target=slow.sendall, args=(request,), daemon=True)
    sender.start()
    peak = rss0
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        peak = max(peak, _rss_mb(srv.proc.pid))
        time.sleep(0.05)  # fixed: the RSS sampling period over the 2 s window
    with RawClient(srv.bootstrap) as other:  # others are served meanwhile
        t0 = time.monotonic()
        other.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        other_ms = (time.monotonic() - t0) * 1000
    corrs = []
    for _ in range(n):
        corr, size = _recv_corr(slow)
        assert size > 500_000
        corrs.append(corr)
        peak = max(peak, _rss_mb(srv.proc.pid)) if len(corrs) % 50 == 0 else peak
    sender.join(10)
    slow.close()
    assert corrs == list(range(1, n + 1)), "responses out of request order"
    print(f"non-reading client, {n} x 1 MiB fetches: broker RSS {rss0:.0f} -> peak {peak:.0f} MB; "
          f"another client answered in {other_ms:.1f} ms")
    assert other_ms < 2000
    assert peak - rss0 < 100, f"broker buffered {peak - rss0:.0f} MB for a client that does not read"
