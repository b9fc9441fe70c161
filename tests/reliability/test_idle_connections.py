"""connections.max.idle.ms: idle (or slow, silent) connections are closed; active ones
are not; the broker logs why."""

from __future__ import annotations

import time

import pytest

from ..rawkafka import RawClient

pytestmark = pytest.mark.integration


def test_idle_connections_are_closed(fresh_server):
    srv = fresh_server("--set", "connections.max.idle.ms=500")
    idle = RawClient(srv.bootstrap)
    busy = RawClient(srv.bootstrap)
    half = RawClient(srv.bootstrap)
    half.send_bytes(b"\x00\x00\x00\x20\x00\x12")  # a request that never finishes arriving
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5:  # keep one connection busy past the idle limit
        busy.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        time.sleep(0.1)  # fixed: pacing of the busy connection's requests, the scenario itself
    assert idle.is_closed(timeout=2)
    assert half.is_closed(timeout=2)
    busy.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})  # still open
    assert "connections.max.idle.ms=500" in srv.output()
    for c in (idle, busy, half):
        c.close()
