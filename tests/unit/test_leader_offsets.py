"""The coordinator's questions to partition leaders for OffsetFetch's extension tags
(issue 15, item 3) are bounded: a leader that accepts the connection but never answers
(paused) costs at most ``timeout_s`` once, then is not asked for ``retry_after_s``; a
dead or unknown leader costs nothing; nothing raises."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hightide.aio.transport import LOOP_TRANSPORT
from hightide.replica.leader_offsets import LeaderOffsets


class Peers:
    """Stands in for InterBrokerClients: addresses by node id, no TLS/SASL, TCP."""

    transport = LOOP_TRANSPORT

    def __init__(self, addresses: dict[int, tuple[str, int]]) -> None:
        self.addresses = addresses

    def address(self, node_id: int) -> tuple[str, int] | None:
        return self.addresses.get(node_id)

    def inter_broker(self) -> tuple[str, Any]:
        return "PLAINTEXT", None


def offsets(addresses: dict[int, tuple[str, int]], timeout_s: float = 0.3, retry_after_s: float = 5.0
            ) -> LeaderOffsets:
    return LeaderOffsets(Peers(addresses), 1, timeout_s=timeout_s, retry_after_s=retry_after_s)


def test_a_leader_that_never_answers_costs_one_timeout_then_is_skipped() -> None:
    async def go() -> None:
        accepted: list[asyncio.StreamWriter] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)  # reads nothing, answers nothing: a SIGSTOPped broker
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        lo = offsets({2: ("127.0.0.1", port)})
        try:
            t0 = time.monotonic()
            assert await lo.bounds({("t", 0): (2, 5), ("t", 1): (2, 5)}) == {}
            first = time.monotonic() - t0
            assert 0.25 <= first < 2.0, first
            t0 = time.monotonic()
            assert await lo.bounds({("t", 0): (2, 5)}) == {}
            assert time.monotonic() - t0 < 0.1  # not asked again within retry_after_s
            assert len(accepted) == 1
        finally:
            await lo.close()
            for w in accepted:
                w.close()
            server.close()
            await server.wait_closed()
    asyncio.run(go())


def test_a_dead_or_unknown_leader_gives_nothing_at_once() -> None:
    async def go() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()  # nothing listens there now: connection refused
        lo = offsets({2: ("127.0.0.1", port)}, timeout_s=5.0)
        try:
            t0 = time.monotonic()
            assert await lo.bounds({("t", 0): (2, 5), ("t", 1): (3, 5)}) == {}  # 3: not registered
            assert time.monotonic() - t0 < 1.0
        finally:
            await lo.close()
    asyncio.run(go())
