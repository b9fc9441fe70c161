"""Memory an unauthenticated client can make a SASL listener hold (issue 26, item 8).

A connection on a SASL listener that has not authenticated gets frames only up to
``sasl.server.max.receive.size`` (Kafka's ``SaslServerAuthenticator``): a larger size
field closes the connection before anything of that size is allocated. And a closed
connection is freed by reference counting alone: the broker tunes the collector
(``gc.freeze``, a young threshold of 20,000), so a reference cycle through a closed
connection would keep its buffers for a long time.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import tracemalloc
import weakref
from collections.abc import Iterator

import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request, request_schema
from hightide.security.session import SaslServerConfig
from hightide.server.connection import KafkaConnection
from hightide.server.listener_security import ListenerSecurity

from tests.unit.test_connection import FakeBroker, FakeTransport

HUGE = 100_000_000  # what the independent check sent: just this size field


class SaslHarness:
    """A KafkaConnection on a SASL_PLAINTEXT listener (PLAIN, user alice) over a fake transport."""

    def __init__(self, delay_ms: int = 0, max_receive: int = 524288, **config: object) -> None:
        self.broker = FakeBroker(None, **config)
        sasl = SaslServerConfig(enabled=("PLAIN",), plain_users={"alice": "pw"}, failed_auth_delay_ms=delay_ms,
                                max_receive_size=max_receive)
        self.security = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", sasl=sasl, auth_timeout_ms=60000)
        self.transport = FakeTransport()
        self.conn = KafkaConnection(self.broker, security=self.security)  # type: ignore[arg-type]
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    def receive(self, data: bytes) -> None:
        pos = 0
        while pos < len(data) and not self.transport.closed:
            buf = self.conn.get_buffer(-1)
            n = min(len(buf), len(data) - pos)
            buf[:n] = data[pos:pos + n]
            pos += n
            self.conn.buffer_updated(n)

    def login(self) -> None:
        handshake = materialize(request_schema(17, 1), {"mechanism": "PLAIN"})
        auth = materialize(request_schema(36, 2), {"auth_bytes": b"\x00alice\x00pw"})
        self.receive(encode_request(17, 1, 1, "c", handshake))
        self.receive(encode_request(36, 2, 2, "c", auth))
        assert self.conn.session.authenticated and self.conn.principal == "User:alice"


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The collector off for the test: what is freed is freed by reference counting."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_unauthenticated_size_field_above_the_sasl_limit_closes_without_allocating(caplog) -> None:
    async def scenario() -> None:
        h = SaslHarness(delay_ms=0)
        tracemalloc.start()
        try:
            h.receive(HUGE.to_bytes(4, "big"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1_000_000, f"{peak} bytes allocated for a refused frame"
        await asyncio.sleep(0.02)
        assert h.transport.closed
        assert h.transport.chunks == []  # nothing answered: the frame was never read
    with caplog.at_level(logging.INFO, logger="hightide.server"):
        asyncio.run(scenario())
    assert "Failing SASL authentication due to invalid receive size" in caplog.text
    assert "sasl.server.max.receive.size=524288" in caplog.text


def test_the_sasl_limit_applies_to_every_frame_before_authentication_only() -> None:
    async def scenario() -> None:
        h = SaslHarness(delay_ms=0, max_receive=1000)
        h.receive((1001).to_bytes(4, "big"))  # above the limit, far below socket.request.max.bytes
        await asyncio.sleep(0.02)
        assert h.transport.closed

        h = SaslHarness(delay_ms=0, max_receive=1000)
        h.receive((1000).to_bytes(4, "big") + b"\x00" * 10)  # at the limit: received (waits for the rest)
        await asyncio.sleep(0.02)
        assert not h.transport.closed

        h = SaslHarness(delay_ms=0, max_receive=1000)
        h.login()
        h.receive((200_000).to_bytes(4, "big") + b"\x00" * 10)  # authenticated: socket.request.max.bytes applies
        await asyncio.sleep(0.02)
        assert not h.transport.closed

        h = SaslHarness(delay_ms=0, max_receive=1000)
        h.login()
        handshake = materialize(request_schema(17, 1), {"mechanism": "PLAIN"})
        h.receive(encode_request(17, 1, 3, "c", handshake))  # KIP-368 re-authentication begins
        assert not h.conn.session.authenticated and not h.transport.closed
        h.receive((1001).to_bytes(4, "big"))  # its SaslAuthenticate is bounded again
        assert h.transport.closed
    asyncio.run(scenario())


def test_the_sasl_limit_closes_at_once_and_reads_nothing_more(caplog) -> None:
    """Kafka fails the authentication at the size field and closes without the
    failed-authentication delay (only failures answered with a response are delayed)."""
    async def scenario() -> None:
        h = SaslHarness(delay_ms=500)
        h.receive(HUGE.to_bytes(4, "big") + b"more bytes")
        assert h.transport.closed
        assert h.conn.get_buffer(-1).nbytes < 1_000_000
    with caplog.at_level(logging.INFO, logger="hightide.server"):
        asyncio.run(scenario())
    assert "Failing SASL authentication due to invalid receive size" in caplog.text


@pytest.mark.parametrize("how", ["login", "refused size", "nothing sent", "wrong password"])
def test_a_closed_sasl_connection_is_freed_without_the_collector(no_gc: None, how: str) -> None:
    async def scenario() -> weakref.ref:
        h = SaslHarness(delay_ms=0)
        if how == "login":
            h.login()
        elif how == "refused size":
            h.receive(HUGE.to_bytes(4, "big"))
        elif how == "wrong password":
            handshake = materialize(request_schema(17, 1), {"mechanism": "PLAIN"})
            auth = materialize(request_schema(36, 2), {"auth_bytes": b"\x00alice\x00bad"})
            h.receive(encode_request(17, 1, 1, "c", handshake) + encode_request(36, 2, 2, "c", auth))
        await asyncio.sleep(0.02)  # the failure's close
        ref = weakref.ref(h.conn)
        h.transport.close()
        h.conn.connection_lost(None)
        del h
        await _settle()
        return ref

    ref = asyncio.run(scenario())
    assert ref() is None, [type(r).__name__ for r in gc.get_referrers(ref())]


def test_sasl_server_max_receive_size_is_a_broker_config_the_listeners_read() -> None:
    from hightide.config import BrokerConfig
    from hightide.server.listener_security import listener_security
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";'
    base = {"listener.security.protocol.map": "A:SASL_PLAINTEXT,B:SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.a.plain.sasl.jaas.config": jaas, "listener.name.b.plain.sasl.jaas.config": jaas}

    def limit(cfg: BrokerConfig, name: str) -> int:
        sasl = listener_security(name, cfg.security_values, lambda: None).sasl  # type: ignore[arg-type,return-value]
        assert sasl is not None
        return sasl.max_receive_size

    default = BrokerConfig.load(None, base)
    assert default["sasl.server.max.receive.size"] == 524288 and limit(default, "A") == 524288
    cfg = BrokerConfig.load(None, {**base, "sasl.server.max.receive.size": "4096",
                                   "listener.name.b.sasl.server.max.receive.size": "8192"})
    assert cfg["sasl.server.max.receive.size"] == 4096
    assert limit(cfg, "A") == 4096 and limit(cfg, "B") == 8192
